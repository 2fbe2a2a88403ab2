package crdgen

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// LoadDir reads every *.yaml and *.yml file in dir (not recursively) and returns the
// CustomResourceDefinitions they hold, sorted by kind. A file may hold several documents;
// empty documents are skipped.
//
// # Errors
//
// It fails when the directory cannot be read, holds no CRD, or a document is not valid YAML or
// not an apiextensions.k8s.io/v1 CustomResourceDefinition; the error names the file.
func LoadDir(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read CRD directory: %w", err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, entry := range entries {
		ext := filepath.Ext(entry.Name())
		if entry.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, entry.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read CRD file: %w", err)
		}
		found, err := Parse(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		crds = append(crds, found...)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("read CRD directory %s: no *.yaml file holds a CustomResourceDefinition", dir)
	}
	sort.SliceStable(crds, func(i, j int) bool {
		return crds[i].Spec.Names.Kind < crds[j].Spec.Names.Kind
	})
	return crds, nil
}

// Parse decodes the CustomResourceDefinitions in one YAML or JSON stream of documents.
//
// # Errors
//
// It fails on malformed YAML and on a document whose apiVersion/kind is not
// apiextensions.k8s.io/v1 CustomResourceDefinition; the error names the document's position.
func Parse(data []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var crds []*apiextensionsv1.CustomResourceDefinition
	for index := 0; ; index++ {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := decoder.Decode(crd); err != nil {
			if errors.Is(err, io.EOF) {
				return crds, nil
			}
			return nil, fmt.Errorf("document %d: decode: %w", index, err)
		}
		if crd.APIVersion == "" && crd.Kind == "" && crd.Name == "" {
			continue // an empty document, such as one after a trailing "---"
		}
		if crd.APIVersion != "apiextensions.k8s.io/v1" || crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("document %d: apiVersion/kind is %q/%q, want apiextensions.k8s.io/v1/CustomResourceDefinition",
				index, crd.APIVersion, crd.Kind)
		}
		crds = append(crds, crd)
	}
}
