package main

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	testVersion  = "v9.9.9"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testEpoch    = "1700000000"
)

var testPlatforms = []string{"linux/amd64", "linux/arm64"}

// fakeBinaries writes a small stand-in binary per platform into dir and
// returns the -binary flags naming them.
func fakeBinaries(t *testing.T, dir, salt string) []string {
	t.Helper()
	var flags []string
	for _, p := range testPlatforms {
		path := filepath.Join(dir, strings.ReplaceAll(p, "/", "-"), "leaseguard")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("\x7fELF fake leaseguard for "+p+salt), 0o755); err != nil {
			t.Fatal(err)
		}
		flags = append(flags, "-binary", p+"="+path)
	}
	return flags
}

// buildInto runs the command with every output under out, the binaries and
// settings of args, and returns what it printed.
func buildInto(t *testing.T, out string, args ...string) string {
	t.Helper()
	all := append([]string{
		"-oci-layout", filepath.Join(out, "oci"),
		"-oci-archive", filepath.Join(out, "oci.tar"),
		"-docker-tar", filepath.Join(out, "docker.tar"), "-platform", "linux/amd64",
	}, args...)
	var stdout bytes.Buffer
	if err := run(all, &stdout); err != nil {
		t.Fatalf("image %s: %v", strings.Join(all, " "), err)
	}
	return stdout.String()
}

func settings(version, revision, epoch string) []string {
	return []string{"-version", version, "-revision", revision, "-source-date-epoch", epoch}
}

// indexDigest reads the image index's digest back from a layout.
func indexDigest(t *testing.T, dir string) v1.Hash {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want the image index alone", len(m.Manifests))
	}
	return m.Manifests[0].Digest
}

// sameFiles fails unless the two trees hold the same files with the same bytes.
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	files := func(root string) map[string][]byte {
		got := map[string][]byte{}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			rel, _ := filepath.Rel(root, path)
			got[rel] = data
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	fa, fb := files(a), files(b)
	if len(fa) != len(fb) {
		t.Errorf("%s has %d files, %s %d", a, len(fa), b, len(fb))
	}
	for name, data := range fa {
		if !bytes.Equal(data, fb[name]) {
			t.Errorf("%s differs between the two builds", name)
		}
	}
}

