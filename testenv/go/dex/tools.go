//go:build tools

// Package tools pins the Dex OIDC issuer that testenv/build compiles from this module when asked
// for it (testenv/build --with-dex; see testenv/README.md): the gateway's tests verify tokens that
// a real identity provider issued. Dex's own go.mod replaces its api/v2 module with a sibling
// directory; replace directives of a dependency do not apply here, so the served api/v2 v2.4.0
// (identical to that directory) is used.
package tools

import (
	_ "github.com/dexidp/dex/cmd/dex"
)
