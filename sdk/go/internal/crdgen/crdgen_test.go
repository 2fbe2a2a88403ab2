package crdgen

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

var update = flag.Bool("update", false, "rewrite the golden package internal/crdgen/widgetsv1")

const goldenDir = "widgetsv1"

func widgetOptions() Options {
	return Options{Version: "v1", Package: "widgetsv1", Source: "internal/crdgen/testdata/widgets.yaml"}
}

func generateWidgets(t *testing.T) map[string]string {
	t.Helper()
	crds, err := LoadDir("testdata")
	if err != nil {
		t.Fatalf("load testdata: %v", err)
	}
	files, err := Generate(crds, widgetOptions())
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	out := map[string]string{}
	for _, f := range files {
		out[f.Name] = string(f.Content)
	}
	return out
}

// The widgets CRDs generate exactly the checked-in package widgetsv1, which `go vet ./...`
// compiles and whose own tests exercise the deep copies of the odd types.
func TestGoldenWidgets(t *testing.T) {
	crds, err := LoadDir("testdata")
	if err != nil {
		t.Fatalf("load testdata: %v", err)
	}
	files, err := Generate(crds, widgetOptions())
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	if *update {
		if err := Write(goldenDir, files); err != nil {
			t.Fatalf("update golden: %v", err)
		}
	}
	stale, err := Stale(goldenDir, files)
	if err != nil {
		t.Fatalf("compare golden: %v", err)
	}
	if len(stale) > 0 {
		t.Fatalf("golden files differ from the generator's output: %v; rerun with -update and review the diff", stale)
	}
}

func TestGeneratedTypesFollowTheSchema(t *testing.T) {
	types := generateWidgets(t)[TypesFile]
	wantLines := []string{
		// kinds: TypeMeta, ObjectMeta, required spec, optional status
		"type Widget struct {",
		"metav1.TypeMeta `json:\",inline\"`",
		"metav1.ObjectMeta `json:\"metadata,omitempty\"`",
		"Spec WidgetSpec `json:\"spec\"`",
		"Status *WidgetStatus `json:\"status,omitempty\"`",
		"type WidgetList struct {",
		"metav1.ListMeta `json:\"metadata,omitempty\"`",
		"Items []Widget `json:\"items\"`",
		// a kind whose spec is optional
		"Spec *GadgetSpec `json:\"spec,omitempty\"`",
		// required scalars are plain, optional ones pointers with omitempty
		"Name string `json:\"name\"`",
		"Count *int32 `json:\"count,omitempty\"`",
		"Ratio *float32 `json:\"ratio,omitempty\"`",
		"Weight *float64 `json:\"weight,omitempty\"`",
		"Enabled *bool `json:\"enabled,omitempty\"`",
		// enums
		"Mode *WidgetSpecMode `json:\"mode,omitempty\"`",
		"type WidgetSpecMode string",
		"WidgetSpecModeFast WidgetSpecMode = \"fast\"",
		"WidgetSpecModeSlowAndSteady WidgetSpecMode = \"slow-and-steady\"",
		// identical enums share one type
		"Phase *WidgetSpecMode `json:\"phase,omitempty\"`",
		// int-or-string: bare and quantity pattern -> Quantity, other pattern -> IntOrString
		"Size *resource.Quantity `json:\"size,omitempty\"`",
		"Limit *resource.Quantity `json:\"limit,omitempty\"`",
		"Port *intstr.IntOrString `json:\"port,omitempty\"`",
		"CreatedAt *metav1.Time `json:\"createdAt,omitempty\"`",
		"Blob []byte `json:\"blob,omitempty\"`",
		"Labels map[string]string `json:\"labels,omitempty\"`",
		// an optional collection defaulted to empty keeps [] / {} through a round trip
		"Aliases []string `json:\"aliases\"`",
		"Annotations map[string]string `json:\"annotations\"`",
		"History []string `json:\"history,omitempty\"`",
		// arrays: required slice without omitempty, element named in the singular
		"Parts []WidgetSpecPart `json:\"parts\"`",
		"Tags []string `json:\"tags,omitempty\"`",
		"Limits map[string]resource.Quantity `json:\"limits,omitempty\"`",
		"ByZone map[string]WidgetSpecByZone `json:\"byZone,omitempty\"`",
		"Matrix [][]int32 `json:\"matrix,omitempty\"`",
		// free-form and embedded objects
		"Config *apiextensionsv1.JSON `json:\"config,omitempty\"`",
		"Extras map[string]apiextensionsv1.JSON `json:\"extras,omitempty\"`",
		"Template *runtime.RawExtension `json:\"template,omitempty\"`",
		"Marker *WidgetSpecMarker `json:\"marker,omitempty\"`",
		"type WidgetSpecMarker struct {\n}",
		// the shared struct is named after its shallowest use (Gadget .spec), not the first
		"Owner *GadgetSpec `json:\"owner,omitempty\"`",
		// a property name that starts with a digit
		"X3dModel *string `json:\"3d-model,omitempty\"`",
		// conditions
		"Conditions []metav1.Condition `json:\"conditions,omitempty\"`",
	}
	for _, want := range wantLines {
		if !containsIgnoringAlignment(types, want) {
			t.Errorf("types file lacks %q", want)
		}
	}
	for _, unwanted := range []string{"type WidgetSpecOwner struct", "type WidgetStatusPhase string", "type WidgetStatusCondition struct"} {
		if strings.Contains(types, unwanted) {
			t.Errorf("types file has %q, which should be shared or mapped to an existing type", unwanted)
		}
	}
	docs := []string{
		"// Name of the widget.\n",
		"// The API server defaults it to 1.\n",
		"// +listType=map\n",
		"// +listMapKey=name\n",
		"// Widget is a kind of the example.com/v1 API (namespaced, resource widgets, short names wdg).\n",
		"// WidgetSpecMode is the set of values of Widget .spec.mode and of 1 other field with the same values.\n",
		"// WidgetSpec is the schema of Widget .spec.\n",
		"// GadgetSpec is the schema of Gadget .spec and of 1 other field with the same schema.\n",
	}
	for _, want := range docs {
		if !strings.Contains(types, want) {
			t.Errorf("types file lacks the comment %q", want)
		}
	}
	if !strings.HasPrefix(types, "// Code generated by gryvia-gen from internal/crdgen/testdata/widgets.yaml. DO NOT EDIT.\n") {
		t.Errorf("types file does not start with the generated-code header: %q", types[:80])
	}
}

