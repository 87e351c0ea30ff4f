// Command release is `make release`: it builds tinybroker for every platform of a release,
// stamped with its version and commit, and writes one archive per platform and their
// SHA256SUMS to a folder (dist/ by default), and for linux a Debian package (deb.go). Pure Go
// (archive/tar, archive/zip, nfpm), so that it runs wherever Go does.
//
//	go run ./internal/release -version v0.3.0 -commit $(git rev-parse HEAD) [-out dist] [-platforms linux/amd64]
package main

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Platforms are what a release is built for.
var Platforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64"}

func main() {
	version := flag.String("version", "", "the release's version (required), e.g. v0.3.0")
	commit := flag.String("commit", "", "the commit it is built from (required)")
	out := flag.String("out", "dist", "where the archives and SHA256SUMS go")
	only := flag.String("platforms", strings.Join(Platforms, ","), "comma-separated GOOS/GOARCH pairs")
	flag.Parse()
	if *version == "" || *commit == "" {
		fmt.Fprintln(os.Stderr, "release: -version and -commit are required (make release sets them from git)")
		os.Exit(2)
	}
	if err := build(*version, *commit, *out, strings.Split(*only, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// docs are the files every archive carries beside the binary.
var docs = []string{"README.md", "CHANGELOG.md", "examples/config/tinybroker.hcl"}

func build(version, commit, out string, platforms []string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "tinybroker-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sums := map[string]string{}
	linux := map[string]string{} // the linux binaries, by platform, for the image
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok {
			return fmt.Errorf("platform %q: want GOOS/GOARCH", p)
		}
		exe := "tinybroker"
		if goos == "windows" {
			exe += ".exe"
		}
		bin := filepath.Join(tmp, goos+"-"+goarch, exe)
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
			"-ldflags", "-s -w -X main.version="+version+" -X main.commit="+commit, "-o", bin, "./cmd/tinybroker")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s/%s: %w", goos, goarch, err)
		}
		if goos == "linux" {
			linux[goos+"/"+goarch] = bin
		}
		name := fmt.Sprintf("tinybroker_%s_%s_%s", strings.TrimPrefix(version, "v"), goos, goarch)
		files := map[string]string{exe: bin}
		for _, d := range docs {
			if _, err := os.Stat(d); err == nil {
				files[filepath.Base(d)] = d
			}
		}
		archive := filepath.Join(out, name+".tar.gz")
		write := writeTarGz
		if goos == "windows" {
			archive, write = filepath.Join(out, name+".zip"), writeZip
		}
		if err := write(archive, name, files); err != nil {
			return err
		}
		sum, err := sha256File(archive)
		if err != nil {
			return err
		}
		sums[filepath.Base(archive)] = sum
		fmt.Println(archive)
		if goos == "linux" { // and a Debian package (deb.go)
			if err := addDeb(out, version, goarch, bin, sums); err != nil {
				return err
			}
		}
	}
	if err := releaseImage(out, version, commit, linux, sums); err != nil {
		return err
	}
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", sums[n], n)
	}
	return os.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(b.String()), 0o644)
}

// sorted returns files' names in order, so that an archive's listing is stable.
func sorted(files map[string]string) []string {
	n := make([]string, 0, len(files))
	for k := range files {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func writeTarGz(path, dir string, files map[string]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, name := range sorted(files) {
		b, err := os.ReadFile(files[name])
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if strings.HasPrefix(name, "tinybroker") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/" + name, Mode: mode, Size: int64(len(b)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return f.Close()
}

func writeZip(path, dir string, files map[string]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	for _, name := range sorted(files) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: dir + "/" + name, Method: zip.Deflate, Modified: time.Unix(0, 0).UTC()})
		if err != nil {
			return err
		}
		src, err := os.Open(files[name])
		if err != nil {
			return err
		}
		_, err = io.Copy(w, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
