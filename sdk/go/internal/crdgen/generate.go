// Package crdgen generates Go API types from Kubernetes CustomResourceDefinitions.
//
// It reads the openAPIV3Schema of one version of every CRD and writes three files for one Go
// package: the types (zz_generated.types.go), their deep-copy methods
// (zz_generated.deepcopy.go) and the scheme registration (zz_generated.register.go). It is
// what cmd/gryvia-gen runs; it is not a general replacement for controller-gen: it maps the
// schema constructs Gryvia's CRDs use and fails, naming the schema path, on the ones it
// cannot express.
//
// # Mapping
//
//   - object with properties: a struct named after its parent type and field
//     (GryviaAIJobSpec, GryviaAIJobSpecStorage); identical schemas share one struct, named
//     where the walk (kinds sorted, properties sorted) meets them first.
//   - object with exactly metav1.Condition's fields: metav1.Condition.
//   - object with additionalProperties: map[string]T; additionalProperties: true, or
//     x-kubernetes-preserve-unknown-fields without properties: apiextensionsv1.JSON.
//   - x-kubernetes-embedded-resource: runtime.RawExtension.
//   - x-kubernetes-int-or-string: resource.Quantity or intstr.IntOrString (see Options).
//   - string with enum: a named string type with one constant per value.
//   - string with format date-time: metav1.Time; format byte: []byte.
//   - integer: int32 for format int32, else int64; number: float32 for format float, else
//     float64; boolean: bool; array: []T.
//
// A property not in its object's required list is optional: a pointer (scalars, structs,
// enums, external types) with omitempty, or a slice or map with omitempty.
package crdgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// BareIntOrString says how an x-kubernetes-int-or-string schema without a pattern maps.
type BareIntOrString string

const (
	// BareIntOrStringAsQuantity maps it to resource.Quantity. This is right for schemas that
	// kube-rs derives from k8s-openapi's Quantity, which emits a bare
	// x-kubernetes-int-or-string and no pattern.
	BareIntOrStringAsQuantity BareIntOrString = "quantity"
	// BareIntOrStringAsIntOrString maps it to intstr.IntOrString, as controller-gen's
	// convention would (controller-gen gives quantities a pattern).
	BareIntOrStringAsIntOrString BareIntOrString = "intorstring"
)

// Options configure Generate.
type Options struct {
	// Version is the CRD version whose schema is generated, for example "v1alpha1".
	Version string
	// Package is the Go package name of the output; empty means Version.
	Package string
	// Source is what the "Code generated" header names as the input, for example
	// "deploy/crds".
	Source string
	// BareIntOrString maps x-kubernetes-int-or-string schemas that carry no pattern; empty
	// means BareIntOrStringAsQuantity.
	BareIntOrString BareIntOrString
}

// File is one generated file.
type File struct {
	// Name is the base name, such as "zz_generated.types.go".
	Name string
	// Content is gofmt-formatted Go source.
	Content []byte
}

// Output file names.
const (
	TypesFile    = "zz_generated.types.go"
	DeepCopyFile = "zz_generated.deepcopy.go"
	RegisterFile = "zz_generated.register.go"
)

// Generate renders the three files for crds. The output depends only on the CRDs and opts:
// the same input gives the same bytes.
//
// # Errors
//
// It fails when the CRDs do not share one group, lack opts.Version, or use a schema
// construct that has no Go mapping; the error names the CRD and the schema path.
func Generate(crds []*apiextensionsv1.CustomResourceDefinition, opts Options) ([]File, error) {
	if opts.Version == "" {
		return nil, fmt.Errorf("generate: options: Version must name the CRD version to generate")
	}
	if opts.Package == "" {
		opts.Package = opts.Version
	}
	if !isIdentifier(opts.Package) {
		return nil, fmt.Errorf("generate: options: Package %q is not a Go identifier", opts.Package)
	}
	switch opts.BareIntOrString {
	case "":
		opts.BareIntOrString = BareIntOrStringAsQuantity
	case BareIntOrStringAsQuantity, BareIntOrStringAsIntOrString:
	default:
		return nil, fmt.Errorf("generate: options: BareIntOrString %q is neither %q nor %q",
			opts.BareIntOrString, BareIntOrStringAsQuantity, BareIntOrStringAsIntOrString)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("generate: no CustomResourceDefinitions given")
	}
	m, err := buildModel(crds, opts)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	renderers := []struct {
		name   string
		render func(*model, Options) ([]byte, error)
	}{
		{TypesFile, renderTypes},
		{DeepCopyFile, renderDeepCopy},
		{RegisterFile, renderRegister},
	}
	files := make([]File, 0, len(renderers))
	for _, r := range renderers {
		content, err := r.render(m, opts)
		if err != nil {
			return nil, fmt.Errorf("generate %s: %w", r.name, err)
		}
		files = append(files, File{Name: r.name, Content: content})
	}
	return files, nil
}

// Write writes files into dir, creating dir if needed, and leaves other files alone.
//
// # Errors
//
// It fails when dir cannot be created or a file cannot be written; the error names the file.
func Write(dir string, files []File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		if err := os.WriteFile(path, f.Content, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// Stale returns the paths of the files in dir that are missing or differ from files, sorted.
//
// # Errors
//
// It fails when a file exists but cannot be read.
func Stale(dir string, files []File) ([]string, error) {
	var stale []string
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		current, err := os.ReadFile(path)
		switch {
		case os.IsNotExist(err):
			stale = append(stale, path)
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", path, err)
		case !bytes.Equal(current, f.Content):
			stale = append(stale, path)
		}
	}
	sort.Strings(stale)
	return stale, nil
}
