package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "github.com/tinybroker/tinybroker/proto/tinybroker/v1"
)

// Finding 6: plugin files that are not regular files of bounded size, at start and on
// SIGHUP under load.

// badPlugin makes the file a bad plugin path names: "/dev/zero", "fifo" (a named pipe in
// dir) or "huge" (a sparse 1 GiB file in dir, zeros: not WebAssembly).
func badPlugin(dir, kind string) (string, error) {
	switch kind {
	case "fifo":
		p := filepath.Join(dir, "plugin.fifo")
		return p, syscall.Mkfifo(p, 0o600)
	case "huge":
		p := filepath.Join(dir, "huge.wasm")
		f, err := os.Create(p)
		if err != nil {
			return "", err
		}
		defer f.Close()
		return p, f.Truncate(1 << 30)
	}
	return kind, nil
}

func pluginBlock(path string) string {
	return fmt.Sprintf("plugin \"pass\" {\n  path   = %q\n  topics = [\"held.>\"]\n}\n", path)
}

// pluginAtStart: the server must refuse to start, at once, with an error naming the file,
// without reading it whole or hanging.
func pluginAtStart(kind string) func(*env) error {
	return func(e *env) error {
		path, err := badPlugin(e.dir, kind)
		if err != nil {
			return err
		}
		cfg, _ := os.ReadFile(e.cfg)
		if err := os.WriteFile(e.cfg, append(cfg, pluginBlock(path)...), 0o644); err != nil {
			return err
		}
		start := time.Now()
		srv, err := e.startServer(true)
		if err != nil {
			return err
		}
		e.srv = srv
		select {
		case <-srv.exited:
		case <-time.After(5 * time.Second):
			stopped := srv.terminate(5 * time.Second)
			return fmt.Errorf("still starting after 5s (RSS %s); stopped on SIGTERM: %v", mib(srv.peak()), stopped)
		}
		took := time.Since(start)
		if why := srv.killedWhy(); why != "" {
			return fmt.Errorf("killed by the harness: %s", why)
		}
		last := srv.logTail(1)
		e.r.figure("refused to start in %.2fs (peak RSS %s): %s", took.Seconds(), mib(srv.peak()), truncate(last, 300))
		if srv.err == nil {
			return errors.New("serve exited with status 0")
		}
		if !strings.Contains(last, filepath.Base(path)) {
			return fmt.Errorf("the error does not name the file: %q", last)
		}
		return nil
	}
}

func reloadConfig(o *options, dir string) (string, error) {
	b, err := os.ReadFile(o.plugin)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "pass.wasm")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return "", err
	}
	return "group \"held\" {\n  topics = [\"held.>\"]\n}\n\n" + pluginBlock(p), nil
}

// pluginReload: with 2,000 messages queued for a declared group and publishers running, a
// SIGHUP to each bad plugin file is refused, the running chain stays and nothing is lost.
func pluginReload(e *env) error {
	pub := e.client()
	held := e.o.n(2000, 100)
	for i := range held {
		if r, err := pub.Publish(e.ctx, &pb.PublishRequest{Topic: "held.job", Payload: []byte(fmt.Sprint(i))}); err != nil || r.GetRouted() != 1 {
			return fmt.Errorf("queueing for the declared group: routed %d, %v", r.GetRouted(), err)
		}
	}
	// The load: 4 publishers as fast as they can.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var loadPublished, loadErrs atomic.Int64
	for w := range 4 {
		c := e.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			topic := fmt.Sprintf("load.%d", w)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Publish(e.ctx, &pb.PublishRequest{Topic: topic, Payload: []byte("load")}); err != nil {
					loadErrs.Add(1)
					if e.ctx.Err() != nil {
						return
					}
				} else {
					loadPublished.Add(1)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	var fails []error
	good, _ := os.ReadFile(e.cfg)
	for i, kind := range []string{"huge", "/dev/zero", "fifo"} {
		path, err := badPlugin(e.dir, kind)
		if err != nil {
			return err
		}
		bad := strings.Replace(string(good), filepath.Join(e.dir, "pass.wasm"), path, 1)
		if err := os.WriteFile(e.cfg, []byte(bad), 0o644); err != nil {
			return err
		}
		t0 := time.Now()
		_ = e.srv.cmd.Process.Signal(syscall.SIGHUP)
		if !e.srv.waitLog("reload refused", i+1, 10*time.Second) {
			fails = append(fails, fmt.Errorf("SIGHUP to %s: no \"reload refused\" within 10s (alive: %v, RSS %s)", kind, e.srv.alive(), mib(e.srv.rss())))
			if !e.srv.alive() {
				break
			}
			continue
		}
		e.r.figure("SIGHUP to %s: refused in %.2fs, server RSS %s", kind, time.Since(t0).Seconds(), mib(e.srv.rss()))
	}
	_ = os.WriteFile(e.cfg, good, 0o644)
	if !e.srv.alive() {
		return errors.Join(fails...)
	}
	e.r.figure("load during the reloads: %d publishes, %d errors", loadPublished.Load(), loadErrs.Load())
	if n := loadErrs.Load(); n > 0 {
		fails = append(fails, fmt.Errorf("%d publishes failed during the reloads", n))
	}
	st, err := pub.Stats(e.ctx, &pb.StatsRequest{})
	if err != nil {
		return errors.Join(append(fails, err)...)
	}
	var plugins []string
	for _, p := range st.GetPlugins() {
		plugins = append(plugins, p.GetName())
	}
	if len(plugins) != 1 || plugins[0] != "pass" {
		fails = append(fails, fmt.Errorf("plugins after the reloads: %v, want the running [pass]", plugins))
	}
	// Every queued message is still there.
	m, err := subscribe(e.ctx, e.client(), balancedOpen("held", 256, "held.>"))
	if err != nil {
		return errors.Join(append(fails, err)...)
	}
	defer m.cancel()
	seen := map[string]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < held && time.Now().Before(deadline) {
		r, err := m.s.Recv()
		if err != nil {
			break
		}
		var ids []string
		for _, msg := range r.GetMessages().GetMessages() {
			if msg.GetTopic() == "held.job" {
				seen[string(msg.GetPayload())] = true
			}
			ids = append(ids, msg.GetSystemId())
		}
		_ = m.s.Send(&pb.SubscribeRequest{Frame: &pb.SubscribeRequest_Ack{Ack: &pb.AckBatch{SystemIds: ids}}})
	}
	e.r.figure("queued before the reloads: %d; delivered after: %d; plugins running: %v", held, len(seen), plugins)
	if len(seen) != held {
		fails = append(fails, fmt.Errorf("%d of %d queued messages delivered after the reloads", len(seen), held))
	}
	return errors.Join(fails...)
}
