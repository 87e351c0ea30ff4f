//go:build unix

// Package quickstart holds README's quickstart programs, a consumer and a publisher in each
// client language; this test runs each pair against a real broker and checks that README
// shows each program as it is here.
package quickstart

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tinybroker/tinybroker/internal/testing/pytest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A language's consumer and publisher: the commands that run them, from this directory.
type language struct {
	name                string
	files               []string // shown in README
	consumer, publisher func(t *testing.T) *exec.Cmd
}

var languages = []language{
	{"go", []string{"go/consumer/main.go", "go/publisher/main.go"},
		func(t *testing.T) *exec.Cmd { return exec.Command(goBinary(t, "consumer")) },
		func(t *testing.T) *exec.Cmd { return exec.Command(goBinary(t, "publisher")) }},
	{"python", []string{"python/consumer.py", "python/publisher.py"},
		func(t *testing.T) *exec.Cmd { return pythonCmd(t, "python/consumer.py") },
		func(t *testing.T) *exec.Cmd { return pythonCmd(t, "python/publisher.py") }},
}

// TestQuickstart: in each language, the consumer (a member of group billing) gets the three
// orders the publisher publishes, and ends on SIGINT.
func TestQuickstart(t *testing.T) {
	for _, l := range languages {
		t.Run(l.name, func(t *testing.T) {
			b := servertest.Start(t, servertest.Options{})
			consumer := l.consumer(t)
			consumer.Env = append(consumer.Env, "TINYBROKER_ADDR="+b.Addr)
			lines := start(t, consumer)
			expect(t, lines, "consuming orders.* in group billing")
			publisher := l.publisher(t)
			publisher.Env = append(append(os.Environ(), publisher.Env...), "TINYBROKER_ADDR="+b.Addr)
			out, err := publisher.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "published 3 orders" {
				t.Fatalf("publisher: %v, output %q; want \"published 3 orders\"", err, out)
			}
			for i := 1; i <= 3; i++ {
				expect(t, lines, fmt.Sprintf(`orders.created: {"id": %d}`, i))
			}
			if err := consumer.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			if err := consumer.Wait(); err != nil {
				t.Errorf("the consumer ended with %v after SIGINT, want exit status 0", err)
			}
		})
	}
}

// TestReadmeShowsThem: README shows every quickstart program as it is here, in a fenced block
// of its own, so that what README shows is what TestQuickstart runs.
func TestReadmeShowsThem(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range languages {
		for _, f := range l.files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(readme), "\n"+string(src)+"```\n") {
				t.Errorf("README.md does not show examples/quickstart/%s as it is (in a fenced block of its own)", f)
			}
		}
	}
}

// start runs cmd, returning its standard output's lines; it is killed at the test's end if
// it is still running.
func start(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	cmd.Env = append(os.Environ(), cmd.Env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

func expect(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	select {
	case got, ok := <-lines:
		if !ok {
			t.Fatalf("the consumer ended; want %q", want)
		}
		if got != want {
			t.Fatalf("the consumer printed %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer printed nothing in 30s; want %q", want)
	}
}

func goBinary(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, "./go/"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build ./go/%s: %v\n%s", name, err, out)
	}
	return bin
}

// pythonCmd runs a program with the Python client (pytest).
func pythonCmd(t *testing.T, file string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(pytest.Interpreter(t), file)
	cmd.Env = pytest.Env()
	return cmd
}
