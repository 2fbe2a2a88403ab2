package v1alpha1_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gryvia/gryvia/sdk/go/api/v1alpha1"
	"github.com/gryvia/gryvia/sdk/go/internal/crdgen"
	"github.com/gryvia/gryvia/sdk/go/internal/deepcopytest"
	"github.com/gryvia/gryvia/sdk/go/internal/fixtures"
	"github.com/gryvia/gryvia/sdk/go/internal/jsondiff"
)

// Paths from this package's directory (sdk/go/api/v1alpha1) to the repository's inputs.
const (
	crdDir     = "../../../../deploy/crds"
	fixtureDir = "../../../../gryvia-types/tests/data"
)

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatalf("add to scheme: %v", err)
	}
	return scheme
}

func TestEveryCRDKindAndItsListAreRegistered(t *testing.T) {
	crds, err := crdgen.LoadDir(crdDir)
	if err != nil {
		t.Fatalf("load CRDs: %v", err)
	}
	scheme := newScheme(t)
	infos := map[string]v1alpha1.KindInfo{}
	for _, info := range v1alpha1.Kinds() {
		infos[info.Kind] = info
	}
	if len(infos) != len(crds) {
		t.Errorf("Kinds() has %d kinds, deploy/crds %d CRDs", len(infos), len(crds))
	}
	for _, crd := range crds {
		kind := crd.Spec.Names.Kind
		if crd.Spec.Group != v1alpha1.GroupVersion.Group {
			t.Errorf("CRD %s: group %q, package group %q", crd.Name, crd.Spec.Group, v1alpha1.GroupVersion.Group)
		}
		for _, name := range []string{kind, kind + "List"} {
			gvk := v1alpha1.GroupVersion.WithKind(name)
			obj, err := scheme.New(gvk)
			if err != nil {
				t.Errorf("%s is not registered: %v", gvk, err)
				continue
			}
			if got := reflect.TypeOf(obj).Elem().Name(); got != name {
				t.Errorf("%s is registered as Go type %s", gvk, got)
			}
		}
		info, ok := infos[kind]
		if !ok {
			t.Errorf("Kinds() lacks %s", kind)
			continue
		}
		if info.Plural != crd.Spec.Names.Plural || info.Namespaced != (crd.Spec.Scope == "Namespaced") {
			t.Errorf("Kinds() describes %s as %+v; the CRD says plural %s, scope %s", kind, info, crd.Spec.Names.Plural, crd.Spec.Scope)
		}
	}
	if got := v1alpha1.Resource("gryviaaijobs").String(); got != "gryviaaijobs.gryvia.io" {
		t.Errorf("Resource(gryviaaijobs) = %s", got)
	}
}

// Every generated type, nested ones included, is filled through every pointer, slice and map,
// copied, and the copy mutated in place: the original must not change.
func TestDeepCopyOfEveryTypeSharesNoMemoryWithTheOriginal(t *testing.T) {
	scheme := newScheme(t)
	var roots []any
	names := make([]string, 0)
	for name := range scheme.KnownTypes(v1alpha1.GroupVersion) {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		obj, err := scheme.New(v1alpha1.GroupVersion.WithKind(name))
		if err != nil {
			t.Fatalf("new %s: %v", name, err)
		}
		// The group version also holds metav1's WatchEvent, ListOptions and the like.
		if reflect.TypeOf(obj).Elem().PkgPath() == reflect.TypeOf(v1alpha1.GryviaAIJob{}).PkgPath() {
			roots = append(roots, obj)
		}
	}
	types := deepcopytest.Types(roots...)
	if len(types) < 2*len(v1alpha1.Kinds()) {
		t.Fatalf("found %d types from %d roots; the walk missed the kinds", len(types), len(roots))
	}
	for _, obj := range types {
		t.Run(reflect.TypeOf(obj).Elem().Name(), func(t *testing.T) {
			deepcopytest.CheckDeepCopy(t, obj)
		})
	}
}

func TestDeepCopyObjectReturnsAnIndependentObject(t *testing.T) {
	job := &v1alpha1.GryviaAIJob{}
	deepcopytest.Fill(job)
	copied, ok := job.DeepCopyObject().(*v1alpha1.GryviaAIJob)
	if !ok {
		t.Fatalf("DeepCopyObject returned %T", job.DeepCopyObject())
	}
	copied.Spec.Storage.Size.Add(copied.Spec.Storage.Size)
	copied.Spec.Env[0].Name = "CHANGED"
	copied.Labels["k1"] = "CHANGED"
	if job.Spec.Env[0].Name == "CHANGED" || job.Labels["k1"] == "CHANGED" || job.Spec.Storage.Size.String() != "1500m" {
		t.Fatal("changing the DeepCopyObject result changed the original")
	}
	var nilJob *v1alpha1.GryviaAIJob
	if nilJob.DeepCopy() != nil {
		t.Fatal("DeepCopy of a nil job is not nil")
	}
}

func loadFixtures(t *testing.T, pattern string) []fixtures.Fixture {
	t.Helper()
	loaded, err := fixtures.Load(fixtureDir, pattern)
	if err != nil {
		t.Fatal(err)
	}
	return loaded
}

// decodeStrict decodes data into obj and fails on any field obj's type does not declare.
func decodeStrict(data []byte, obj any) error {
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	return decoder.Decode(obj)
}

// Every example object of every kind decodes into the typed structs without unknown fields and
// encodes back to the same JSON.
func TestExampleObjectsOfEveryKindRoundTripThroughTheTypes(t *testing.T) {
	scheme := newScheme(t)
	fixtures := append(loadFixtures(t, "valid/*.yaml"), loadFixtures(t, "guide/*.yaml")...)
	covered := map[string]bool{}
	for _, f := range fixtures {
		t.Run(f.File+"/"+f.Kind, func(t *testing.T) {
			obj, err := scheme.New(v1alpha1.GroupVersion.WithKind(f.Kind))
			if err != nil {
				t.Fatalf("kind %s: %v", f.Kind, err)
			}
			if err := decodeStrict(f.JSON, obj); err != nil {
				t.Fatalf("decode into %T: %v", obj, err)
			}
			encoded, err := json.Marshal(obj)
			if err != nil {
				t.Fatalf("encode %T: %v", obj, err)
			}
			if diff := jsondiff.Diff(f.JSON, encoded); diff != "" {
				t.Fatalf("round trip through %T changed the object: %s", obj, diff)
			}
			covered[f.Kind] = true
		})
	}
	for _, info := range v1alpha1.Kinds() {
		if !covered[info.Kind] {
			t.Errorf("no example of %s in %s round-tripped", info.Kind, fixtureDir)
		}
	}
}
