//go:build tools

// Package tools pins the Prometheus server that testenv/build compiles from this module when
// asked for it (testenv/build --with-prometheus; see testenv/README.md): the E2E tests of
// inference canaries read error rates and latencies from its query API, fed by remote write.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
)
