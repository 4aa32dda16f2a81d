// Command image assembles leaseguard's container image from binaries built
// beforehand, with no Docker engine, no Dockerfile and no image pulled
// (make image, make image-tar): for each binary a FROM-scratch image of one
// layer, /leaseguard, run as 65532:65532 with `serve`, as Dockerfile.scratch
// builds it; and an OCI image index of them all.
//
// The result is a function of its inputs only: the binaries, the version,
// the revision, the source URL and one timestamp (SOURCE_DATE_EPOCH, the
// commit's time in make image), which stands for every time in the image
// (the file's mtime, the config's created, the history's). The same inputs
// give the same bytes, so the same digests (reproducible_test.go).
//
// Outputs, any of them:
//
//	-oci-layout DIR    an OCI image layout: index.json names the image index
//	-oci-archive FILE  the same layout as one tar file (oci-archive: of skopeo)
//	-docker-tar FILE   one platform's image (-platform, the host's by default)
//	                   as a `docker load` tarball, tagged -tag
//
// It prints the index's digest and each platform's manifest digest.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// binaryPath is where the binary lives in the image, and its entrypoint.
	binaryPath = "/leaseguard"
	// nonroot is the conventional "nonroot" uid/gid of minimal images, as
	// in Dockerfile.scratch.
	nonroot     = "65532:65532"
	title       = "leaseguard"
	description = "Kubernetes admission webhook that enforces lease identity on coordination.k8s.io Leases and Config Connector's MultiClusterLeases"
	license     = "Apache-2.0"
)

// inputs is everything an image is made of.
type inputs struct {
	// Binaries maps a platform ("linux/amd64") to the binary's path.
	Binaries map[string]string
	Version  string
	Revision string
	Source   string
	// Created is the one time written into the image.
	Created time.Time
}

// platformImage is one platform's image of the index.
type platformImage struct {
	Platform v1.Platform
	Image    v1.Image
}

// result is the assembled image: the index and its images, in the index's
// order (sorted by platform).
type result struct {
	Index  v1.ImageIndex
	Images []platformImage
}

func (in inputs) validate() error {
	var missing []string
	if len(in.Binaries) == 0 {
		missing = append(missing, "-binary")
	}
	if in.Version == "" {
		missing = append(missing, "-version")
	}
	if in.Revision == "" {
		missing = append(missing, "-revision")
	}
	if in.Source == "" {
		missing = append(missing, "-source")
	}
	if in.Created.IsZero() {
		missing = append(missing, "-source-date-epoch (or SOURCE_DATE_EPOCH)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// labels are the image's OCI annotations, as config labels and on the index.
func (in inputs) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":      in.Source,
		"org.opencontainers.image.revision":    in.Revision,
		"org.opencontainers.image.version":     in.Version,
		"org.opencontainers.image.licenses":    license,
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.created":     in.Created.UTC().Format(time.RFC3339),
	}
}

// parsePlatform reads "os/arch" (an arm variant as "os/arch/variant").
func parsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: want os/arch", s)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// build assembles every platform's image and the index of them.
func build(in inputs) (*result, error) {
	if err := in.validate(); err != nil {
		return nil, err
	}
	platforms := make([]string, 0, len(in.Binaries))
	for p := range in.Binaries {
		platforms = append(platforms, p)
	}
	slices.Sort(platforms)

	res := &result{}
	adds := make([]mutate.IndexAddendum, 0, len(platforms))
	for _, ps := range platforms {
		p, err := parsePlatform(ps)
		if err != nil {
			return nil, err
		}
		img, err := buildImage(in, p, in.Binaries[ps])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ps, err)
		}
		res.Images = append(res.Images, platformImage{Platform: p, Image: img})
		adds = append(adds, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx, adds...)
	idx, ok := mutate.Annotations(idx, in.labels()).(v1.ImageIndex)
	if !ok {
		return nil, errors.New("annotating the index did not give an index")
	}
	res.Index = idx
	return res, nil
}

// buildImage is Dockerfile.scratch's image for one platform.
func buildImage(in inputs, p v1.Platform, binary string) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layer, err := binaryLayer(data, in.Created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: in.Created.UTC()}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      created,
		Config: v1.Config{
			User:       nonroot,
			Entrypoint: []string{binaryPath},
			Cmd:        []string{"serve"},
			Labels:     in.labels(),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "COPY leaseguard " + binaryPath + " # hack/image",
		},
	})
}

// binaryLayer is a gzipped tar of one file, the binary at /leaseguard:
// mode 0555, owned by 0:0, its mtime the given time, no other metadata.
func binaryLayer(data []byte, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(binaryPath, "/"),
		Mode:     0o555,
		Size:     int64(len(data)),
		ModTime:  mtime.UTC().Truncate(time.Second),
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerTar := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// writeLayout writes an OCI image layout at dir (replacing it) whose
// index.json names the image index, as refName.
func writeLayout(dir string, res *result, refName string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(res.Index, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": refName,
	}))
}