// gofmt aligns struct fields and tags; compare with runs of spaces and tabs collapsed.
func containsIgnoringAlignment(text, want string) bool {
	space := regexp.MustCompile(`[ \t]+`)
	return strings.Contains(space.ReplaceAllString(text, " "), space.ReplaceAllString(want, " "))
}

func TestDeepCopyCodeCopiesEveryReference(t *testing.T) {
	deepcopy := generateWidgets(t)[DeepCopyFile]
	for _, want := range []string{
		"func (in *Widget) DeepCopyObject() runtime.Object {",
		"func (in *WidgetList) DeepCopyObject() runtime.Object {",
		"in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)",
		"in.ListMeta.DeepCopyInto(&out.ListMeta)",
		"in.Spec.DeepCopyInto(&out.Spec)",
		"*out = make(map[string]WidgetSpecByZone, len(*in))",
		"*out = make([][]int32, len(*in))",
		"*out = new(intstr.IntOrString)\n\t\t**out = **in",
		"*out = new(resource.Quantity)\n\t\t(*in).DeepCopyInto(*out)",
	} {
		if !strings.Contains(deepcopy, want) {
			t.Errorf("deepcopy file lacks %q", want)
		}
	}
	if strings.Contains(deepcopy, "func (in *WidgetSpecMode)") {
		t.Error("deepcopy file has methods on an enum, a plain string")
	}
}

