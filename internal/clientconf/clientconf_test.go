// Package clientconf is the client conformance harness (issue 31): the scenarios every client
// library must pass against a real broker, written once and run for each client through a
// small driver program that speaks JSON lines (PROTOCOL.md). It has no code of its own.
package clientconf

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/tinybroker/tinybroker/internal/testing/brokertest"
	"github.com/tinybroker/tinybroker/internal/testing/pytest"
	"github.com/tinybroker/tinybroker/internal/testing/servertest"
	"github.com/tinybroker/tinybroker/internal/testing/testcerts"
	"github.com/tinybroker/tinybroker/server"
	"github.com/tinybroker/tinybroker/server/auth"
)

// A clientKind starts its driver against addr, with env added to its environment
// (PROTOCOL.md: TB_CA_FILE, TB_TOKEN).
type clientKind struct {
	name  string
	start func(t *testing.T, addr string, env ...string) *driver
}

var clients = []clientKind{
	{"go", startGo},
	{"python", startPython},
	{"typescript", startTS},
}

// scenarios are run for every client, each against a broker of its own.
var scenarios = []struct {
	name string
	run  func(t *testing.T, k clientKind, b *servertest.Broker)
}{
	{"fanout-order-per-publisher", fanoutOrder},
	{"balanced-group-of-3", balancedGroup},
	{"nack-with-delay", nackWithDelay},
	{"reconnect-after-restart", reconnect},
	{"touch-past-the-deadline", touch},
	{"member-killed-mid-work", memberKilled},
	{"tls-and-token", tlsAndToken},
	{"idempotent-publish", idempotentPublish},
}

// runClients is set by make test-clients: the scenarios start a driver process per client and
// member and take seconds, so make test (go test ./...) leaves them to their own target.
var runClients = flag.Bool("clients", false, "run the client conformance scenarios (make test-clients)")

func TestClients(t *testing.T) {
	if !*runClients {
		t.Skip("the client conformance scenarios run with -clients: make test-clients")
	}
	for _, k := range clients {
		t.Run(k.name, func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					b := servertest.Start(t, servertest.Options{})
					sc.run(t, k, b)
				})
			}
		})
	}
}

// fanoutOrder: a fanout subscriber gets every message of two concurrent publishers, each
// publisher's in the order it published them.
func fanoutOrder(t *testing.T, k clientKind, b *servertest.Broker) {
	addr := b.Addr
	const n = 50
	sub := k.start(t, addr)
	// A slow handler lets messages pile up into batches, whose order matters too; the jitter
	// before each delivery line puts them out of order if the client runs handlers
	// concurrently (the subscription asks for one at a time).
	sub.do(t, map[string]any{"op": "subscribe", "name": "s", "patterns": []string{"conf.fan.>"}, "sleep_ms": 2, "jitter_ms": 3, "concurrency": 1})
	pubs := []*driver{k.start(t, addr), k.start(t, addr)}
	for i, p := range pubs {
		// p1 publishes through the client's pipelined publisher, which must keep its order too.
		p.send(t, map[string]any{"op": "publish", "topic": fmt.Sprintf("conf.fan.p%d", i), "payload": fmt.Sprintf("p%d", i), "count": n, "pipelined": i == 1})
	}
	for _, p := range pubs {
		p.answer(t)
	}
	next := map[string]int{}
	for _, e := range sub.events(t, 2*n) {
		from, seq := e.split(t)
		if seq != next[from] {
			t.Errorf("from %s: got message %d, want %d (out of order or lost)", from, seq, next[from])
		}
		next[from] = seq + 1
	}
	sub.quiet(t, 200*time.Millisecond)
}

