//go:build unix

package clientconf

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
)

// tsBlock is a README's TypeScript example: a ```ts block after <!-- typescript: NAME -->.
var tsBlock = regexp.MustCompile("(?s)<!-- typescript: ([a-z]+) -->\n```ts\n(.*?)```")

// TestReadmeTypeScript runs the TypeScript quickstarts of README.md and sdk/typescript's
// README as a new user would: each file's consumer and publisher, compiled by tsc --strict
// against the built client (imported by its package name), against a real broker. The
// consumer gets the publisher's message and ends cleanly on SIGINT. It needs the client's
// packages, so it runs with the scenarios (make test-clients).
func TestReadmeTypeScript(t *testing.T) {
	if !*runClients {
		t.Skip("runs with the client scenarios, -clients: make test-clients")
	}
	for _, readme := range []string{"../../README.md", "../../sdk/typescript/README.md"} {
		t.Run(strings.TrimPrefix(readme, "../../"), func(t *testing.T) {
			node(t)
			src, err := os.ReadFile(readme)
			if err != nil {
				t.Fatal(err)
			}
			blocks := map[string]string{}
			for _, m := range tsBlock.FindAllStringSubmatch(string(src), -1) {
				blocks[m[1]] = m[2]
			}
			if blocks["consumer"] == "" || blocks["publisher"] == "" {
				t.Fatalf("%s: want a consumer and a publisher block (<!-- typescript: NAME --> before ```ts), found %d blocks", readme, len(blocks))
			}
			runQuickstart(t, blocks["consumer"], blocks["publisher"])
		})
	}
}

// runQuickstart compiles the two examples in a directory inside sdk/typescript (so that
// "@tinybroker/client" resolves to the package itself) and runs them.
func runQuickstart(t *testing.T, consumer, publisher string) {
	b := servertest.Start(t, servertest.Options{})
	dir, err := os.MkdirTemp("../../sdk/typescript", ".readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for name, code := range map[string]string{"consumer": consumer, "publisher": publisher} {
		code = strings.ReplaceAll(code, "127.0.0.1:7878", b.Addr)
		if err := os.WriteFile(filepath.Join(dir, name+".ts"), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tsc := exec.Command("node_modules/.bin/tsc", "--strict", "--target", "es2022", "--module", "nodenext",
		"--moduleResolution", "nodenext", "--types", "node", "--skipLibCheck",
		filepath.Join(filepath.Base(dir), "consumer.ts"), filepath.Join(filepath.Base(dir), "publisher.ts"))
	tsc.Dir = "../../sdk/typescript"
	if out, err := tsc.CombinedOutput(); err != nil {
		t.Fatalf("tsc --strict on the README's examples: %v\n%s", err, out)
	}

	var out lockedBuffer
	cons := exec.Command("node", "consumer.js")
	cons.Dir, cons.Stdout, cons.Stderr = dir, &out, &out
	if err := cons.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cons.Wait() }()
	t.Cleanup(func() { _ = cons.Process.Kill() })
	brokertest.Eventually(t, "the consumer joined its group", func() bool { return b.Group("thumbnailers").Members == 1 })

	pub := exec.Command("node", "publisher.js")
	pub.Dir = dir
	pubOut, err := pub.CombinedOutput()
	if err != nil {
		t.Fatalf("publisher: %v\n%s", err, pubOut)
	}
	t.Logf("publisher: %s", pubOut)
	brokertest.Eventually(t, "the consumer printed the message", func() bool { return strings.Contains(out.String(), "cat.jpg") })
	brokertest.Eventually(t, "the group acked it", func() bool { return b.Group("thumbnailers").Acked >= 1 })

	_ = cons.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("consumer after SIGINT: %v\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the consumer did not end within 10s of SIGINT; its output:\n%s", out.String())
	}
	if b.Group("thumbnailers").Members != 0 {
		t.Errorf("the consumer ended but is still a member of its group")
	}
}

// lockedBuffer is a process's output, read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