func TestRegisterFileRegistersEveryKindAndList(t *testing.T) {
	register := generateWidgets(t)[RegisterFile]
	for _, want := range []string{
		`var GroupVersion = schema.GroupVersion{Group: "example.com", Version: "v1"}`,
		"SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)",
		"AddToScheme = SchemeBuilder.AddToScheme",
		"&Gadget{}, &GadgetList{},",
		"&Widget{}, &WidgetList{},",
		`{Kind: "Widget", ListKind: "WidgetList", Plural: "widgets", Singular: "widget", ShortNames: []string{"wdg"}, Categories: []string{"example"}, Namespaced: true, StatusSubresource: true},`,
		`{Kind: "Gadget", ListKind: "GadgetList", Plural: "gadgets", Singular: "gadget", ShortNames: nil, Categories: nil, Namespaced: false, StatusSubresource: false},`,
	} {
		if !strings.Contains(register, want) {
			t.Errorf("register file lacks %q", want)
		}
	}
}

func TestOutputIsTheSameWhateverTheInputOrder(t *testing.T) {
	crds, err := LoadDir("testdata")
	if err != nil {
		t.Fatalf("load testdata: %v", err)
	}
	first, err := Generate(crds, widgetOptions())
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	reversed := []*apiextensionsv1.CustomResourceDefinition{crds[1], crds[0]}
	second, err := Generate(reversed, widgetOptions())
	if err != nil {
		t.Fatalf("generate reversed: %v", err)
	}
	for i := range first {
		if !bytes.Equal(first[i].Content, second[i].Content) {
			t.Errorf("%s differs between two runs", first[i].Name)
		}
	}
}

func TestBareIntOrStringCanMapToIntOrString(t *testing.T) {
	crds, err := LoadDir("testdata")
	if err != nil {
		t.Fatalf("load testdata: %v", err)
	}
	opts := widgetOptions()
	opts.BareIntOrString = BareIntOrStringAsIntOrString
	files, err := Generate(crds, opts)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	types := string(files[0].Content)
	if !containsIgnoringAlignment(types, "Size *intstr.IntOrString `json:\"size,omitempty\"`") {
		t.Error("a bare int-or-string is not intstr.IntOrString with BareIntOrStringAsIntOrString")
	}
	if !containsIgnoringAlignment(types, "Limit *resource.Quantity `json:\"limit,omitempty\"`") {
		t.Error("a quantity pattern no longer makes resource.Quantity with BareIntOrStringAsIntOrString")
	}
}

// crdWithSpec returns a one-kind CRD whose .spec has the given properties (YAML, indented
// for the spec's properties block).
func crdWithSpec(t *testing.T, group, kind, properties string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	doc := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.` + group + `}
spec:
  group: ` + group + `
  names: {kind: ` + kind + `, plural: things}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
