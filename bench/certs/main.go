// Command certs writes throwaway TLS files for benchmarking a secured broker (bench/ab.sh,
// bench/secure.hcl): ca.pem, and server.pem/server-key.pem for 127.0.0.1 and localhost,
// signed by it. Not for production.
//
//	go run ./bench/certs DIR
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tinybroker/tinybroker/internal/testing/testcerts"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./bench/certs DIR")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "certs:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	ca, err := testcerts.NewCA("tinybroker bench CA")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.PEM, 0o644); err != nil {
		return err
	}
	srv, err := ca.Server()
	if err != nil {
		return err
	}
	_, _, err = srv.Write(dir, "server")
	return err
}
