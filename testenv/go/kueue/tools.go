//go:build tools

// Package tools pins the Kueue commands that testenv/build compiles from this module when
// asked for Kueue (testenv/build --with-kueue; see testenv/README.md): the controller manager
// and the runner of Kueue's own scheduler performance test (benches/scheduler/).
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
	_ "sigs.k8s.io/kueue/test/performance/scheduler/runner"
)