// TestReproducible: two builds from the same inputs write the same bytes
// (the layout, the OCI archive, the docker tarball), so the same digests.
func TestReproducible(t *testing.T) {
	bins := fakeBinaries(t, t.TempDir(), "")
	args := append(settings(testVersion, testRevision, testEpoch), bins...)
	a, b := t.TempDir(), t.TempDir()
	outA := buildInto(t, a, args...)
	outB := buildInto(t, b, args...)
	// The printed lines name the outputs' paths; the digests must match.
	digests := func(out string) string {
		var keep []string
		for line := range strings.Lines(out) {
			if !strings.HasPrefix(line, "wrote ") {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "")
	}
	if digests(outA) != digests(outB) {
		t.Errorf("two builds printed different digests:\n%s\n%s", outA, outB)
	}
	if da, db := indexDigest(t, filepath.Join(a, "oci")), indexDigest(t, filepath.Join(b, "oci")); da != db {
		t.Errorf("index digests differ: %s, %s", da, db)
	} else if !strings.Contains(outA, "index        "+da.String()) {
		t.Errorf("the output does not print the index digest %s:\n%s", da, outA)
	}
	sameFiles(t, filepath.Join(a, "oci"), filepath.Join(b, "oci"))
	for _, f := range []string{"oci.tar", "docker.tar"} {
		ba, err := os.ReadFile(filepath.Join(a, f))
		if err != nil {
			t.Fatal(err)
		}
		bb, err := os.ReadFile(filepath.Join(b, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ba, bb) {
			t.Errorf("%s differs between the two builds", f)
		}
	}
}

// digestOf builds into a new directory and returns the index's digest.
func digestOf(t *testing.T, args ...string) v1.Hash {
	t.Helper()
	out := t.TempDir()
	buildInto(t, out, args...)
	return indexDigest(t, filepath.Join(out, "oci"))
}

// TestChangedInputChangesDigest: every input is in the digest, so the
// reproducibility test above can fail.
func TestChangedInputChangesDigest(t *testing.T) {
	bins := fakeBinaries(t, t.TempDir(), "")
	base := digestOf(t, append(settings(testVersion, testRevision, testEpoch), bins...)...)
	changed := map[string][]string{
		"a binary":  append(settings(testVersion, testRevision, testEpoch), fakeBinaries(t, t.TempDir(), "!")...),
		"version":   append(settings("v9.9.10", testRevision, testEpoch), bins...),
		"revision":  append(settings(testVersion, strings.Repeat("f", 40), testEpoch), bins...),
		"the epoch": append(settings(testVersion, testRevision, "1700000001"), bins...),
		"the source": append(settings(testVersion, testRevision, testEpoch),
			append([]string{"-source", "https://example.com/fork"}, bins...)...),
		"a platform fewer": append(settings(testVersion, testRevision, testEpoch), bins[:2]...),
	}
	for what, args := range changed {
		if d := digestOf(t, args...); d == base {
			t.Errorf("changing %s left the index digest %s", what, d)
		}
	}
}

// TestImageContents: the index holds linux/amd64 and linux/arm64, each
// image FROM scratch with one layer holding /leaseguard (0555, 0:0, the
// epoch's mtime), run as 65532:65532 with `serve`, labelled, created at
// the epoch; OCI media types throughout.
func TestImageContents(t *testing.T) {
	bins := fakeBinaries(t, t.TempDir(), "")
	out := t.TempDir()
	buildInto(t, out, append(settings(testVersion, testRevision, testEpoch), bins...)...)
	epoch := time.Unix(1700000000, 0).UTC()

	p, err := layout.FromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := outer.ImageIndex(indexDigest(t, filepath.Join(out, "oci")))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	if got := im.Annotations["org.opencontainers.image.revision"]; got != testRevision {
		t.Errorf("index annotation revision %q, want %q", got, testRevision)
	}
	if len(im.Manifests) != len(testPlatforms) {
		t.Fatalf("index has %d manifests, want %d", len(im.Manifests), len(testPlatforms))
	}
	for i, want := range testPlatforms {
		desc := im.Manifests[i]
		if desc.Platform == nil || desc.Platform.String() != want {
			t.Errorf("manifest %d: platform %v, want %s", i, desc.Platform, want)
			continue
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkOCIMediaTypes(t, want, img)
		checkImage(t, want, img, epoch, binaryOf(t, bins, want))
	}
}

// checkOCIMediaTypes: the layout's images are OCI throughout (a docker
// tarball read back reports Docker's media types: it records none).
func checkOCIMediaTypes(t *testing.T, platform string, img v1.Image) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("%s: media types %s, config %s; want OCI", platform, m.MediaType, m.Config.MediaType)
	}
	for _, l := range m.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("%s: layer media type %s, want %s", platform, l.MediaType, types.OCILayer)
		}
	}
}

