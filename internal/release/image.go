package main

// The release's container image: an OCI image index for the linux binaries, written as an OCI
// image layout in a tar (dist/tinybroker_<version>_oci.tar, for podman load or skopeo copy
// oci-archive:), built from scratch with go-containerregistry, without a daemon or a base
// image. RATIONALE.md, "Why go-containerregistry for the image?", says why.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageConfig is the image's /etc/tinybroker/tinybroker.hcl: every interface, and users
// required (the broker refuses to start until a config with users is mounted over it).
//
//go:embed image.hcl
var imageConfig []byte

// imageTryConfig is the image's /etc/tinybroker/try.hcl, to try the broker out without
// users: insecure, said so at every start, and chosen only by naming it.
//
//go:embed image-try.hcl
var imageTryConfig []byte

const (
	imageUser       = "65532:65532" // distroless's "nonroot": no user of the host has it
	imageUID        = 65532
	imageBinary     = "/usr/bin/tinybroker"
	imageConfigPath = "/etc/tinybroker/tinybroker.hcl"
	imageTryPath    = "/etc/tinybroker/try.hcl"
	imageSource     = "https://github.com/tinybroker/tinybroker"
)

// imageEpoch is every time the image records (its created time, its files' times), so that
// the same binaries make the same image, digest for digest.
var imageEpoch = time.Unix(0, 0).UTC()

// imageEntrypoint and imageCmd are the image's: `docker run IMAGE` serves with the default
// config, `docker run IMAGE serve --config /etc/tinybroker/try.hcl` with the other, and
// `docker run IMAGE version` runs the command it names.
var (
	imageEntrypoint = []string{imageBinary}
	imageCmd        = []string{"serve", "--config", imageConfigPath}
)

// imagePorts are the ports the image's config listens on: gRPC and the ops HTTP listener.
var imagePorts = []string{"7878/tcp", "7879/tcp"}

// imageFile is one entry of the image's layer.
type imageFile struct {
	name string // without a leading slash; a directory ends with "/"
	mode int64
	uid  int
	data []byte
}

// imageLayer returns the layer's files for a binary: the binary, the config, and the
// folders the broker may write to, owned by the image's user.
func imageLayer(binary []byte) []imageFile {
	return []imageFile{
		{name: "etc/", mode: 0o755},
		{name: "etc/tinybroker/", mode: 0o755},
		{name: strings.TrimPrefix(imageConfigPath, "/"), mode: 0o644, data: imageConfig},
		{name: strings.TrimPrefix(imageTryPath, "/"), mode: 0o644, data: imageTryConfig},
		{name: "usr/", mode: 0o755},
		{name: "usr/bin/", mode: 0o755},
		{name: strings.TrimPrefix(imageBinary, "/"), mode: 0o755, data: binary},
		{name: "var/", mode: 0o755},
		{name: "var/cache/", mode: 0o755},
		{name: "var/cache/tinybroker/", mode: 0o755, uid: imageUID}, // plugin_cache_dir
		{name: "var/lib/", mode: 0o755},
		{name: "var/lib/tinybroker/", mode: 0o755, uid: imageUID}, // for a JetStream data_dir
	}
}

// layerTar is files as an uncompressed tar, every time imageEpoch.
func layerTar(files []imageFile) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: imageEpoch}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// platformImage is the image of one linux binary (platform "linux/arm64", say).
func platformImage(platform, binPath, version, commit string) (v1.Image, error) {
	goos, goarch, _ := strings.Cut(platform, "/")
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	tb, err := layerTar(imageLayer(bin))
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tb)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
		Created:   v1.Time{Time: imageEpoch},
		CreatedBy: "go run ./internal/release (make release)",
		Comment:   "tinybroker " + version + ", its config and data folders",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = goos, goarch
	cf.Created = v1.Time{Time: imageEpoch}
	cf.Config.User = imageUser
	cf.Config.Entrypoint = imageEntrypoint
	cf.Config.Cmd = imageCmd
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range imagePorts {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	cf.Config.Labels = imageLabels(version, commit)
	return mutate.ConfigFile(img, cf)
}

// imageLabels are the image's labels, which are also its index's annotations.
func imageLabels(version, commit string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "tinybroker",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": commit,
		"org.opencontainers.image.source":   imageSource,
	}
}

// imageTag is the tag the image is loaded under, the release's version without its "v"; a
// character a tag may not have ([A-Za-z0-9_.-], at most 128) becomes "-".
func imageTag(version string) string {
	t := []byte(strings.TrimPrefix(version, "v"))
	for i, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			t[i] = '-'
		}
	}
	if len(t) > 128 {
		t = t[:128]
	}
	if len(t) == 0 || t[0] == '.' || t[0] == '-' {
		t = append([]byte("v"), t...)
	}
	return string(t)
}

// releaseImage is build's image step: with the linux binaries of the release (bins, by
// platform), it writes the image and records its checksum in sums.
func releaseImage(out, version, commit string, bins map[string]string, sums map[string]string) error {
	if len(bins) == 0 {
		return nil
	}
	path, digest, err := writeImage(out, version, commit, bins)
	if err != nil {
		return err
	}
	sum, err := sha256File(path)
	if err != nil {
		return err
	}
	sums[filepath.Base(path)] = sum
	fmt.Printf("%s (image index %s)\n", path, digest)
	return nil
}

// writeImage writes the image index of bins (linux binaries by platform, "linux/amd64") to
// out as tinybroker_<version>_oci.tar and returns its path and the index's digest.
func writeImage(out, version, commit string, bins map[string]string) (string, v1.Hash, error) {
	platforms := make([]string, 0, len(bins))
	for p := range bins {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	adds := make([]mutate.IndexAddendum, 0, len(platforms))
	for _, p := range platforms {
		img, err := platformImage(p, bins[p], version, commit)
		if err != nil {
			return "", v1.Hash{}, fmt.Errorf("image for %s: %w", p, err)
		}
		goos, goarch, _ := strings.Cut(p, "/")
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: goarch}}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	idx = mutate.Annotations(idx, imageLabels(version, commit)).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return "", v1.Hash{}, err
	}

	dir, err := os.MkdirTemp("", "tinybroker-oci-")
	if err != nil {
		return "", v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", v1.Hash{}, err
	}
	// index.json names the image index as podman load (org.opencontainers.image.ref.name,
	// read as localhost/tinybroker:TAG) and docker load (io.containerd.image.name) expect.
	tag := imageTag(version)
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": "tinybroker:" + tag,
		"io.containerd.image.name":          "docker.io/library/tinybroker:" + tag,
	})); err != nil {
		return "", v1.Hash{}, err
	}
	path := filepath.Join(out, fmt.Sprintf("tinybroker_%s_oci.tar", strings.TrimPrefix(version, "v")))
	if err := tarDir(path, dir); err != nil {
		return "", v1.Hash{}, err
	}
	return path, digest, nil
}

// tarDir writes the files under dir to a tar at path, in order, every time imageEpoch.
func tarDir(path, dir string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error { // WalkDir goes in lexical order
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: imageEpoch})
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: imageEpoch}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
