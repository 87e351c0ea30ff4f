//go:build unix

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestDebVersion(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"v9.8.7", "9.8.7"},
		{"v1.2.3-rc.1", "1.2.3~rc.1"},
		{"v1.2.3-5-gabc1234", "1.2.3+5.gabc1234"},
		{"v1.2.3-5-gabc1234-dirty", "1.2.3+5.gabc1234.dirty"},
		{"v1.2.3-rc.1-5-gabc1234", "1.2.3~rc.1+5.gabc1234"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"fc4ac62", "0~fc4ac62"},
		{"fc4ac62-dirty", "0~fc4ac62+dirty"},
		{"1234567", "0~1234567"},
		{"devel", "0~devel"},
		{"v1.2.3-beta_2", "1.2.3~beta.2"},
	} {
		if got := debVersion(c.in); got != c.want {
			t.Errorf("debVersion(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// As dpkg orders them, when it is here to ask.
	if _, err := exec.LookPath("dpkg"); err == nil {
		order := []string{"0~devel", "1.2.3~rc.1", "1.2.3~rc.1+5.gabc1234", "1.2.3", "1.2.3+5.gabc1234", "1.2.3+5.gabc1234.dirty", "1.2.4"}
		for i := 1; i < len(order); i++ {
			if err := exec.Command("dpkg", "--compare-versions", order[i-1], "lt", order[i]).Run(); err != nil {
				t.Errorf("dpkg: %s is not before %s", order[i-1], order[i])
			}
		}
	}
}

// make release's Debian package for this machine: what it holds, that systemd accepts its
// unit, and (as root) that it installs, runs as its user and purges cleanly.
func TestDebPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if runtime.GOOS != "linux" {
		t.Skip("runs the linux binary")
	}
	out := t.TempDir()
	t.Chdir("../..") // the repository's root, as make release runs it
	const version, commit = "v9.8.7", "0123456789abcdef0123456789abcdef01234567"
	if err := build(version, commit, out, []string{"linux/" + runtime.GOARCH}); err != nil {
		t.Fatal(err)
	}
	debPath := filepath.Join(out, "tinybroker_9.8.7_"+runtime.GOARCH+".deb")
	// SHA256SUMS lists the package and the archive (and the image: TestReleaseImage), each
	// with its right checksum.
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for line := range strings.Lines(string(sums)) {
		sum, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
		if got, err := sha256File(filepath.Join(out, name)); !ok || err != nil || got != sum {
			t.Errorf("SHA256SUMS: %q: the file's sha256 is %s (%v)", line, got, err)
		}
		listed[name] = true
	}
	for _, name := range []string{filepath.Base(debPath), "tinybroker_9.8.7_linux_" + runtime.GOARCH + ".tar.gz"} {
		if !listed[name] {
			t.Errorf("SHA256SUMS does not list %s:\n%s", name, sums)
		}
	}
	deb := readDeb(t, debPath)
	root := t.TempDir() // the package's files, unpacked

	t.Run("contents", func(t *testing.T) {
		checkDebContents(t, debPath, deb, root, version, commit)
	})
	t.Run("systemd-analyze", func(t *testing.T) {
		// The unit as packaged, but for ExecStart's binary, which verify wants to exist.
		unit := strings.ReplaceAll(string(deb.data["lib/systemd/system/tinybroker.service"].body),
			"/usr/bin/tinybroker", filepath.Join(root, "usr/bin/tinybroker"))
		path := filepath.Join(t.TempDir(), "tinybroker.service")
		if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		systemdVerify(t, path)
	})
	t.Run("install", func(t *testing.T) {
		debInstallRun(t, debPath)
	})
}

type debFile struct {
	mode       os.FileMode
	uid, gid   int
	user, grp  string
	body       []byte
	typeflag   byte
	linkTarget string
}

type debArchive struct {
	members       []string // the ar archive's, in order
	control, data map[string]debFile
}

// readDeb reads a .deb as dpkg does: an ar archive of debian-binary, control.tar.gz and
// data.tar.gz (nfpm's default compression).
func readDeb(t *testing.T, path string) debArchive {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("!<arch>\n")) {
		t.Fatalf("%s is not an ar archive", path)
	}
	d := debArchive{}
	b = b[8:]
	for len(b) > 0 {
		if len(b) < 60 {
			t.Fatalf("ar: a truncated header: %q", b)
		}
		name := strings.TrimSuffix(strings.TrimSpace(string(b[:16])), "/")
		var size int
		if _, err := fmt.Sscan(strings.TrimSpace(string(b[48:58])), &size); err != nil || size > len(b)-60 {
			t.Fatalf("ar: member %s: bad size %q", name, b[48:58])
		}
		body := b[60 : 60+size]
		b = b[60+size:]
		if size%2 == 1 && len(b) > 0 {
			b = b[1:] // members are 2-byte aligned
		}
		d.members = append(d.members, name)
		switch name {
		case "debian-binary":
			if string(body) != "2.0\n" {
				t.Fatalf("debian-binary = %q", body)
			}
		case "control.tar.gz":
			d.control = readTarGz(t, body)
		case "data.tar.gz":
			d.data = readTarGz(t, body)
		}
	}
	return d
}

