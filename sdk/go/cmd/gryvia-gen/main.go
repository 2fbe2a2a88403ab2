// Command gryvia-gen generates the Go API types of the Gryvia SDK from the CRDs.
//
// It reads every CustomResourceDefinition in deploy/crds (the single source of truth, generated
// from the Rust types) and writes api/v1alpha1/zz_generated.{types,deepcopy,register}.go.
// Paths default to the layout of this repository, found from the working directory, so
// `go run ./cmd/gryvia-gen` works from sdk/go and `go generate ./...` from anywhere in the
// module.
//
// Usage:
//
//	gryvia-gen [-crds DIR] [-out DIR] [-version v1alpha1] [-int-or-string quantity|intorstring] [-check]
//
// With -check it writes nothing and exits 1, naming each stale file, when the files in the
// output directory differ from what the CRDs generate. Other failures exit 2.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gryvia/gryvia/sdk/go/internal/crdgen"
)

// modulePath is the module this command belongs to; its go.mod marks the module root.
const modulePath = "github.com/gryvia/gryvia/sdk/go"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("gryvia-gen", flag.ContinueOnError)
	flags.SetOutput(stderr)
	crdDir := flags.String("crds", "", "directory of CRD YAML files (default: <module root>/../../deploy/crds)")
	outDir := flags.String("out", "", "output directory (default: <module root>/api/<version>)")
	version := flags.String("version", "v1alpha1", "CRD version to generate; also the Go package name")
	intOrString := flags.String("int-or-string", string(crdgen.BareIntOrStringAsQuantity),
		"Go type for x-kubernetes-int-or-string schemas without a pattern: quantity (resource.Quantity) or intorstring (intstr.IntOrString)")
	check := flags.Bool("check", false, "write nothing; exit 1 and name the stale files if the output differs from what the CRDs generate")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "gryvia-gen: unexpected arguments %q; all input comes from flags\n", flags.Args())
		return 2
	}

	root, rootErr := findModuleRoot()
	if *crdDir == "" || *outDir == "" {
		if rootErr != nil {
			fmt.Fprintf(stderr, "gryvia-gen: %v; pass -crds and -out\n", rootErr)
			return 2
		}
		if *crdDir == "" {
			*crdDir = filepath.Join(root, "..", "..", "deploy", "crds")
		}
		if *outDir == "" {
			*outDir = filepath.Join(root, "api", *version)
		}
	}

	crds, err := crdgen.LoadDir(*crdDir)
	if err != nil {
		fmt.Fprintf(stderr, "gryvia-gen: %v\n", err)
		return 2
	}
	files, err := crdgen.Generate(crds, crdgen.Options{
		Version:         *version,
		Source:          describeSource(root, *crdDir),
		BareIntOrString: crdgen.BareIntOrString(*intOrString),
	})
	if err != nil {
		fmt.Fprintf(stderr, "gryvia-gen: %v\n", err)
		return 2
	}

	if *check {
		stale, err := crdgen.Stale(*outDir, files)
		if err != nil {
			fmt.Fprintf(stderr, "gryvia-gen: check: %v\n", err)
			return 2
		}
		if len(stale) > 0 {
			for _, path := range stale {
				fmt.Fprintf(stderr, "gryvia-gen: stale: %s differs from what %s generates; run `go run ./cmd/gryvia-gen`\n", path, *crdDir)
			}
			return 1
		}
		fmt.Fprintf(stdout, "gryvia-gen: %d files in %s are up to date with %d CRDs\n", len(files), *outDir, len(crds))
		return 0
	}
	if err := crdgen.Write(*outDir, files); err != nil {
		fmt.Fprintf(stderr, "gryvia-gen: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "gryvia-gen: wrote %d files to %s from %d CRDs\n", len(files), *outDir, len(crds))
	return 0
}

// findModuleRoot walks up from the working directory to the go.mod that declares modulePath.
func findModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find module root: no go.mod declaring " + modulePath + " in the working directory or above")
		}
		dir = parent
	}
}

func declaresModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) == 2 && fields[0] == "module" {
			return fields[1] == modulePath
		}
	}
	return false
}

// describeSource names the CRD directory for the generated header without making the output
// depend on where the command runs: the path inside the repository when the directory is in
// it, else the directory's base name.
func describeSource(moduleRoot, crdDir string) string {
	abs, err := filepath.Abs(crdDir)
	if err != nil || moduleRoot == "" {
		return filepath.Base(crdDir)
	}
	repoRoot := filepath.Join(moduleRoot, "..", "..")
	rel, err := filepath.Rel(repoRoot, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return filepath.Base(abs)
	}
	return filepath.ToSlash(rel)
}
