//go:build tools

// Package tools pins the Helm CLI that testenv/build compiles from this module when asked for it
// (testenv/build --with-helm; see testenv/README.md): CI lints and renders deploy/helm/gryvia
// with it, and deploy/'s plain manifests are rendered from the chart by it.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