// writeArchive writes the directory dir as a tar file: its entries sorted,
// each with mtime, owner 0:0 and mode 0644 (directories 0755).
func writeArchive(dir, file string, mtime time.Time) error {
	var paths []string
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(paths)
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, path := range paths {
		if err := addToArchive(tw, dir, path, mtime); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func addToArchive(tw *tar.Writer, dir, path string, mtime time.Time) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		return err
	}
	hdr := &tar.Header{
		Name:    filepath.ToSlash(rel),
		ModTime: mtime.UTC().Truncate(time.Second),
		Format:  tar.FormatPAX,
	}
	if info.IsDir() {
		hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
		return tw.WriteHeader(hdr)
	}
	hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, info.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	_, err = io.Copy(tw, src)
	return err
}

// writeDockerTar writes one platform's image as a `docker load` tarball.
func writeDockerTar(file, tag string, res *result, platform string) (platformImage, error) {
	want, err := parsePlatform(platform)
	if err != nil {
		return platformImage{}, err
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return platformImage{}, err
	}
	for _, pi := range res.Images {
		if pi.Platform.Equals(want) {
			return pi, tarball.WriteToFile(file, ref, pi.Image)
		}
	}
	return platformImage{}, fmt.Errorf("-docker-tar: no binary for %s (-binary %s=...)", platform, platform)
}

// platformFlag collects -binary os/arch=path.
type platformFlag map[string]string

func (f platformFlag) String() string { return fmt.Sprint(map[string]string(f)) }

func (f platformFlag) Set(s string) error {
	platform, path, ok := strings.Cut(s, "=")
	if !ok || path == "" {
		return fmt.Errorf("%q: want os/arch=path", s)
	}
	if _, err := parsePlatform(platform); err != nil {
		return err
	}
	if _, dup := f[platform]; dup {
		return fmt.Errorf("%s given twice", platform)
	}
	f[platform] = path
	return nil
}

func run(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("image", flag.ContinueOnError)
	binaries := platformFlag{}
	fl.Var(binaries, "binary", "os/arch=path: a platform's leaseguard binary (repeat per platform)")
	version := fl.String("version", "", "the version (org.opencontainers.image.version)")
	revision := fl.String("revision", "", "the commit (org.opencontainers.image.revision)")
	source := fl.String("source", "https://github.com/leaseguard/leaseguard", "the source repository (org.opencontainers.image.source)")
	epoch := fl.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "seconds since 1970: every time in the image (default $SOURCE_DATE_EPOCH)")
	ociLayout := fl.String("oci-layout", "", "write the image index as an OCI image layout in this directory (replaced)")
	ociArchive := fl.String("oci-archive", "", "write the OCI image layout as this tar file too")
	refName := fl.String("ref-name", "", "the layout's org.opencontainers.image.ref.name for the index (default -version)")
	dockerTar := fl.String("docker-tar", "", "write one platform's image as a `docker load` tarball to this file")
	tag := fl.String("tag", "leaseguard:e2e", "the -docker-tar image's tag")
	platform := fl.String("platform", "linux/"+runtime.GOARCH, "the -docker-tar image's platform")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if *ociLayout == "" && *ociArchive == "" && *dockerTar == "" {
		return errors.New("nothing to write: give -oci-layout, -oci-archive or -docker-tar")
	}
	in := inputs{Binaries: binaries, Version: *version, Revision: *revision, Source: *source}
	if *epoch != "" {
		secs, err := strconv.ParseInt(*epoch, 10, 64)
		if err != nil || secs <= 0 {
			return fmt.Errorf("-source-date-epoch %q: want a positive number of seconds", *epoch)
		}
		in.Created = time.Unix(secs, 0).UTC()
	}
	res, err := build(in)
	if err != nil {
		return err
	}
	if *refName == "" {
		*refName = in.Version
	}
	return write(res, in, outputs{
		layout: *ociLayout, archive: *ociArchive, refName: *refName,
		dockerTar: *dockerTar, tag: *tag, platform: *platform,
	}, stdout)
}

type outputs struct {
	layout, archive, refName string
	dockerTar, tag, platform string
}

// write writes the outputs asked for and prints the digests.
func write(res *result, in inputs, out outputs, stdout io.Writer) error {
	if out.layout != "" || out.archive != "" {
		dir := out.layout
		if dir == "" {
			tmp, err := os.MkdirTemp("", "leaseguard-oci-")
			if err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(tmp) }()
			dir = filepath.Join(tmp, "oci")
		}
		if err := writeLayout(dir, res, out.refName); err != nil {
			return err
		}
		if out.archive != "" {
			if err := writeArchive(dir, out.archive, in.Created); err != nil {
				return err
			}
		}
		d, err := res.Index.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "index        %s\n", d)
		for _, pi := range res.Images {
			d, err := pi.Image.Digest()
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%-12s %s\n", pi.Platform.String(), d)
		}
		for _, where := range []string{out.layout, out.archive} {
			if where != "" {
				fmt.Fprintf(stdout, "wrote %s\n", where)
			}
		}
	}
	if out.dockerTar != "" {
		pi, err := writeDockerTar(out.dockerTar, out.tag, res, out.platform)
		if err != nil {
			return err
		}
		d, err := pi.Image.Digest()
		if err != nil {
			return err
		}
		id, err := pi.Image.ConfigName()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-12s %s (image ID %s)\nwrote %s: %s (docker load -i %s)\n",
			pi.Platform.String(), d, id, out.dockerTar, out.tag, out.dockerTar)
	}
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}
