package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The clients beyond Go join the group through their conformance drivers
// (internal/clientconf, PROTOCOL.md): a driver started with the three nodes' addresses is
// told to subscribe as a member of "work", and its delivery lines are recorded as the Go
// members' deliveries are. So a node killed under a Python or TypeScript member checks that
// client's failover with the same assertions: nothing confirmed lost, repeats marked.

// driverCommands are the drivers by client name, run from the repository's root.
var driverCommands = map[string]func(addrs string) (*exec.Cmd, error){
	"python": func(addrs string) (*exec.Cmd, error) {
		py := os.Getenv("TB_PYTHON")
		if py == "" {
			py = "/usr/bin/python3"
		}
		sdk, err := filepath.Abs("sdk/python")
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(py, "internal/clientconf/pyclient.py", addrs)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+sdk, "PYTHONUNBUFFERED=1")
		return cmd, nil
	},
	// The driver runs sdk/typescript's dist/: make chaos-cluster builds it first.
	"typescript": func(addrs string) (*exec.Cmd, error) {
		return exec.Command("node", "internal/clientconf/tsclient.mjs", addrs), nil
	},
}

// driverMember is a driver process, a member of the group "work".
type driverMember struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	done chan struct{}
	got  atomic.Int64 // deliveries
}

// startDriverMember starts client name's driver against addrs and subscribes it as a member
// of "work", trying until deadline while the cluster forms; its deliveries go to rec.
func startDriverMember(name, addrs string, rec *recorder, deadline time.Time) (*driverMember, error) {
	mk, ok := driverCommands[name]
	if !ok {
		return nil, fmt.Errorf("-clients: no driver for %q (python, typescript)", name)
	}
	cmd, err := mk(addrs)
	if err != nil {
		return nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("the %s driver: %w", name, err)
	}
	d := &driverMember{name: name, cmd: cmd, in: in, done: make(chan struct{})}
	answers := make(chan map[string]any, 4)
	go func() {
		defer close(d.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				fmt.Fprintf(os.Stderr, "%s driver: %s\n", name, sc.Text())
				continue
			}
			if l["event"] != "message" {
				answers <- l
				continue
			}
			payload, _ := l["payload"].(string)
			seq, _ := strconv.Atoi(payload)
			id, _ := l["system_id"].(string)
			attempt, _ := l["attempt"].(float64)
			rec.add(delivery{seq: seq, systemID: id, attempt: int(attempt), at: time.Now()}, true) // the driver acks on return
			d.got.Add(1)
		}
	}()
	sub := `{"op":"subscribe","name":"work","patterns":["work.>"],"group":"work","concurrency":4}` + "\n"
	for {
		if _, err := io.WriteString(in, sub); err != nil {
			return nil, err
		}
		a, ok := <-answers
		if !ok {
			return nil, fmt.Errorf("the %s driver exited", name)
		}
		if a["ok"] == "subscribe" {
			return d, nil
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("the %s member could not subscribe: %v", name, a["error"])
		}
		time.Sleep(500 * time.Millisecond) // the cluster is forming
	}
}

// stop tells the driver to exit (its subscription closes, sending its last acks) and waits.
func (d *driverMember) stop() {
	_, _ = io.WriteString(d.in, `{"op":"exit"}`+"\n")
	_ = d.in.Close()
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	_ = d.cmd.Wait()
}

// clientNames splits -clients.
func clientNames(s string) []string {
	var names []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}