// binaryOf returns the bytes of the binary the -binary flags give for platform.
func binaryOf(t *testing.T, flags []string, platform string) []byte {
	t.Helper()
	for _, f := range flags {
		if path, ok := strings.CutPrefix(f, platform+"="); ok {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
	t.Fatalf("no binary for %s in %q", platform, flags)
	return nil
}

func checkImage(t *testing.T, platform string, img v1.Image, epoch time.Time, binary []byte) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.OS + "/" + cf.Architecture; got != platform {
		t.Errorf("%s: config says %s", platform, got)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532", platform, cf.Config.User)
	}
	if strings.Join(cf.Config.Entrypoint, " ") != "/leaseguard" || strings.Join(cf.Config.Cmd, " ") != "serve" {
		t.Errorf("%s: entrypoint %q cmd %q, want [/leaseguard] [serve]", platform, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if !cf.Created.Equal(epoch) {
		t.Errorf("%s: created %s, want %s", platform, cf.Created.Time, epoch)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/leaseguard/leaseguard",
		"org.opencontainers.image.revision": testRevision,
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.title":    "leaseguard",
		"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
	} {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("%s: label %s = %q, want %q", platform, k, got, want)
		}
	}
	if cf.Config.Labels["org.opencontainers.image.description"] == "" {
		t.Errorf("%s: no description label", platform)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%s: %d layers, want 1", platform, len(layers))
	}
	checkLayer(t, platform, layers[0], epoch, binary)
}

func checkLayer(t *testing.T, platform string, l v1.Layer, epoch time.Time, binary []byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Name != "leaseguard" || hdr.Typeflag != tar.TypeReg || hdr.Mode != 0o555 ||
		hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(epoch) {
		t.Errorf("%s: layer entry %q type %c mode %o owner %d:%d mtime %s; want leaseguard, a file, 0555, 0:0, %s",
			platform, hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime, epoch)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, binary) {
		t.Errorf("%s: /leaseguard is not the binary given", platform)
	}
	if next, err := tr.Next(); err != io.EOF {
		t.Errorf("%s: the layer holds more than /leaseguard: %v, %v", platform, next, err)
	}
}

// TestDockerTarball: -docker-tar writes the platform's image, the same as
// the index's, tagged, loadable as a docker tarball.
func TestDockerTarball(t *testing.T) {
	bins := fakeBinaries(t, t.TempDir(), "")
	out := t.TempDir()
	host := "linux/" + runtime.GOARCH
	if host != "linux/amd64" && host != "linux/arm64" {
		host = "linux/amd64"
	}
	var stdout bytes.Buffer
	args := append(settings(testVersion, testRevision, testEpoch), bins...)
	args = append(args, "-docker-tar", filepath.Join(out, "docker.tar"), "-tag", "leaseguard:e2e", "-platform", host)
	if err := run(args, &stdout); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(filepath.Join(out, "docker.tar"), mustTag(t, "leaseguard:e2e"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "image ID "+id.String()) {
		t.Errorf("the output does not name the image ID %s:\n%s", id, stdout.String())
	}
	checkImage(t, host, img, time.Unix(1700000000, 0).UTC(), binaryOf(t, bins, host))
}

// TestRealBinaries builds ./cmd/leaseguard twice, as make image does, into
// two directories, and the image from each: the binaries and the index
// digests must match. For the host's platform only (make compile has its
// packages in the build cache, so each build is a link), unless
// IMAGE_TEST_CROSS=1: then for linux/amd64 and linux/arm64, which on a
// cold cache compiles every package for the other architecture (over ten
// minutes on two busy cores). The builds share the build cache: the flags
// (-trimpath, -buildvcs=false, -buildid=) keep paths, VCS stamps and
// build IDs out of the binary, but a cold-cache rebuild is not tested here.
func TestRealBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/leaseguard")
	}
	platforms := []string{"linux/" + runtime.GOARCH}
	if os.Getenv("IMAGE_TEST_CROSS") == "1" {
		platforms = testPlatforms
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var digests []v1.Hash
	var first map[string][]byte
	for range 2 {
		dir := t.TempDir()
		var flags []string
		got := map[string][]byte{}
		for _, p := range platforms {
			goos, goarch, _ := strings.Cut(p, "/")
			out := filepath.Join(dir, goarch, "leaseguard")
			cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
				"-ldflags", "-s -w -buildid= -X main.version="+testVersion, "-o", out, "./cmd/leaseguard")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
			start := time.Now()
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build %s: %v\n%s", p, err, b)
			}
			t.Logf("go build %s: %s", p, time.Since(start).Round(time.Millisecond))
			flags = append(flags, "-binary", p+"="+out)
			got[p] = binaryOf(t, flags, p)
		}
		if first == nil {
			first = got
		} else {
			for p, b := range got {
				if !bytes.Equal(b, first[p]) {
					t.Errorf("%s: the two builds of cmd/leaseguard differ (did a source file change between them?)", p)
				}
			}
		}
		digests = append(digests, digestOf(t, append(settings(testVersion, testRevision, testEpoch), flags...)...))
	}
	if digests[0] != digests[1] {
		t.Errorf("index digests of two builds differ: %s, %s", digests[0], digests[1])
	}
	t.Logf("index %s, twice", digests[0])
}

func mustTag(t *testing.T, s string) *name.Tag {
	t.Helper()
	tag, err := name.NewTag(s)
	if err != nil {
		t.Fatal(err)
	}
	return &tag
}