func readTarGz(t *testing.T, b []byte) map[string]debFile {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]debFile{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(h.Name, "./")] = debFile{mode: os.FileMode(h.Mode) & os.ModePerm, uid: h.Uid, gid: h.Gid,
			user: h.Uname, grp: h.Gname, body: body, typeflag: h.Typeflag, linkTarget: h.Linkname}
	}
}

func checkDebContents(t *testing.T, debPath string, deb debArchive, root, version, commit string) {
	if got, want := strings.Join(deb.members, " "), "debian-binary control.tar.gz data.tar.gz"; got != want {
		t.Fatalf("the .deb holds %s, want %s", got, want)
	}
	control := string(deb.control["control"].body)
	for _, field := range []string{"Package: tinybroker\n", "Version: 9.8.7\n", "Architecture: " + runtime.GOARCH + "\n", "Depends: passwd\n", "Maintainer: ", "Description: "} {
		if !strings.Contains(control, field) {
			t.Errorf("control lacks %q:\n%s", field, control)
		}
	}
	if got, want := string(deb.control["conffiles"].body), "/etc/tinybroker/tinybroker.hcl\n"; got != want {
		t.Errorf("conffiles = %q, want %q", got, want)
	}
	// The maintainer scripts are internal/release/debian's, executable.
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		f, ok := deb.control[s]
		src, err := os.ReadFile(filepath.Join(debianDir, s))
		if err != nil {
			t.Fatal(err)
		}
		if !ok || f.mode != 0o755 || !bytes.Equal(f.body, src) {
			t.Errorf("control's %s: present %v, mode %v, want 0755 and %s", s, ok, f.mode, filepath.Join(debianDir, s))
		}
	}
	for _, s := range []string{"preinst", "config", "templates"} {
		if _, ok := deb.control[s]; ok {
			t.Errorf("control has a %s", s)
		}
	}
	postinst := string(deb.control["postinst"].body)
	if !strings.Contains(postinst, "useradd --system") || !strings.Contains(postinst, "--shell /usr/sbin/nologin") {
		t.Errorf("postinst does not create a system user without a shell:\n%s", postinst)
	}
	// The package must not enable or start the service (README.md says so).
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		var body strings.Builder // the commands, not the comments
		for line := range strings.Lines(string(deb.control[s].body)) {
			if !strings.HasPrefix(strings.TrimSpace(line), "#") {
				body.WriteString(line)
			}
		}
		for _, no := range []string{"systemctl enable", "systemctl start", "systemctl restart", "deb-systemd-invoke start"} {
			if strings.Contains(body.String(), no) {
				t.Errorf("%s runs %q", s, no)
			}
		}
	}

	// The files: exactly these, root's, with these modes.
	wantFiles := map[string]os.FileMode{
		"usr/bin/tinybroker":                               0o755,
		"etc/tinybroker/tinybroker.hcl":                    0o640,
		"lib/systemd/system/tinybroker.service":            0o644,
		"usr/share/doc/tinybroker/README.md":               0o644,
		"usr/share/doc/tinybroker/CHANGELOG.md":            0o644,
		"usr/share/doc/tinybroker/examples/tinybroker.hcl": 0o644,
	}
	var got []string
	for name, f := range deb.data {
		if f.typeflag == tar.TypeDir {
			if f.mode != 0o755 || f.uid != 0 || f.gid != 0 {
				t.Errorf("directory %s: mode %v, owner %d:%d, want 0755 root's", name, f.mode, f.uid, f.gid)
			}
			continue
		}
		got = append(got, name)
		if mode, ok := wantFiles[name]; !ok || f.typeflag != tar.TypeReg || f.mode != mode || f.uid != 0 || f.gid != 0 || f.user != "root" || f.grp != "root" {
			t.Errorf("%s: type %c, mode %v, owner %d:%d (%s:%s); want a regular file, mode %v, root's", name, f.typeflag, f.mode, f.uid, f.gid, f.user, f.grp, mode)
		}
		dst := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, f.body, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(got)
	if len(got) != len(wantFiles) {
		t.Errorf("the package installs %s, want the %d files %v", strings.Join(got, " "), len(wantFiles), wantFiles)
	}
	for name, src := range map[string]string{
		"etc/tinybroker/tinybroker.hcl":                    debianDir + "/tinybroker.hcl",
		"lib/systemd/system/tinybroker.service":            debianDir + "/tinybroker.service",
		"usr/share/doc/tinybroker/examples/tinybroker.hcl": "examples/config/tinybroker.hcl",
	} {
		if b, err := os.ReadFile(src); err != nil || !bytes.Equal(b, deb.data[name].body) {
			t.Errorf("%s is not %s (%v)", name, src, err)
		}
	}
	if cfg := string(deb.data["etc/tinybroker/tinybroker.hcl"].body); !strings.Contains(cfg, "\nlisten = \"127.0.0.1:7878\"\n") ||
		!strings.Contains(cfg, "\nplugin_cache_dir = \"/var/cache/tinybroker\"\n") {
		t.Errorf("the packaged config does not listen on 127.0.0.1:7878 with its plugin cache in /var/cache/tinybroker:\n%s", cfg)
	}
	checkUnit(t, string(deb.data["lib/systemd/system/tinybroker.service"].body))

	out, err := exec.Command(filepath.Join(root, "usr/bin/tinybroker"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) || !strings.Contains(string(out), commit[:12]) {
		t.Errorf("the packaged tinybroker version says %q (%v), want %s and %s", out, err, version, commit)
	}
	// dpkg's own reading of it, when it is here.
	if _, err := exec.LookPath("dpkg-deb"); err == nil {
		info, err := exec.Command("dpkg-deb", "--info", debPath).CombinedOutput()
		if err != nil || !strings.Contains(string(info), " Package: tinybroker\n") {
			t.Errorf("dpkg-deb --info: %v\n%s", err, info)
		}
		list, err := exec.Command("dpkg-deb", "--contents", debPath).CombinedOutput()
		if err != nil || !strings.Contains(string(list), " ./usr/bin/tinybroker\n") || !strings.Contains(string(list), "-rw-r----- root/root") {
			t.Errorf("dpkg-deb --contents: %v\n%s", err, list)
		}
	}
}

// checkUnit checks the unit's settings that matter: who it runs as, how it reloads and
// restarts, and its hardening.
func checkUnit(t *testing.T, unit string) {
	t.Helper()
	settings := map[string][]string{}
	for line := range strings.Lines(unit) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("unit: not a setting: %q", line)
		}
		settings[k] = append(settings[k], v)
	}
	for k, v := range map[string]string{
		"User":                    "tinybroker",
		"Group":                   "tinybroker",
		"ExecStart":               "/usr/bin/tinybroker serve --config /etc/tinybroker/tinybroker.hcl",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"Restart":                 "on-failure",
		"LimitNOFILE":             "65536",
		"StateDirectory":          "tinybroker",
		"CacheDirectory":          "tinybroker",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectKernelLogs":       "yes",
		"ProtectControlGroups":    "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"LockPersonality":         "yes",
		"CapabilityBoundingSet":   "",
		"AmbientCapabilities":     "",
		"SystemCallFilter":        "@system-service",
		"WantedBy":                "multi-user.target",
	} {
		if !slices.Contains(settings[k], v) {
			t.Errorf("unit: %s=%v, want %s=%s", k, settings[k], k, v)
		}
	}
	// wazero's compiler needs to make memory it wrote executable (the unit says why).
	if v, ok := settings["MemoryDenyWriteExecute"]; ok {
		t.Errorf("unit: MemoryDenyWriteExecute=%v is set", v)
	}
	if v := settings["CapabilityBoundingSet"]; len(v) != 1 {
		t.Errorf("unit: CapabilityBoundingSet=%v, want one, empty", v)
	}
}