// balancedGroup: three members of a group with acks share the messages; each is delivered
// once (acks reach the broker: none is redelivered after the 1s ack deadline), and every
// member gets some.
func balancedGroup(t *testing.T, k clientKind, b *servertest.Broker) {
	addr := b.Addr
	const n = 60
	var members []*driver
	for i := range 3 {
		m := k.start(t, addr)
		m.do(t, map[string]any{"op": "subscribe", "name": fmt.Sprintf("m%d", i), "patterns": []string{"conf.bal.*"},
			"group": "conf-bal", "ack_deadline_ms": 1000, "sleep_ms": 5})
		members = append(members, m)
	}
	members[0].do(t, map[string]any{"op": "publish", "topic": "conf.bal.x", "payload": "job", "count": n})
	got := map[string]int{}
	perMember := make([]int, len(members))
	deadline := time.Now().Add(10 * time.Second)
	for total := 0; total < n; {
		for i, m := range members {
			for _, e := range m.take() {
				got[e.Payload]++
				perMember[i]++
				total++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d messages in 10s (per member %v)", total, n, perMember)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // past the ack deadline: an unacked message comes again
	for i, m := range members {
		for _, e := range m.take() {
			got[e.Payload]++
			perMember[i]++
		}
	}
	for p, c := range got {
		if c != 1 {
			t.Errorf("%s delivered %d times, want once", p, c)
		}
	}
	if len(got) != n {
		t.Errorf("%d distinct messages delivered, want %d", len(got), n)
	}
	if slices.Contains(perMember, 0) {
		t.Errorf("messages per member %v: a member got none", perMember)
	}
}

// nackWithDelay: a message whose handler fails is nacked with the subscription's nack delay
// and comes again, attempt 2, no sooner than the delay.
func nackWithDelay(t *testing.T, k clientKind, b *servertest.Broker) {
	addr := b.Addr
	const delay = 600 * time.Millisecond
	d := k.start(t, addr)
	d.do(t, map[string]any{"op": "subscribe", "name": "s", "patterns": []string{"conf.nack"}, "group": "conf-nack",
		"mode": "nack-first", "nack_delay_ms": delay.Milliseconds()})
	d.do(t, map[string]any{"op": "publish", "topic": "conf.nack", "payload": "once"})
	es := d.events(t, 2)
	if es[0].Attempt != 1 || es[1].Attempt != 2 || es[0].SystemID != es[1].SystemID {
		t.Fatalf("deliveries %+v, want the message at attempt 1 then 2", es)
	}
	// The handler writes its line before it fails, so the nack is sent after es[0].at; a
	// margin of 100ms for reading the lines.
	if gap := es[1].at.Sub(es[0].at); gap < delay-100*time.Millisecond {
		t.Errorf("redelivered %v after the first attempt, want at least the nack delay %v", gap, delay)
	}
	d.quiet(t, 200*time.Millisecond)
}

// reconnect: when the broker restarts (on the same address; the memory engine forgets the
// group), a member's subscription re-opens by itself and gets what is published after.
func reconnect(t *testing.T, k clientKind, b *servertest.Broker) {
	d := k.start(t, b.Addr)
	d.do(t, map[string]any{"op": "subscribe", "name": "s", "patterns": []string{"conf.re"}, "group": "conf-re"})
	d.do(t, map[string]any{"op": "publish", "topic": "conf.re", "payload": "before"})
	d.events(t, 1)
	b.Stop()
	b = servertest.Start(t, servertest.Options{Addr: b.Addr})
	brokertest.Eventually(t, "the subscription re-opened on the restarted broker", func() bool { return b.Group("conf-re").Members == 1 })
	d.do(t, map[string]any{"op": "publish", "topic": "conf.re", "payload": "after"})
	if e := d.events(t, 1)[0]; e.Payload != "after:0" {
		t.Errorf("after the restart got %q, want after:0", e.Payload)
	}
}

// touch: a handler that works 3 times the ack deadline, touching its message every 2/5 of
// it, keeps the message: it is not redelivered, and is acked when the handler returns.
func touch(t *testing.T, k clientKind, b *servertest.Broker) {
	d := k.start(t, b.Addr)
	d.do(t, map[string]any{"op": "subscribe", "name": "s", "patterns": []string{"conf.touch"}, "group": "conf-touch",
		"ack_deadline_ms": 500, "sleep_ms": 1500, "touch_ms": 200})
	d.do(t, map[string]any{"op": "publish", "topic": "conf.touch", "payload": "long"})
	d.events(t, 1)
	d.quiet(t, 2*time.Second) // the work's 1.5s, and past the deadline after it
	if g := b.Group("conf-touch"); g.Acked != 1 {
		t.Errorf("group acked %d messages, want 1", g.Acked)
	}
}

// memberKilled: a member of a group of two is killed (SIGKILL: no goodbye, no last acks) while
// its handlers hold messages; they go at once to the other member (the ack deadline is far
// off), which gets them as later attempts, and every message is acked.
func memberKilled(t *testing.T, k clientKind, b *servertest.Broker) {
	const n = 20
	sub := func(d *driver, name string) {
		d.do(t, map[string]any{"op": "subscribe", "name": name, "patterns": []string{"conf.kill"}, "group": "conf-kill",
			"ack_deadline_ms": 60000, "concurrency": 4, "sleep_ms": 200})
	}
	victim := k.start(t, b.Addr)
	sub(victim, "victim")
	victim.do(t, map[string]any{"op": "publish", "topic": "conf.kill", "payload": "job", "count": n})
	var held []line // the victim is at work (4 handlers): kill it before it can ack
	brokertest.Eventually(t, "the victim at work", func() bool { held = append(held, victim.take()...); return len(held) > 0 })
	victim.kill(t)
	if g := b.Group("conf-kill"); g.Acked != 0 {
		t.Fatalf("%d messages acked before the kill, want 0 (the handler sleeps 200ms)", g.Acked)
	}
	survivor := k.start(t, b.Addr)
	sub(survivor, "survivor")
	got := map[string]int{}
	var again bool
	for _, e := range survivor.events(t, n) {
		got[e.Payload]++
		if e.Payload == held[0].Payload && e.Attempt > 1 {
			again = true
		}
	}
	if len(got) != n {
		t.Errorf("the survivor got %d distinct messages, want all %d: %v", len(got), n, got)
	}
	if !again {
		t.Errorf("the message the victim held (%s) did not come to the survivor as a later attempt", held[0].Payload)
	}
	brokertest.Eventually(t, "every message acked", func() bool { return b.Group("conf-kill").Acked == n })
}

// tlsAndToken: over TLS, with a user's token, a client publishes and consumes; with a wrong
// token its publish fails, and nothing of it is delivered.
func tlsAndToken(t *testing.T, k clientKind, _ *servertest.Broker) {
	ca, err := testcerts.NewCA("clientconf CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := srv.Write(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	all := auth.Rules{Allow: []string{">"}}
	guard, err := auth.New(auth.Options{TLS: &auth.TLSFiles{CertFile: cert, KeyFile: key},
		Users: []auth.User{{Name: "alice", TokenHash: string(hash), Publish: all, Subscribe: all, Groups: all}}})
	if err != nil {
		t.Fatal(err)
	}
	b := servertest.Start(t, servertest.Options{Server: server.Options{Auth: guard}})
	d := k.start(t, b.Addr, "TB_CA_FILE="+caFile, "TB_TOKEN=alice:s3cret")
	d.do(t, map[string]any{"op": "subscribe", "name": "s", "patterns": []string{"conf.tls"}, "group": "conf-tls"})
	d.do(t, map[string]any{"op": "publish", "topic": "conf.tls", "payload": "secret", "count": 3})
	d.events(t, 3)
	brokertest.Eventually(t, "the 3 messages acked", func() bool { return b.Group("conf-tls").Acked == 3 })
	intruder := k.start(t, b.Addr, "TB_CA_FILE="+caFile, "TB_TOKEN=alice:wrong")
	if msg := intruder.fails(t, map[string]any{"op": "publish", "topic": "conf.tls", "payload": "forged"}); !strings.Contains(strings.ToLower(msg), "unauthenticated") && !strings.Contains(strings.ToLower(msg), "token") {
		t.Errorf("a publish with a wrong token failed with %q, want it to say unauthenticated", msg)
	}
	d.quiet(t, 300*time.Millisecond)
}

// idempotentPublish: the same publishes sent twice with the same message ids (a publisher
// retrying after lost answers), once one by one and once pipelined, are delivered once.
func idempotentPublish(t *testing.T, k clientKind, b *servertest.Broker) {
	const n = 5
	d := k.start(t, b.Addr)
	d.do(t, map[string]any{"op": "subscribe", "name": "s", "patterns": []string{"conf.idem"}})
	cmd := map[string]any{"op": "publish", "topic": "conf.idem", "payload": "once", "count": n, "msg_id": "idem-" + k.name}
	d.do(t, cmd)
	cmd["pipelined"] = true // the retry through the pipelined publisher: its ids must be kept too
	d.do(t, cmd)
	got := map[string]bool{}
	for _, e := range d.events(t, n) {
		got[e.Payload] = true
	}
	if len(got) != n {
		t.Errorf("%d distinct messages, want %d: %v", len(got), n, got)
	}
	d.quiet(t, 300*time.Millisecond)
}

// driver is a client's driver process: commands go to its stdin, its answers and deliveries
// come from its stdout.
type driver struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	answers chan line
	mu      sync.Mutex
	got     []line // deliveries not taken yet
	arrived chan struct{}
}

// line is one line of a driver's stdout (PROTOCOL.md).
type line struct {
	OK        string `json:"ok"`
	Error     string `json:"error"`
	Event     string `json:"event"`
	Sub       string `json:"sub"`
	Topic     string `json:"topic"`
	Payload   string `json:"payload"`
	Attempt   int    `json:"attempt"`
	SystemID  string `json:"system_id"`
	at        time.Time
	malformed string
}

// split parses a payload "FROM:SEQ" as the drivers publish them.
func (l line) split(t *testing.T) (string, int) {
	t.Helper()
	from, seq, ok := strings.Cut(l.Payload, ":")
	n, err := strconv.Atoi(seq)
	if !ok || err != nil {
		t.Fatalf("payload %q: want FROM:SEQ", l.Payload)
	}
	return from, n
}

// startDriver runs cmd as a driver until the test ends: it is then told to exit, and killed
// if it has not within 5s.
func startDriver(t *testing.T, cmd *exec.Cmd) *driver {
	t.Helper()
	cmd.Stderr = &testWriter{t: t}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &driver{cmd: cmd, stdin: stdin, answers: make(chan line, 16), arrived: make(chan struct{}, 1)}
	var reading sync.WaitGroup
	reading.Go(func() { d.read(stdout) })
	t.Cleanup(func() {
		_, _ = io.WriteString(stdin, `{"op":"exit"}`+"\n")
		stdin.Close()
		timer := time.AfterFunc(5*time.Second, func() { _ = cmd.Process.Kill() })
		reading.Wait()
		_ = cmd.Wait()
		timer.Stop()
	})
	return d
}

func (d *driver) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := line{at: time.Now()}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			l = line{malformed: sc.Text(), at: l.at}
		}
		if l.Event == "" {
			d.answers <- l
			continue
		}
		d.mu.Lock()
		d.got = append(d.got, l)
		d.mu.Unlock()
		select {
		case d.arrived <- struct{}{}:
		default:
		}
	}
	close(d.answers)
}

