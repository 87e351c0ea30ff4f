//go:build unix

package readme

// TestReadme runs README.md's shell examples against a real broker and compares their output
// with what README shows. The rules, which README's own examples follow:
//
//   - Every ```console or ```sh block has a marker before it: <!-- test: NAME [OPTION...] -->,
//     or <!-- not tested: REASON -->. A block without one fails the test.
//   - In a tested block (```console), a line "$ COMMAND" is a command (a final "\" continues
//     it on the next line) and the lines after it, to the next command, are its output:
//     standard output and standard error together, as a terminal shows them. Blank lines at
//     the end of an output are not compared.
//   - Blocks of one NAME are one session: one bash, one working directory, one broker, in
//     README's order. A marker may hold hidden lines before its "-->": commands (and their
//     output) that README's prose describes but does not show, run before the block.
//   - Output is compared line by line with runs of spaces as one space (tables' columns vary
//     with their contents). "..." in an expected line matches any text; a line of just "..."
//     matches any number of lines: for what varies, such as ports, ages and sizes. A system_id
//     (22 characters with an upper- and a lower-case letter and a digit) matches any
//     system_id, and an RFC 3339 time any time, so that README can show realistic ones.
//   - "tinybroker serve" (not --check) runs in the background on free ports; the session
//     goes on when its gRPC and HTTP ports answer. 127.0.0.1:7878 and 127.0.0.1:7879 in
//     README's commands and output stand for those ports, and TINYBROKER_ADDR names the gRPC
//     one. Its log is compared only where README shows some. A second serve in a session is
//     a restart: the background commands started so far end (as at the session's end), then
//     the broker.
//   - A command ending in "&" runs in the background; the session goes on when it has printed
//     its first line (sub: "subscribed to ..."). Its output is compared when the session
//     ends, after it printed as many lines as README shows (or 10 s) and got SIGINT. A block
//     of output alone continues the output of the session's last background command.
//   - A command that exits non-zero fails the test unless README shows its error ("tinybroker:").
//   - "make build" does nothing (.bin/tinybroker and tinybroker are the binary, built once
//     for the test); "make plugins" builds the example plugins into the session's directory.
//     HOME and XDG_CONFIG_HOME are the session's own, and its working directory (a temporary
//     one) is shown as /home/me/tinybroker in its output.
//
// Options: files=PATH,... copies those files of the repository into the working directory,
// at the same path; addr=unset leaves TINYBROKER_ADDR unset (it would outrank a context);
// needs=PROG,... skips the session when a program is missing (fails it when CI is set);
// tools=NAME,... installs pinned Go tools from the module proxy (skipped under -short).

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// workShown is how output shows a session's working directory.
const workShown = "/home/me/tinybroker"

// tools are the Go programs README names, pinned, installed from the module proxy.
var tools = map[string]string{
	"grpcurl":           "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4",
	"grpc-health-probe": "github.com/grpc-ecosystem/grpc-health-probe@v0.4.63",
}

type wantLine struct {
	line int // in README.md
	text string
}

type step struct {
	line  int // README.md's line of the command
	cmd   string
	bg    bool // ends in "&"
	serve bool // tinybroker serve: in the background, waited for on its ports
	want  []wantLine
}

type session struct {
	name  string
	line  int
	opts  map[string]string
	steps []*step
}

var (
	markerRe = regexp.MustCompile(`^<!-- test: ([A-Za-z0-9_-]+)((?:\s+[a-z]+=\S+)*)\s*(-->)?\s*$`)
	skipRe   = regexp.MustCompile(`^<!-- not tested: .+ -->$`)
	fenceRe  = regexp.MustCompile("^```(console|sh)\\s*$")
	bgRe     = regexp.MustCompile(`(^|[^&])&\s*(#.*)?$`)
	serveRe  = regexp.MustCompile(`(^|[\s/])tinybroker\s+serve\b`)
	spacesRe = regexp.MustCompile(`[ \t]+`)
)

