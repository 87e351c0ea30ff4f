// Package pytest runs the Python client (sdk/python) from Go tests: the interpreter with
// Debian's python3-grpcio and python3-protobuf, and the environment that finds the client.
package pytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Interpreter returns /usr/bin/python3, where Debian installs python3-grpcio and
// python3-protobuf (a python3 first on PATH, a pyenv's say, may lack them), or TB_PYTHON if
// set. Without those modules it skips the test, or fails it under CI (.ci/run installs them).
func Interpreter(tb testing.TB) string {
	tb.Helper()
	py := os.Getenv("TB_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if out, err := exec.Command(py, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("%s cannot import grpc and google.protobuf (%v: %s); apt-get install python3-grpcio python3-protobuf", py, err, strings.TrimSpace(string(out)))
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			tb.Fatalf("%s; under CI every client must run (.ci/run installs them)", msg)
		}
		tb.Skip(msg)
	}
	return py
}

// Env returns the environment a Python program using the client runs with: this process's,
// with sdk/python on PYTHONPATH and unbuffered output.
func Env() []string {
	_, file, _, _ := runtime.Caller(0)
	sdk := filepath.Join(filepath.Dir(file), "..", "..", "..", "sdk", "python")
	return append(os.Environ(), "PYTHONPATH="+sdk, "PYTHONUNBUFFERED=1")
}