// send writes a command; answer waits for its answer.
func (d *driver) send(t *testing.T, cmd map[string]any) {
	t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := d.stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("driver: %v", err)
	}
}

func (d *driver) answer(t *testing.T) {
	t.Helper()
	select {
	case l, ok := <-d.answers:
		switch {
		case !ok:
			t.Fatal("the driver exited (its stderr is above)")
		case l.malformed != "":
			t.Fatalf("driver wrote %q: not a JSON line", l.malformed)
		case l.Error != "":
			t.Fatalf("driver: %s", l.Error)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no answer from the driver in 15s")
	}
}

// fails sends a command that must fail, and returns its error.
func (d *driver) fails(t *testing.T, cmd map[string]any) string {
	t.Helper()
	d.send(t, cmd)
	select {
	case l, ok := <-d.answers:
		switch {
		case !ok:
			t.Fatal("the driver exited (its stderr is above)")
		case l.Error == "":
			t.Fatalf("%v succeeded, want an error", cmd)
		}
		return l.Error
	case <-time.After(15 * time.Second):
		t.Fatal("no answer from the driver in 15s")
	}
	return ""
}

// kill ends the driver's process at once (SIGKILL): its client says no goodbye.
func (d *driver) kill(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatalf("killing the driver: %v", err)
	}
}