// parseReadme returns README's sessions in order, or the problems of its markers.
func parseReadme(text string) ([]*session, []string) {
	lines := strings.Split(text, "\n")
	var problems []string
	byName := map[string]*session{}
	var order []*session
	var pending *session // a marker waiting for its block
	var pendingSkip bool
	var lastBg *step
	for i := 0; i < len(lines); i++ {
		n := i + 1
		l := lines[i]
		switch {
		case markerRe.MatchString(l):
			m := markerRe.FindStringSubmatch(l)
			s := byName[m[1]]
			if s == nil {
				s = &session{name: m[1], line: n, opts: map[string]string{}}
				byName[m[1]] = s
				order = append(order, s)
				lastBg = nil
			}
			for _, kv := range strings.Fields(m[2]) {
				k, v, _ := strings.Cut(kv, "=")
				s.opts[k] = v
			}
			if m[3] == "" { // hidden lines up to "-->"
				var hidden []numbered
				for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "-->"; i++ {
					hidden = append(hidden, numbered{i + 1, lines[i]})
				}
				if p := addSteps(s, hidden, &lastBg); p != "" {
					problems = append(problems, p)
				}
			}
			pending = s
		case skipRe.MatchString(l):
			pendingSkip = true
		case strings.TrimSpace(l) == "":
		case fenceRe.MatchString(l):
			var block []numbered
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				block = append(block, numbered{i + 1, lines[i]})
			}
			switch {
			case pending != nil && pendingSkip:
				problems = append(problems, fmt.Sprintf("README.md:%d: both a test and a not-tested marker", n))
			case pending != nil:
				if !strings.HasPrefix(l, "```console") {
					problems = append(problems, fmt.Sprintf("README.md:%d: a tested block is ```console", n))
				}
				if p := addSteps(pending, block, &lastBg); p != "" {
					problems = append(problems, p)
				}
			case !pendingSkip:
				problems = append(problems, fmt.Sprintf("README.md:%d: a shell example with neither <!-- test: NAME --> nor <!-- not tested: REASON --> before it", n))
			}
			pending, pendingSkip = nil, false
		default: // prose: a marker before it stands alone (its hidden lines are the example)
			pending, pendingSkip = nil, false
		}
	}
	return order, problems
}

type numbered struct {
	n    int
	text string
}

