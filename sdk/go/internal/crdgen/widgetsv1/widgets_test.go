package widgetsv1_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gryvia/gryvia/sdk/go/internal/crdgen/widgetsv1"
	"github.com/gryvia/gryvia/sdk/go/internal/deepcopytest"
)

// The widgets CRDs use every construct the generator maps (free-form JSON, embedded objects,
// int-or-string, maps of structs, nested slices, []byte), so their deep copies cover the
// copy code the real API may not use yet.
func TestDeepCopyOfEveryGeneratedTypeSharesNoMemory(t *testing.T) {
	for _, obj := range deepcopytest.Types(&widgetsv1.Widget{}, &widgetsv1.WidgetList{}, &widgetsv1.Gadget{}, &widgetsv1.GadgetList{}) {
		deepcopytest.CheckDeepCopy(t, obj)
	}
}

func TestKindsAndListsAreRegistered(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := widgetsv1.AddToScheme(scheme); err != nil {
		t.Fatalf("add to scheme: %v", err)
	}
	for _, kind := range widgetsv1.Kinds() {
		for _, name := range []string{kind.Kind, kind.ListKind} {
			if !scheme.Recognizes(widgetsv1.GroupVersion.WithKind(name)) {
				t.Errorf("%s is not registered", name)
			}
		}
	}
}