// systemdVerify runs systemd-analyze verify on a unit file: it must exit 0 and say nothing
// (it exits 0 on unknown settings and bad values, and only says so).
func systemdVerify(t *testing.T, path string) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is missing (Debian: apt-get install systemd)")
		}
		t.Skip("systemd-analyze is missing (Debian: apt-get install systemd); CI is unset")
	}
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", path, err, out)
	}
}

// debInstallRun installs the package into this machine, runs the installed broker with the
// packaged config as the package's user, and purges it. Only as root, and not over an
// installation of tinybroker already there.
func debInstallRun(t *testing.T, debPath string) {
	skip := t.Skip
	if os.Getenv("CI") != "" {
		skip = t.Fatal
	}
	if os.Geteuid() != 0 {
		skip("dpkg -i needs root; CI is unset")
	}
	for _, tool := range []string{"dpkg", "setpriv", "getent"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip(tool + " is missing")
		}
	}
	if exec.Command("dpkg-query", "-W", "tinybroker").Run() == nil {
		skip("the package tinybroker is installed already: not touching it")
	}
	if exec.Command("getent", "passwd", "tinybroker").Run() == nil {
		skip("a user tinybroker exists already: not touching it")
	}
	for _, p := range []string{"/usr/bin/tinybroker", "/etc/tinybroker", "/var/lib/tinybroker", "/var/cache/tinybroker"} {
		if _, err := os.Lstat(p); err == nil {
			skip(p + " exists already: not touching it")
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	purged := false
	t.Cleanup(func() {
		if !purged {
			out, err := exec.Command("dpkg", "--purge", "tinybroker").CombinedOutput()
			t.Logf("cleanup: dpkg --purge tinybroker: %v\n%s", err, out)
		}
	})
	run("dpkg", "-i", debPath)

	// The user: a system one, no login, no home.
	pw := strings.Split(strings.TrimSpace(run("getent", "passwd", "tinybroker")), ":")
	if len(pw) != 7 || pw[5] != "/nonexistent" || pw[6] != "/usr/sbin/nologin" {
		t.Errorf("passwd entry %q: want home /nonexistent, shell /usr/sbin/nologin", pw)
	}
	var uid, gid, sysMax int
	fmt.Sscan(pw[2], &uid)
	fmt.Sscan(pw[3], &gid)
	sysMax = 999 // Debian's SYS_UID_MAX
	if uid == 0 || uid > sysMax {
		t.Errorf("uid %d: not a system user's", uid)
	}
	if _, err := os.Stat("/nonexistent"); err == nil {
		t.Errorf("/nonexistent exists")
	}
	// The config: root:tinybroker, 0640; the state and cache directories: the user's.
	for p, want := range map[string]struct {
		mode     os.FileMode
		uid, gid int
	}{
		"/etc/tinybroker/tinybroker.hcl": {0o640, 0, gid},
		"/var/lib/tinybroker":            {os.ModeDir | 0o750, uid, gid},
		"/var/cache/tinybroker":          {os.ModeDir | 0o750, uid, gid},
		"/usr/bin/tinybroker":            {0o755, 0, 0},
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Error(err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != want.mode || int(st.Uid) != want.uid || int(st.Gid) != want.gid {
			t.Errorf("%s: mode %v, owner %d:%d; want %v, %d:%d", p, fi.Mode(), st.Uid, st.Gid, want.mode, want.uid, want.gid)
		}
	}
	if out := run("dpkg-query", "-W", "-f=${Conffiles}", "tinybroker"); !strings.Contains(out, "/etc/tinybroker/tinybroker.hcl ") {
		t.Errorf("dpkg does not list the config as a conffile: %q", out)
	}
	// Installed, not enabled (nor started: there is nothing to start it with but systemd).
	if _, err := os.Lstat("/etc/systemd/system/multi-user.target.wants/tinybroker.service"); err == nil {
		t.Errorf("the package enabled the service")
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		systemdVerify(t, "/lib/systemd/system/tinybroker.service")
	}

	// The installed broker, with the packaged config, as the user the unit names, where
	// the unit runs it; on a free port rather than 7878.
	addr := freeAddr(t)
	logs := &logWatch{changed: make(chan struct{}, 1)}
	cmd := exec.Command("setpriv", "--reuid", "tinybroker", "--regid", "tinybroker", "--clear-groups", "--",
		"/usr/bin/tinybroker", "serve", "--config", "/etc/tinybroker/tinybroker.hcl", "--listen", addr)
	cmd.Dir = "/var/lib/tinybroker"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	broker := &process{done: make(chan struct{})}
	go func() { broker.err = cmd.Wait(); close(broker.done) }()
	defer func() {
		select {
		case <-broker.done:
		default:
			_ = cmd.Process.Kill()
			<-broker.done
		}
	}()
	waitServing(t, addr, broker, logs)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(status, fmt.Appendf(nil, "\nUid:\t%d\t%d\t%d\t%d\n", uid, uid, uid, uid)) {
		t.Errorf("the broker does not run as uid %d:\n%s", uid, status)
	}
	// What systemctl reload does (ExecReload): the broker reloads and goes on serving.
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	logs.waitFor(t, "plugins reloaded", broker)
	waitServing(t, addr, broker, logs)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-broker.done:
		if broker.err != nil {
			t.Fatalf("the broker exited with %v on SIGTERM:\n%s", broker.err, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the broker did not stop within 30s of SIGTERM:\n%s", logs)
	}

	run("dpkg", "--purge", "tinybroker")
	purged = true
	if exec.Command("getent", "passwd", "tinybroker").Run() == nil || exec.Command("getent", "group", "tinybroker").Run() == nil {
		t.Errorf("the user or group tinybroker is left after dpkg --purge")
	}
	for _, p := range []string{"/usr/bin/tinybroker", "/etc/tinybroker", "/lib/systemd/system/tinybroker.service", "/var/lib/tinybroker", "/var/cache/tinybroker", "/usr/share/doc/tinybroker"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left after dpkg --purge (%v)", p, err)
		}
	}
	if out, err := exec.Command("dpkg-statoverride", "--list", "/etc/tinybroker/tinybroker.hcl").CombinedOutput(); err == nil {
		t.Errorf("the config's statoverride is left after dpkg --purge: %s", out)
	}
	if exec.Command("dpkg-query", "-W", "tinybroker").Run() == nil {
		t.Errorf("dpkg still knows the package after dpkg --purge")
	}
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// waitServing polls the broker's gRPC health service until it answers SERVING, for at most
// 30 seconds; a broker that exits first fails the test at once.
func waitServing(t *testing.T, addr string, broker *process, logs *logWatch) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker on %s is not SERVING after 30s (%v, %v):\n%s", addr, resp, err, logs)
		}
		select {
		case <-broker.done:
			t.Fatalf("the broker exited (%v):\n%s", broker.err, logs)
		case <-tick.C:
		}
	}
}

// process is a started command: done closes when it has exited, with err.
type process struct {
	done chan struct{}
	err  error
}

// logWatch collects a process's output and wakes whoever waits for a line.
type logWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (l *logWatch) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return l.buf.Write(p)
}

func (l *logWatch) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logWatch) waitFor(t *testing.T, what string, broker *process) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		sc := bufio.NewScanner(strings.NewReader(l.String()))
		for sc.Scan() {
			if strings.Contains(sc.Text(), what) {
				return
			}
		}
		select {
		case <-l.changed:
		case <-broker.done:
			t.Fatalf("the broker exited (%v) before logging %q:\n%s", broker.err, what, l)
		case <-timeout:
			t.Fatalf("no %q in the broker's log after 30s:\n%s", what, l)
		}
	}
}
