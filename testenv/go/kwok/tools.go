//go:build tools

// Package tools pins the kwok commands that testenv/build compiles from this
// module (see testenv/README.md).
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