// do sends a command and waits for its answer.
func (d *driver) do(t *testing.T, cmd map[string]any) {
	t.Helper()
	d.send(t, cmd)
	d.answer(t)
}

// take returns the deliveries that arrived since the last take.
func (d *driver) take() []line {
	d.mu.Lock()
	defer d.mu.Unlock()
	got := d.got
	d.got = nil
	return got
}

// events waits up to 10s for n deliveries and returns them.
func (d *driver) events(t *testing.T, n int) []line {
	t.Helper()
	var got []line
	timeout := time.After(10 * time.Second)
	for len(got) < n {
		got = append(got, d.take()...)
		if len(got) >= n {
			break
		}
		select {
		case <-d.arrived:
		case <-timeout:
			t.Fatalf("got %d of %d messages in 10s: %+v", len(got), n, got)
		}
	}
	if len(got) > n {
		t.Errorf("got %d messages, want %d: %+v", len(got), n, got[n:])
	}
	return got[:n]
}

// quiet fails the test if a delivery arrives within d.
func (d *driver) quiet(t *testing.T, wait time.Duration) {
	t.Helper()
	time.Sleep(wait)
	if extra := d.take(); len(extra) > 0 {
		t.Errorf("unexpected deliveries: %+v", extra)
	}
}

// testWriter passes a driver's stderr to the test log.
type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Logf("driver stderr: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var goBuild struct {
	once sync.Once
	bin  string
	err  error
	dir  string
}

