// Command etcd is a thin wrapper around the upstream etcd server entry point,
// so that etcd can be built from the Go module proxy (the upstream server
// module carries replace directives, which forbids `go install ...@version`).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