// addSteps adds a block's commands and outputs to s.
func addSteps(s *session, block []numbered, lastBg **step) string {
	var cur *step
	for j := 0; j < len(block); j++ {
		l := block[j]
		if cmd, ok := strings.CutPrefix(l.text, "$ "); ok {
			for strings.HasSuffix(cmd, `\`) && j+1 < len(block) {
				j++
				cmd += "\n" + block[j].text
			}
			cur = &step{line: l.n, cmd: cmd, serve: serveRe.MatchString(cmd) && !strings.Contains(cmd, "--check")}
			if bgRe.MatchString(cmd) {
				cur.bg = true
				cur.cmd = strings.TrimRight(bgRe.ReplaceAllString(cmd, "$1"), " ")
			}
			if cur.bg || cur.serve {
				*lastBg = cur
			}
			s.steps = append(s.steps, cur)
			continue
		}
		if cur == nil {
			if *lastBg == nil {
				return fmt.Sprintf("README.md:%d: output with no command before it in session %q", l.n, s.name)
			}
			cur = *lastBg
		}
		cur.want = append(cur.want, wantLine{l.n, l.text})
	}
	return ""
}

func TestReadme(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sessions, problems := parseReadme(string(text))
	for _, p := range problems {
		t.Error(p)
	}
	if len(sessions) < 5 {
		t.Fatalf("found %d tested sessions in README.md: the markers are not being read", len(sessions))
	}

	// The binary, built once, behind a wrapper that puts serve on the session's ports.
	dir := t.TempDir()
	real := filepath.Join(dir, "real", "tinybroker")
	build := exec.Command("go", "build", "-o", real, "./cmd/tinybroker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "bin")
	wrapper := fmt.Sprintf(`#!/bin/sh
if [ "$1" = serve ]; then
  shift
  exec %q serve --listen "127.0.0.1:$TB_README_GRPC_PORT" --http-listen "127.0.0.1:$TB_README_HTTP_PORT" "$@"
fi
exec %q "$@"
`, real, real)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "tinybroker"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}

	// The go command's caches, which a session's own HOME would otherwise move.
	goEnv, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	f := strings.Split(strings.TrimSpace(string(goEnv)), "\n")
	if len(f) != 3 {
		t.Fatalf("go env: %q", goEnv)
	}
	goVars := []string{"GOCACHE=" + f[0], "GOMODCACHE=" + f[1], "GOPATH=" + f[2]}

	for _, s := range sessions {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			runSession(t, root, bin, goVars, s)
		})
	}
}

func runSession(t *testing.T, root, bin string, goVars []string, s *session) {
	path := bin + string(os.PathListSeparator) + os.Getenv("PATH")
	if needs := s.opts["needs"]; needs != "" {
		for _, p := range strings.Split(needs, ",") {
			if _, err := exec.LookPath(p); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("README.md:%d: session %q needs %s (.ci/run installs it)", s.line, s.name, p)
				}
				t.Skipf("README.md:%d: session %q needs %s, not installed", s.line, s.name, p)
			}
		}
	}
	if names := s.opts["tools"]; names != "" {
		if testing.Short() {
			t.Skipf("README.md:%d: -short: not installing %s", s.line, names)
		}
		gobin := t.TempDir()
		for _, name := range strings.Split(names, ",") {
			mod, ok := tools[name]
			if !ok {
				t.Fatalf("README.md:%d: no pinned version of tool %q", s.line, name)
			}
			install := exec.Command("go", "install", mod)
			install.Env = append(os.Environ(), "GOBIN="+gobin)
			if out, err := install.CombinedOutput(); err != nil {
				t.Fatalf("go install %s: %v\n%s", mod, err, out)
			}
		}
		path = gobin + string(os.PathListSeparator) + path
	}

	tmp := t.TempDir()
	work, home, out := filepath.Join(tmp, "work"), filepath.Join(tmp, "home"), filepath.Join(tmp, "out")
	for _, d := range []string{work, home, out, filepath.Join(work, ".bin")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(bin, "tinybroker"), filepath.Join(work, ".bin", "tinybroker")); err != nil {
		t.Fatal(err)
	}
	if files := s.opts["files"]; files != "" {
		for _, f := range strings.Split(files, ",") {
			b, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				t.Fatalf("README.md:%d: files=%s: %v", s.line, f, err)
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(work, f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(work, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	ports := freePorts(t, 2)
	grpcPort, httpPort := ports[0], ports[1]
	subst := strings.NewReplacer("127.0.0.1:7878", "127.0.0.1:"+grpcPort, "127.0.0.1:7879", "127.0.0.1:"+httpPort)
	script := buildScript(s, out, subst, grpcPort, httpPort)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TINYBROKER_") && !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+path, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"TB_README_GRPC_PORT="+grpcPort, "TB_README_HTTP_PORT="+httpPort, "TB_README_ROOT="+root)
	env = append(env, goVars...)
	if s.opts["addr"] != "unset" {
		env = append(env, "TINYBROKER_ADDR=127.0.0.1:"+grpcPort)
	}
	cmd.Env = env
	t.Cleanup(func() { // what a session killed on its timeout left running
		b, _ := os.ReadFile(filepath.Join(out, "pgids"))
		for _, f := range strings.Fields(string(b)) {
			if pgid, err := strconv.Atoi(f); err == nil && pgid > 1 {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
	})
	harness, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Errorf("README.md:%d: session %q took over 60 s; killed", s.line, s.name)
	}
	if err != nil || len(harness) > 0 {
		t.Errorf("README.md:%d: session %q: bash: %v\n%s", s.line, s.name, err, harness)
	}

	for i, st := range s.steps {
		got, err := os.ReadFile(filepath.Join(out, strconv.Itoa(i)))
		if err != nil {
			t.Errorf("README.md:%d: $ %s: not run (%v)", st.line, st.cmd, err)
			continue
		}
		if st.serve && len(trimBlank(st.want, func(w wantLine) string { return w.text })) == 0 {
			continue // the broker's log: compared only where README shows some
		}
		var want []wantLine
		for _, w := range st.want {
			want = append(want, wantLine{w.line, subst.Replace(w.text)})
		}
		got = []byte(strings.ReplaceAll(string(got), work, workShown))
		if resolved, err := filepath.EvalSymlinks(work); err == nil {
			got = []byte(strings.ReplaceAll(string(got), resolved, workShown))
		}
		if msg := compare(want, splitLines(string(got))); msg != "" {
			t.Errorf("README.md:%d: $ %s\n%s\nits output:\n%s", st.line, st.cmd, msg, got)
		}
		if !st.bg && !st.serve {
			rc, _ := os.ReadFile(filepath.Join(out, strconv.Itoa(i)+".rc"))
			if code := strings.TrimSpace(string(rc)); code != "0" && !showsError(st.want) {
				t.Errorf("README.md:%d: $ %s\nexited %s, and README shows no error\n%s", st.line, st.cmd, code, got)
			}
		}
	}
}

// buildScript is the session as one bash script: each command's output goes to out/N.
func buildScript(s *session, out string, subst *strings.Replacer, grpcPort, httpPort string) string {
	var b strings.Builder
	b.WriteString(`set -m # each background command in a process group of its own, which the signals go to;
# disowned, so that bash prints no job notices into the next command's output
make() { # make build: the binary is built; make plugins: the example plugins, from the repository, into examples/plugins/bin here
  case "$*" in
  build) return 0 ;;
  plugins)
    for p in $(sed -n 's/^PLUGIN_EXAMPLES *:= *//p' "$TB_README_ROOT/examples/plugins/plugins.mk"); do
      GOOS=wasip1 GOARCH=wasm go build -C "$TB_README_ROOT" -buildmode=c-shared -trimpath -o "$PWD/examples/plugins/bin/$p.wasm" "./examples/plugins/$p" || return 1
    done ;;
  *) echo "make $*: the README test runs only 'make build' and 'make plugins'" >&2; return 1 ;;
  esac
}
tb_wait_port() { # PORT PID: until PORT accepts connections
  for _ in $(seq 1000); do
    (: </dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0
    kill -0 $2 2>/dev/null || { echo "README test: serve exited before it listened on port $1" >&2; return 1; }
    sleep 0.01
  done
  echo "README test: nothing listens on port $1 after 10 s" >&2; return 1
}
tb_wait_output() { # FILE PID: until the background command printed something (or exited)
  for _ in $(seq 1000); do
    [ -s "$1" ] && return 0
    kill -0 $2 2>/dev/null || return 0
    sleep 0.01
  done
  echo "README test: $1: the background command printed nothing in 10 s" >&2
}
tb_settle() { # FILE LINES PID: until it printed LINES lines (or exited, or 10 s), then SIGINT
  for _ in $(seq 1000); do
    [ "$(wc -l <"$1")" -ge $2 ] && break
    kill -0 $3 2>/dev/null || break
    sleep 0.01
  done
  kill -INT -- -$3 2>/dev/null
  tb_wait_gone $3
}
tb_wait_gone() { # PID: until it exited (disowned jobs cannot be waited for)
  for _ in $(seq 1000); do kill -0 $1 2>/dev/null || return 0; sleep 0.01; done
  echo "README test: process $1 still runs 10 s after SIGINT" >&2
}
tb_serve_pids=
tb_stop_serve() { for p in $tb_serve_pids; do kill -KILL -- -$p 2>/dev/null; tb_wait_gone $p; done; tb_serve_pids=; }
`)
	pgids := filepath.Join(out, "pgids")
	var settle []string
	served := false
	for i, st := range s.steps {
		file := filepath.Join(out, strconv.Itoa(i))
		cmd := subst.Replace(st.cmd)
		switch {
		case st.serve:
			if served { // a restart: the background commands end first, then the broker
				for _, l := range settle {
					b.WriteString(l)
				}
				settle = nil
				b.WriteString("tb_stop_serve\n")
			}
			served = true
			fmt.Fprintf(&b, "{ :; %s\n} >%q 2>&1 </dev/null &\ndisown $!\necho $! >>%q\ntb_serve_pids=\"$tb_serve_pids $!\"\ntb_wait_port %s $! && tb_wait_port %s $!\n", cmd, file, pgids, grpcPort, httpPort)
		case st.bg:
			fmt.Fprintf(&b, "{ :; %s\n} >%q 2>&1 </dev/null &\ndisown $!\necho $! >>%q\ntb_pid_%d=$!\ntb_wait_output %q $!\n", cmd, file, pgids, i, file)
			n := 0
			for _, w := range st.want {
				if strings.TrimSpace(w.text) != "..." {
					n++
				}
			}
			settle = append(settle, fmt.Sprintf("tb_settle %q %d $tb_pid_%d\n", file, n, i))
		default:
			fmt.Fprintf(&b, "{ :; %s\n} >%q 2>&1 </dev/null\necho $? >%q\n", cmd, file, file+".rc")
		}
	}
	for _, l := range settle {
		b.WriteString(l)
	}
	b.WriteString("tb_stop_serve\nwait\n")
	return b.String()
}

func showsError(want []wantLine) bool {
	for _, w := range want {
		if strings.HasPrefix(w.text, "tinybroker:") || strings.HasPrefix(w.text, "Error:") {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func norm(s string) string {
	return strings.TrimSpace(spacesRe.ReplaceAllString(s, " "))
}

// tokenRe finds the words of an expected line: RFC 3339 times, and runs of the URL-safe
// base64 alphabet. A time matches any time; isSysID says whether a word is a system_id (22
// characters, with an upper- and a lower-case letter and a digit, which words and metric
// names of 22 characters do not have), which matches any system_id.
var (
	timeRe     = `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)`
	tokenRe    = regexp.MustCompile(timeRe + `|[A-Za-z0-9_-]+`)
	onlyTimeRe = regexp.MustCompile("^" + timeRe + "$")
)

func isSysID(s string) bool {
	return len(s) == 22 && strings.ContainsAny(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") && strings.ContainsAny(s, "abcdefghijklmnopqrstuvwxyz") && strings.ContainsAny(s, "0123456789")
}

// lineMatches compares an expected line with one of the output: spaces collapsed, "..."
// any text, a system_id any system_id, a time any time.
func lineMatches(want, got string) bool {
	want, got = norm(want), norm(got)
	if want == got {
		return true
	}
	var re strings.Builder
	re.WriteString("^")
	for i, part := range strings.Split(want, "...") {
		if i > 0 {
			re.WriteString(".*")
		}
		last := 0
		for _, m := range tokenRe.FindAllStringIndex(part, -1) {
			word := part[m[0]:m[1]]
			var pat string
			switch {
			case onlyTimeRe.MatchString(word):
				pat = timeRe
			case isSysID(word):
				pat = "[A-Za-z0-9_-]{22}"
			default:
				continue
			}
			re.WriteString(regexp.QuoteMeta(part[last:m[0]]))
			re.WriteString(pat)
			last = m[1]
		}
		re.WriteString(regexp.QuoteMeta(part[last:]))
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(got)
}

func trimBlank[T any](lines []T, text func(T) string) []T {
	for len(lines) > 0 && strings.TrimSpace(text(lines[len(lines)-1])) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// matches reports whether got matches want, a line of "..." matching any lines.
func matches(want []wantLine, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if norm(want[0].text) == "..." {
		for k := 0; k <= len(got); k++ {
			if matches(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && lineMatches(want[0].text, got[0]) && matches(want[1:], got[1:])
}

// compare returns "" if got matches want, else what differs, naming README's line.
func compare(want []wantLine, got []string) string {
	want = trimBlank(want, func(w wantLine) string { return w.text })
	got = trimBlank(got, func(s string) string { return s })
	if matches(want, got) {
		return ""
	}
	// Where: the first expected line that no prefix of the output reaches.
	g := 0
	for i, w := range want {
		if norm(w.text) == "..." {
			// skip to the next line the following expected line matches
			if i+1 == len(want) {
				return "" // cannot happen: a final "..." matches
			}
			for g < len(got) && !lineMatches(want[i+1].text, got[g]) {
				g++
			}
			continue
		}
		if g >= len(got) {
			return fmt.Sprintf("README.md:%d: expected %q, the output ended before it", w.line, w.text)
		}
		if !lineMatches(w.text, got[g]) {
			return fmt.Sprintf("README.md:%d: expected %q\n  got %q", w.line, w.text, got[g])
		}
		g++
	}
	if len(want) == 0 {
		return "README.md shows no output, and the command printed some"
	}
	return fmt.Sprintf("README.md:%d: the output goes on after this line, README does not show the rest: %q", want[len(want)-1].line, got[g:])
}

// freePorts returns n ports free now on 127.0.0.1 (serve binds them a moment later).
func freePorts(t *testing.T, n int) []string {
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports
}

// The matcher and the marker rules, alone: each case fails if its rule is broken.
func TestMatcher(t *testing.T) {
	w := func(lines ...string) []wantLine {
		var ws []wantLine
		for i, l := range lines {
			ws = append(ws, wantLine{100 + i, l})
		}
		return ws
	}
	for _, c := range []struct {
		name string
		want []wantLine
		got  []string
		ok   bool
	}{
		{"exact", w("a b"), []string{"a b"}, true},
		{"spaces collapse", w("a  b   c"), []string{"a b\tc  "}, true},
		{"differs", w("a b"), []string{"a c"}, false},
		{"wildcard in a line", w("published ... to x"), []string{"published 7 to x"}, true},
		{"wildcard keeps the rest", w("published ... to x"), []string{"published 7 to y"}, false},
		{"wildcard lines", w("a", "...", "z"), []string{"a", "b", "c", "z"}, true},
		{"wildcard lines, none", w("a", "...", "z"), []string{"a", "z"}, true},
		{"wildcard lines, end must match", w("a", "...", "z"), []string{"a", "b"}, false},
		{"system id", w("[x] C0ZlNv2S8xE1c3Wm9aPjYg attempt=1"), []string{"[x] AxthYEzESJlKfivaVSSCw_ attempt=1"}, true},
		{"system id has 22 characters", w("[x] C0ZlNv2S8xE1c3Wm9aPjYg attempt=1"), []string{"[x] AxthYEzESJlKfivaVSSCw attempt=1"}, false},
		{"a word of 22 is no id", w("tinybroker_connections 0"), []string{"tinybroker_connectionz 0"}, false},
		{"time", w("at 2026-12-05T18:08:04.986458956Z"), []string{"at 2027-01-01T00:00:00Z"}, true},
		{"more output", w("a"), []string{"a", "b"}, false},
		{"less output", w("a", "b"), []string{"a"}, false},
		{"trailing blank lines", w("a", ""), []string{"a"}, true},
	} {
		if msg := compare(c.want, c.got); (msg == "") != c.ok {
			t.Errorf("%s: compare(%v, %q) = %q, want ok=%v", c.name, c.want, c.got, msg, c.ok)
		} else if !c.ok && !strings.Contains(msg, "README.md:") {
			t.Errorf("%s: %q does not name README's line", c.name, msg)
		}
	}
}

func TestMarkers(t *testing.T) {
	readme := strings.Join([]string{
		"<!-- test: s files=a.hcl", // 1
		"$ tinybroker serve",       // 2
		"-->",                      // 3
		"```console",               // 4
		"$ tinybroker sub x &",     // 5
		"subscribed",               // 6
		"$ tinybroker pub x 1",     // 7
		"published",                // 8
		"```",                      // 9
		"",                         // 10
		"<!-- test: s -->",         // 11
		"```console",               // 12
		"[x] 1",                    // 13: the output of sub, the last background command
		"```",                      // 14
		"<!-- not tested: a reason -->",
		"```sh",
		"make run",
		"```",
		"```sh", // 19: no marker
		"ls",
		"```",
	}, "\n")
	sessions, problems := parseReadme(readme)
	if len(problems) != 1 || !strings.Contains(problems[0], "README.md:19:") {
		t.Errorf("problems = %q, want one, of line 19", problems)
	}
	if len(sessions) != 1 || sessions[0].opts["files"] != "a.hcl" || len(sessions[0].steps) != 3 {
		t.Fatalf("sessions = %+v", sessions)
	}
	serve, sub, pub := sessions[0].steps[0], sessions[0].steps[1], sessions[0].steps[2]
	if !serve.serve || !sub.bg || sub.cmd != "tinybroker sub x" || pub.bg || pub.line != 7 {
		t.Errorf("steps: %+v %+v %+v", serve, sub, pub)
	}
	if len(sub.want) != 2 || sub.want[1].text != "[x] 1" || sub.want[1].line != 13 {
		t.Errorf("sub's output = %+v, want the line of the later block", sub.want)
	}
}
