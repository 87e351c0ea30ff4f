package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// server is one `tinybroker serve` process, its log and its RSS.
type server struct {
	cmd     *exec.Cmd
	pid     int
	addr    string // set once it logs "listening"
	logPath string

	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, once exited is closed

	mu      sync.Mutex
	counts  map[string]int // log lines containing each watched text
	watch   []string
	peakRSS int64
	samples []int64 // VmRSS every rssInterval
	killed  string  // why the harness killed it, if it did

	stop chan struct{}
}

const (
	rssInterval   = 500 * time.Millisecond
	watchInterval = 50 * time.Millisecond
)

// startServer starts `bin serve --config cfg --listen 127.0.0.1:0` in dir and, unless
// wantExit, waits until it logs the address it listens on. env is added to the process's
// environment. The harness kills the process if its RSS passes killRSS.
func startServer(bin, dir, cfg string, env []string, killRSS int64, wantExit bool, watch ...string) (*server, error) {
	s := &server{logPath: filepath.Join(dir, "server.log"), exited: make(chan struct{}), counts: map[string]int{},
		watch: watch, stop: make(chan struct{})}
	logf, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "info")
	s.cmd.Dir = dir
	s.cmd.Env = append(os.Environ(), env...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	s.pid = s.cmd.Process.Pid
	listening := make(chan string, 1)
	logDone := make(chan struct{})
	go func() { // copy the log to its file, find the address and count watched lines
		defer close(logDone)
		defer logf.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["@message"] == "listening" {
				if a, ok := rec["addr"].(string); ok {
					select {
					case listening <- a:
					default:
					}
				}
			}
			s.mu.Lock()
			for _, w := range s.watch {
				if strings.Contains(line, w) {
					s.counts[w]++
				}
			}
			s.mu.Unlock()
		}
		_, _ = io.Copy(logf, stderr)
	}()
	go func() {
		<-logDone
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	go s.sample(killRSS)
	if wantExit {
		return s, nil
	}
	select {
	case s.addr = <-listening:
		return s, nil
	case <-s.exited:
		return s, fmt.Errorf("tinybroker serve exited before listening (%v); log: %s", s.err, s.logTail(5))
	case <-time.After(30 * time.Second):
		s.kill("did not listen within 30s")
		return s, errors.New("tinybroker serve did not listen within 30s")
	}
}

// sample records VmRSS every rssInterval and, every watchInterval, kills the process if
// its RSS passes killRSS: the machine is shared, and an unbounded broker would take it down.
func (s *server) sample(killRSS int64) {
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-s.exited:
			return
		case <-s.stop:
			return
		case <-tick.C:
		}
		rss := readRSS(s.pid)
		if rss <= 0 {
			continue
		}
		s.mu.Lock()
		s.peakRSS = max(s.peakRSS, rss)
		if n%int(rssInterval/watchInterval) == 0 {
			s.samples = append(s.samples, rss)
		}
		s.mu.Unlock()
		n++
		if killRSS > 0 && rss > killRSS {
			s.kill(fmt.Sprintf("RSS %s passed the harness's ceiling of %s", mib(rss), mib(killRSS)))
			return
		}
	}
}

// readRSS returns VmRSS of pid in bytes (0 if it cannot be read).
func readRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// cpuTime returns the CPU time (user + system) pid has used.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s) // f[0] is field 3 (state); utime and stime are fields 14 and 15
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

func (s *server) kill(why string) {
	s.mu.Lock()
	if s.killed == "" {
		s.killed = why
	}
	s.mu.Unlock()
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
}

func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func (s *server) peak() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakRSS
}

func (s *server) rss() int64 { return readRSS(s.pid) }

func (s *server) killedWhy() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killed
}

// waitLog waits until n log lines have contained text (one of the watched texts), the
// process exits or d passes. It reports whether n lines did.
func (s *server) waitLog(text string, n int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		// Whether to stop is settled before the count is read, so that the lines logged just
		// before an exit or the deadline count.
		over := time.Now().After(deadline) || !s.alive()
		s.mu.Lock()
		seen := s.counts[text]
		s.mu.Unlock()
		if seen >= n || over {
			return seen >= n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// terminate sends SIGTERM and waits up to d for the process to exit; then it kills it.
// It reports whether the process stopped on SIGTERM.
func (s *server) terminate(d time.Duration) bool {
	defer close(s.stop)
	if !s.alive() {
		return true
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return true
	case <-time.After(d):
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
		return false
	}
}

// logTail returns the last n lines of the server's log.
func (s *server) logTail(n int) string {
	b, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// healthy asks the gRPC health service on a fresh connection.
func healthy(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health: %v", r.GetStatus())
	}
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
