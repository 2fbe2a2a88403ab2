package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testCRDs = "../../internal/crdgen/testdata"

func TestCheckFailsNamingTheStaleFileUntilTheOutputIsRegenerated(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer

	if code := run([]string{"-crds", testCRDs, "-out", out, "-version", "v1", "-check"}, &stdout, &stderr); code != 1 {
		t.Fatalf("check on an empty directory: exit %d, want 1; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "stale: "+filepath.Join(out, "zz_generated.types.go")) {
		t.Errorf("check does not name the stale types file: %s", stderr.String())
	}

	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"-crds", testCRDs, "-out", out, "-version", "v1"}, &stdout, &stderr); code != 0 {
		t.Fatalf("generate: exit %d; stderr: %s", code, stderr.String())
	}
	if code := run([]string{"-crds", testCRDs, "-out", out, "-version", "v1", "-check"}, &stdout, &stderr); code != 0 {
		t.Fatalf("check after generate: exit %d; stderr: %s", code, stderr.String())
	}

	deepcopy := filepath.Join(out, "zz_generated.deepcopy.go")
	if err := os.WriteFile(deepcopy, []byte("package v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run([]string{"-crds", testCRDs, "-out", out, "-version", "v1", "-check"}, &stdout, &stderr); code != 1 {
		t.Fatalf("check after an edit: exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "stale: "+deepcopy) || strings.Contains(stderr.String(), "zz_generated.types.go") {
		t.Errorf("check should name only the edited file: %s", stderr.String())
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-crds", filepath.Join(t.TempDir(), "missing"), "-out", t.TempDir()}, &stdout, &stderr); code != 2 {
		t.Errorf("missing CRD directory: exit %d, want 2", code)
	}
	if code := run([]string{"stray"}, &stdout, &stderr); code != 2 {
		t.Errorf("stray argument: exit %d, want 2", code)
	}
	if code := run([]string{"-int-or-string", "float", "-crds", testCRDs, "-out", t.TempDir(), "-version", "v1"}, &stdout, &stderr); code != 2 {
		t.Errorf("bad -int-or-string: exit %d, want 2", code)
	}
}

func TestDescribeSourceDoesNotDependOnTheWorkingDirectory(t *testing.T) {
	root := filepath.Join(string(filepath.Separator), "repo", "sdk", "go")
	if got := describeSource(root, filepath.Join(root, "..", "..", "deploy", "crds")); got != "deploy/crds" {
		t.Errorf("inside the repository: %q, want deploy/crds", got)
	}
	if got := describeSource(root, filepath.Join(string(filepath.Separator), "elsewhere", "crds")); got != "crds" {
		t.Errorf("outside the repository: %q, want crds", got)
	}
}