func startGo(t *testing.T, addr string, env ...string) *driver {
	t.Helper()
	goBuild.once.Do(func() {
		goBuild.dir, goBuild.err = os.MkdirTemp("", "clientconf")
		if goBuild.err == nil {
			goBuild.bin = filepath.Join(goBuild.dir, "goclient")
			out, err := exec.Command("go", "build", "-o", goBuild.bin, "./goclient").CombinedOutput()
			if err != nil {
				goBuild.err = fmt.Errorf("go build ./goclient: %v\n%s", err, out)
			}
		}
	})
	if goBuild.err != nil {
		t.Fatal(goBuild.err)
	}
	cmd := exec.Command(goBuild.bin, addr)
	cmd.Env = append(os.Environ(), env...)
	return startDriver(t, cmd)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if goBuild.dir != "" {
		os.RemoveAll(goBuild.dir)
	}
	os.Exit(code)
}

func startPython(t *testing.T, addr string, env ...string) *driver {
	t.Helper()
	cmd := exec.Command(pytest.Interpreter(t), "pyclient.py", addr)
	cmd.Env = append(pytest.Env(), env...)
	return startDriver(t, cmd)
}

// tsBuild compiles sdk/typescript (strict tsc, into its dist/) once for the test binary: the
// driver, tsclient.mjs, runs the compiled client.
var tsBuild struct {
	once    sync.Once
	missing error // no Node.js 20 or no node_modules: skipped, except under CI
	err     error // tsc failed
}

// node is Node.js (20 or later), once sdk/typescript's packages are installed (npm ci) and the
// client is compiled; skipped without Node.js or the packages, except under CI.
func node(t *testing.T) string {
	t.Helper()
	tsBuild.once.Do(func() {
		out, err := exec.Command("node", "-e", "process.exit(+process.versions.node.split('.')[0] >= 20 ? 0 : 1)").CombinedOutput()
		if err != nil {
			tsBuild.missing = fmt.Errorf("node 20 or later: %v %s", err, out)
			return
		}
		if _, err := os.Stat("../../sdk/typescript/node_modules/.bin/tsc"); err != nil {
			tsBuild.missing = fmt.Errorf("sdk/typescript has no node_modules: run npm ci there (%v)", err)
			return
		}
		cmd := exec.Command("node_modules/.bin/tsc", "-p", "tsconfig.json")
		cmd.Dir = "../../sdk/typescript"
		if out, err := cmd.CombinedOutput(); err != nil {
			tsBuild.err = fmt.Errorf("tsc in sdk/typescript: %v\n%s", err, out)
		}
	})
	if tsBuild.missing != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("%v; under CI every client must run (.ci/run installs them)", tsBuild.missing)
		}
		t.Skip(tsBuild.missing)
	}
	if tsBuild.err != nil {
		t.Fatal(tsBuild.err)
	}
	return "node"
}

func startTS(t *testing.T, addr string, env ...string) *driver {
	t.Helper()
	cmd := exec.Command(node(t), "tsclient.mjs", addr)
	cmd.Env = append(os.Environ(), env...)
	return startDriver(t, cmd)
}

// TestPythonTypes holds the Python client to its type hints (it ships py.typed): mypy --strict,
// configured by sdk/python/mypy.ini. Debian's mypy; skipped without it, except under CI.
func TestPythonTypes(t *testing.T) {
	py := pytest.Interpreter(t)
	if err := exec.Command(py, "-m", "mypy", "--version").Run(); err != nil {
		msg := fmt.Sprintf("%s -m mypy: %v; apt-get install mypy", py, err)
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("%s; under CI it must run (.ci/run installs it)", msg)
		}
		t.Skip(msg)
	}
	cmd := exec.Command(py, "-m", "mypy", "tinybroker")
	cmd.Dir = "../../sdk/python"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mypy: %v\n%s", err, out)
	}
}
