package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// make release's archive for this machine unpacks, its checksum is listed, and its binary
// says the version and commit it was built with.
func TestReleaseArchiveRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if runtime.GOOS == "windows" {
		t.Skip("the test reads a tar.gz")
	}
	out := t.TempDir()
	t.Chdir("../..") // the repository's root, as make release runs it
	const version, commit = "v9.8.7", "0123456789abcdef0123456789abcdef01234567"
	if err := build(version, commit, out, []string{runtime.GOOS + "/" + runtime.GOARCH}); err != nil {
		t.Fatal(err)
	}
	name := "tinybroker_9.8.7_" + runtime.GOOS + "_" + runtime.GOARCH
	archive := filepath.Join(out, name+".tar.gz")
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := sha256File(archive)
	if err != nil {
		t.Fatal(err)
	}
	// (On linux it lists the Debian package and the image too: TestDebPackage, TestReleaseImage.)
	if want := sum + "  " + filepath.Base(archive); !slices.Contains(strings.Split(string(sums), "\n"), want) {
		t.Fatalf("SHA256SUMS = %q, want a line %q", sums, want)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	dir := t.TempDir()
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	if got, want := strings.Join(names, " "), name+"/CHANGELOG.md "+name+"/README.md "+name+"/tinybroker "+name+"/tinybroker.hcl"; got != want {
		t.Fatalf("the archive holds %s, want %s", got, want)
	}
	got, err := exec.Command(filepath.Join(dir, name, "tinybroker"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("tinybroker version: %v\n%s", err, got)
	}
	if !strings.Contains(string(got), version) || !strings.Contains(string(got), commit[:12]) {
		t.Fatalf("tinybroker version says %q, want %s and %s", got, version, commit)
	}
}

// A release covers linux, macOS and Windows on amd64 and arm64.
func TestReleasePlatforms(t *testing.T) {
	want := "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"
	if got := strings.Join(Platforms, " "); got != want {
		t.Fatalf("Platforms = %s, want %s", got, want)
	}
}
