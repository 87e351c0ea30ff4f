package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// make release's container image, built for this machine only: read back from the OCI
// layout in its tar with go-containerregistry, it is one image index naming one image for
// this platform, with the config, user, entrypoint, ports, labels and files it should have;
// its binary, unpacked, says its version and commit, and serves with its config until asked
// to stop; and a second build makes the same bytes.
func TestReleaseImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and the image, twice")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the image's binary runs on linux")
	}
	t.Chdir("../..") // the repository's root, as make release runs it
	const version, commit = "v9.8.7", "0123456789abcdef0123456789abcdef01234567"
	platform := "linux/" + runtime.GOARCH
	out := t.TempDir()
	if err := build(version, commit, out, []string{platform}); err != nil {
		t.Fatal(err)
	}
	const name = "tinybroker_9.8.7_oci.tar"
	oci := filepath.Join(out, name)
	sum, err := sha256File(oci)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if line := sum + "  " + name + "\n"; !strings.Contains(string(sums), line) {
		t.Fatalf("SHA256SUMS does not have %q:\n%s", line, sums)
	}

	// The OCI layout: index.json names one image index, by the name podman load gives it.
	dir := t.TempDir()
	untar(t, oci, dir)
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json lists %+v, want one OCI image index", tm.Manifests)
	}
	if got := tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != "tinybroker:9.8.7" {
		t.Errorf("index.json's ref.name = %q, want tinybroker:9.8.7", got)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	// Digests, sizes, diff IDs and media types agree, blob by blob.
	if err := validate.Index(idx); err != nil {
		t.Fatalf("the image index does not validate: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != 1 {
		t.Fatalf("the image index is %s with %d manifests, want an OCI index with one (this platform's)", im.MediaType, len(im.Manifests))
	}
	m := im.Manifests[0]
	if m.MediaType != types.OCIManifestSchema1 || m.Platform == nil || m.Platform.OS != "linux" || m.Platform.Architecture != runtime.GOARCH {
		t.Fatalf("the index lists %s for %+v, want an OCI manifest for %s", m.MediaType, m.Platform, platform)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":    "tinybroker",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": commit,
		"org.opencontainers.image.source":   "https://github.com/tinybroker/tinybroker",
	}
	for k, v := range labels {
		if im.Annotations[k] != v {
			t.Errorf("the index's annotation %s = %q, want %q", k, im.Annotations[k], v)
		}
	}
	img, err := idx.Image(m.Digest)
	if err != nil {
		t.Fatal(err)
	}

	// The image's config.
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if mf.Config.MediaType != types.OCIConfigJSON || len(mf.Layers) != 1 || mf.Layers[0].MediaType != types.OCILayer {
		t.Fatalf("the manifest has config %s and layers %+v, want an OCI config and one gzip OCI layer", mf.Config.MediaType, mf.Layers)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if uid, _, _ := strings.Cut(c.User, ":"); c.User != "65532:65532" || uid == "0" || uid == "root" || uid == "" {
		t.Errorf("User = %q, want 65532:65532 (not root)", c.User)
	}
	if want, wantCmd := []string{"/usr/bin/tinybroker"}, []string{"serve", "--config", "/etc/tinybroker/tinybroker.hcl"}; !slices.Equal(c.Entrypoint, want) || !slices.Equal(c.Cmd, wantCmd) {
		t.Errorf("Entrypoint = %q, Cmd = %q; want %q and %q", c.Entrypoint, c.Cmd, want, wantCmd)
	}
	if len(c.ExposedPorts) != 2 || c.ExposedPorts["7878/tcp"] != struct{}{} || c.ExposedPorts["7879/tcp"] != struct{}{} {
		t.Errorf("ExposedPorts = %v, want 7878/tcp and 7879/tcp", c.ExposedPorts)
	}
	for k, v := range labels {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("config says %s/%s created %v, want %s created at the epoch (reproducible)", cf.OS, cf.Architecture, cf.Created, platform)
	}

	// The layer: its files, modes and owners; the binary and the config, unpacked.
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	root := t.TempDir()
	var files []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fmt.Sprintf("%s %c %o %d:%d", h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid))
		if h.Typeflag == tar.TypeReg {
			dst := filepath.Join(root, filepath.FromSlash(h.Name))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, os.FileMode(h.Mode)); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []string{
		"etc/ 5 755 0:0",
		"etc/tinybroker/ 5 755 0:0",
		"etc/tinybroker/tinybroker.hcl 0 644 0:0",
		"etc/tinybroker/try.hcl 0 644 0:0",
		"usr/ 5 755 0:0",
		"usr/bin/ 5 755 0:0",
		"usr/bin/tinybroker 0 755 0:0",
		"var/ 5 755 0:0",
		"var/cache/ 5 755 0:0",
		"var/cache/tinybroker/ 5 755 65532:65532",
		"var/lib/ 5 755 0:0",
		"var/lib/tinybroker/ 5 755 65532:65532",
	}
	if !slices.Equal(files, want) {
		t.Fatalf("the layer holds\n%s\nwant\n%s", strings.Join(files, "\n"), strings.Join(want, "\n"))
	}
	bin := filepath.Join(root, "usr", "bin", "tinybroker")
	cfgPath := filepath.Join(root, "etc", "tinybroker", "tinybroker.hcl")
	checkStatic(t, bin)

	got, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("tinybroker version: %v\n%s", err, got)
	}
	if !strings.Contains(string(got), version) || !strings.Contains(string(got), commit[:12]) {
		t.Fatalf("tinybroker version says %q, want %s and %s", got, version, commit)
	}

	// The config listens on every interface, on the ports the image exposes, and keeps
	// compiled plugins in the folder the layer gives the image's user. Here its cache folder is
	// a temporary one, not this machine's /var/cache.
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`(?m)^listen\s*=\s*"0\.0\.0\.0:7878"`, `(?m)^\s+listen\s*=\s*"0\.0\.0\.0:7879"`, `(?m)^plugin_cache_dir\s*=\s*"/var/cache/tinybroker"`} {
		if !regexp.MustCompile(re).Match(cfg) {
			t.Errorf("the image's config does not match %s:\n%s", re, cfg)
		}
	}
	cache := t.TempDir()
	cfg = bytes.Replace(cfg, []byte(`"/var/cache/tinybroker"`), []byte(fmt.Sprintf("%q", cache)), 1)
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	// The default config is safe: without users it is refused, saying what to do; with the
	// users a mounted config adds, it serves.
	if got, err := exec.Command(bin, "serve", "--check", "--config", cfgPath).CombinedOutput(); err == nil || !strings.Contains(string(got), "declare users") {
		t.Fatalf("serve --check with the image's default config (no users): %v\n%s\nwant it refused, naming users", err, got)
	}
	withUsers := filepath.Join(filepath.Dir(cfgPath), "mounted.hcl")
	user := "\nuser \"alice\" {\n  token_hash = \"$2a$10$SHGSOn6NTNJLgKOrOfES.OQvtpo02tM53LwyFhN9UjDwluMgGzwre\"\n  admin = true\n}\n"
	if err := os.WriteFile(withUsers, append(bytes.Clone(cfg), user...), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := exec.Command(bin, "serve", "--check", "--config", withUsers).CombinedOutput(); err != nil || !strings.Contains(string(got), "listen 0.0.0.0:7878") {
		t.Fatalf("serve --check with the image's config and a user: %v\n%s", err, got)
	}
	// try.hcl serves without users, on every interface, and says it is insecure.
	tryPath := filepath.Join(filepath.Dir(cfgPath), "try.hcl")
	try, err := os.ReadFile(tryPath)
	if err != nil {
		t.Fatal(err)
	}
	try = bytes.Replace(try, []byte(`"/var/cache/tinybroker"`), []byte(fmt.Sprintf("%q", cache)), 1)
	if err := os.WriteFile(tryPath, try, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := exec.Command(bin, "serve", "--check", "--config", tryPath).CombinedOutput(); err != nil || !strings.Contains(string(got), "listen 0.0.0.0:7878") {
		t.Fatalf("serve --check with the image's try.hcl: %v\n%s", err, got)
	}
	serveImage(t, bin, tryPath)
	if ents, _ := os.ReadDir(cache); len(ents) == 0 {
		t.Errorf("serve made nothing in plugin_cache_dir %s: the image's cache folder is not the one the config uses", cache)
	}

	// Reproducible: the same inputs make the same image, byte for byte, here from another
	// process, as make release runs it (and not under the race detector, which makes the
	// in-process build above take most of this test's minute).
	out2 := t.TempDir()
	if got, err := exec.Command("go", "run", "./internal/release", "-version", version, "-commit", commit, "-out", out2, "-platforms", platform).CombinedOutput(); err != nil {
		t.Fatalf("go run ./internal/release: %v\n%s", err, got)
	}
	sum2, err := sha256File(filepath.Join(out2, name))
	if err != nil {
		t.Fatal(err)
	}
	if sum2 != sum {
		t.Fatalf("two builds made different images: sha256 %s, then %s", sum, sum2)
	}
}

// serveImage runs bin serve with the image's config (its listeners moved to free loopback
// ports), waits for /readyz and the gRPC health check to answer SERVING, then stops it with
// SIGTERM and checks it exits cleanly.
func serveImage(t *testing.T, bin, cfgPath string) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var logs bytes.Buffer // written by the scanner below until stderr closes
	scanned := make(chan struct{})
	grpcAddr, httpAddr := make(chan string, 1), make(chan string, 1)
	go func() {
		defer close(scanned)
		grpcRE, httpRE := regexp.MustCompile(`tinybroker: listening: addr=(\S+)`), regexp.MustCompile(`http listening: addr=(\S+)`)
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			logs.WriteString(s.Text() + "\n")
			if m := grpcRE.FindStringSubmatch(s.Text()); m != nil {
				grpcAddr <- m[1]
			}
			if m := httpRE.FindStringSubmatch(s.Text()); m != nil {
				httpAddr <- m[1]
			}
		}
	}()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-scanned
			<-exited
			t.Logf("serve's log:\n%s", logs.String())
		}
	}()
	go func() { <-scanned; exited <- cmd.Wait() }()

	deadline := time.After(60 * time.Second)
	var gaddr, haddr string
	for gaddr == "" || haddr == "" {
		select {
		case gaddr = <-grpcAddr:
		case haddr = <-httpAddr:
		case err := <-exited:
			exited <- err
			t.Fatalf("serve exited before listening: %v", err)
		case <-deadline:
			t.Fatal("serve did not say where it listens within 60s")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+haddr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("/readyz at %s did not answer 200 within 60s: %v", haddr, err)
		case <-tick.C:
		}
	}
	conn, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health check at %s: %v, %v; want SERVING", gaddr, hr.GetStatus(), err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM\n%s", err, logs.String())
		}
	case <-ctx.Done():
		t.Fatal("serve did not stop within 60s of SIGTERM")
	}
}

// checkStatic fails the test unless bin is an ELF executable for this machine that needs no
// dynamic loader or shared library, as a binary on scratch must.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s has an ELF interpreter: not static", bin)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Fatalf("%s needs shared libraries %v (%v): not static", bin, libs, err)
	}
}

// untar unpacks the tar at path into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(dst, filepath.Clean(dir)+string(filepath.Separator)) {
			t.Fatalf("%s: entry %q is outside the archive", path, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(dst, b, 0o644)
			}
		default:
			t.Fatalf("%s: entry %q is neither a file nor a folder", path, h.Name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