` + properties
	crds, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("parse test CRD: %v", err)
	}
	return crds[0]
}

func TestUnsupportedSchemasFailNamingThePath(t *testing.T) {
	cases := []struct {
		name       string
		properties string
		want       string
	}{
		{"no type", "              loose: {description: x}\n", ".spec.loose: the schema has no type"},
		{"shaped oneOf", "              either: {type: object, properties: {a: {type: string}}, oneOf: [{type: object, properties: {b: {type: string}}}]}\n", ".spec.either: oneOf with types or properties is not supported"},
		{"tuple items", "              pair: {type: array, items: [{type: string}, {type: integer}]}\n", ".spec.pair: an array needs one items schema"},
		{"integer enum", "              level: {type: string, enum: [1, 2]}\n", ".spec.level: enum[0] is 1, want a string"},
		{"unnamable property", "              \"--\": {type: string}\n", `.spec.--: property name "--" has no letter or digit`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			crd := crdWithSpec(t, "example.com", "Thing", tc.properties)
			_, err := Generate([]*apiextensionsv1.CustomResourceDefinition{crd}, Options{Version: "v1"})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "CRD things.example.com") {
				t.Fatalf("error = %v, want one naming CRD things.example.com and %q", err, tc.want)
			}
		})
	}
}

func TestValidationOnlyCombinatorsAreIgnored(t *testing.T) {
	crd := crdWithSpec(t, "example.com", "Thing",
		"              a: {type: string}\n              b: {type: string}\n            oneOf: [{required: [a]}, {required: [b]}]\n")
	if _, err := Generate([]*apiextensionsv1.CustomResourceDefinition{crd}, Options{Version: "v1"}); err != nil {
		t.Fatalf("a oneOf of required lists should not matter to the types: %v", err)
	}
}

func TestCRDsMustShareOneGroupAndHaveTheVersion(t *testing.T) {
	a := crdWithSpec(t, "a.example.com", "A", "              x: {type: string}\n")
	b := crdWithSpec(t, "b.example.com", "B", "              x: {type: string}\n")
	_, err := Generate([]*apiextensionsv1.CustomResourceDefinition{a, b}, Options{Version: "v1"})
	if err == nil || !strings.Contains(err.Error(), "one package holds one group") {
		t.Errorf("mixed groups: error = %v", err)
	}
	_, err = Generate([]*apiextensionsv1.CustomResourceDefinition{a}, Options{Version: "v2"})
	if err == nil || !strings.Contains(err.Error(), `spec.versions has no version "v2"`) {
		t.Errorf("missing version: error = %v", err)
	}
	_, err = Generate([]*apiextensionsv1.CustomResourceDefinition{a}, Options{Version: "v1", BareIntOrString: "number"})
	if err == nil || !strings.Contains(err.Error(), `BareIntOrString "number"`) {
		t.Errorf("bad option: error = %v", err)
	}
}

func TestParseRejectsDocumentsThatAreNotCRDs(t *testing.T) {
	_, err := Parse([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
	if err == nil || !strings.Contains(err.Error(), `document 0: apiVersion/kind is "v1"/"ConfigMap"`) {
		t.Fatalf("error = %v", err)
	}
	crds, err := Parse([]byte("---\n# only a comment\n---\n"))
	if err != nil || len(crds) != 0 {
		t.Fatalf("empty documents: crds = %d, err = %v", len(crds), err)
	}
}

func TestStaleNamesMissingAndChangedFiles(t *testing.T) {
	dir := t.TempDir()
	files := []File{{Name: "a.go", Content: []byte("package a\n")}, {Name: "b.go", Content: []byte("package a\n")}}
	if err := Write(dir, files); err != nil {
		t.Fatalf("write: %v", err)
	}
	if stale, err := Stale(dir, files); err != nil || len(stale) != 0 {
		t.Fatalf("fresh files: stale = %v, err = %v", stale, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.go"), []byte("package a // edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "b.go")); err != nil {
		t.Fatal(err)
	}
	stale, err := Stale(dir, files)
	if err != nil {
		t.Fatalf("stale: %v", err)
	}
	want := []string{filepath.Join(dir, "a.go"), filepath.Join(dir, "b.go")}
	if strings.Join(stale, ",") != strings.Join(want, ",") {
		t.Fatalf("stale = %v, want %v", stale, want)
	}
}

func TestGoName(t *testing.T) {
	cases := map[string]string{
		"gpuType":                 "GPUType",
		"gpus":                    "GPUs",
		"costUSD":                 "CostUSD",
		"memoryMiB":               "MemoryMiB",
		"targetCPUUtilization":    "TargetCPUUtilization",
		"batch-inference":         "BatchInference",
		"nvidia.com/gpu":          "NvidiaComGPU",
		"ttlSecondsAfterFinished": "TTLSecondsAfterFinished",
		"uri":                     "URI",
		"status":                  "Status",
		"PreemptLowerPriority":    "PreemptLowerPriority",
		"":                        "",
	}
	for in, want := range cases {
		if got := goName(in); got != want {
			t.Errorf("goName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSingular(t *testing.T) {
	cases := map[string]string{
		"Volumes": "Volume", "Entries": "Entry", "GPUs": "GPU", "Addresses": "Address",
		"Status": "Status", "Env": "Env", "Matches": "Match", "Boxes": "Box", "Analysis": "Analysis",
		"DaysOfWeek": "DaysOfWeek",
	}
	for in, want := range cases {
		if got := singular(in); got != want {
			t.Errorf("singular(%q) = %q, want %q", in, got, want)
		}
	}
}
