package localcluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// cniPlugins are the CNI plugins the cluster uses, built from
// github.com/containernetworking/plugins at the version in this module's
// go.mod (tools.go keeps them there).
var cniPlugins = map[string]string{
	"bridge":     "github.com/containernetworking/plugins/plugins/main/bridge",
	"loopback":   "github.com/containernetworking/plugins/plugins/main/loopback",
	"host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local",
	"portmap":    "github.com/containernetworking/plugins/plugins/meta/portmap",
}

// buildCNIPlugins builds the plugins into dir, each only when missing.
func buildCNIPlugins(moduleDir, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for bin, pkg := range cniPlugins {
		if _, err := os.Stat(filepath.Join(dir, bin)); err == nil {
			continue
		}
		if err := goBuild(moduleDir, filepath.Join(dir, bin), nil, "-trimpath", pkg); err != nil {
			return err
		}
	}
	return nil
}

func goBuild(dir, out string, env []string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", out + ".tmp"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux"), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, msg)
	}
	return os.Rename(out+".tmp", out)
}

// dockerfileImage is what leaseguard's Dockerfile makes of its build: the
// go build flags of its RUN line and the final stage's user, entrypoint and
// command.
type dockerfileImage struct {
	BuildArgs  []string
	User       string
	Entrypoint []string
	Cmd        []string
}

// readDockerfile reads the Dockerfile so the image here is built as it is
// there. It refuses a Dockerfile this harness no longer matches (another
// base, another build command) rather than building something else.
func readDockerfile(path string) (dockerfileImage, error) {
	var img dockerfileImage
	data, err := os.ReadFile(path)
	if err != nil {
		return img, err
	}
	// Join continuation lines.
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	sc := bufio.NewScanner(strings.NewReader(text))
	var scratch bool
	for sc.Scan() {
		line := strings.Join(strings.Fields(sc.Text()), " ")
		switch {
		case line == "FROM scratch":
			scratch = true
		case strings.HasPrefix(line, "RUN CGO_ENABLED=0 GOOS=linux go build "):
			const want = `RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags "-s -w -buildid= -X main.version=${VERSION}" -o /out/leaseguard ./cmd/leaseguard`
			if line != want {
				return img, fmt.Errorf("%s: the build line changed; keep test/cluster/localcluster/images.go in step with it.\n got: %s\nwant: %s", path, line, want)
			}
			img.BuildArgs = []string{"-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid= -X main.version=e2e", "./cmd/leaseguard"}
		case scratch && strings.HasPrefix(line, "USER "):
			img.User = strings.TrimPrefix(line, "USER ")
		case scratch && strings.HasPrefix(line, "ENTRYPOINT "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "ENTRYPOINT ")), &img.Entrypoint); err != nil {
				return img, fmt.Errorf("%s: ENTRYPOINT: %w", path, err)
			}
		case scratch && strings.HasPrefix(line, "CMD "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "CMD ")), &img.Cmd); err != nil {
				return img, fmt.Errorf("%s: CMD: %w", path, err)
			}
		}
	}
	switch {
	case !scratch:
		return img, fmt.Errorf("%s: the final stage is no longer FROM scratch", path)
	case img.BuildArgs == nil:
		return img, fmt.Errorf("%s: no `RUN CGO_ENABLED=0 GOOS=linux go build` line", path)
	case img.User == "" || len(img.Entrypoint) != 1 || img.Entrypoint[0] != "/leaseguard":
		return img, fmt.Errorf("%s: want USER and ENTRYPOINT [\"/leaseguard\"] in the final stage", path)
	}
	return img, nil
}

// singleFileImage is an image of one layer holding one executable at
// /<file>, on an empty base, as a Dockerfile FROM scratch would make it.
func singleFileImage(binary, file, user string, entrypoint, cmd []string) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: file, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.User, cfg.Config.Entrypoint, cfg.Config.Cmd = user, entrypoint, cmd
	return mutate.ConfigFile(img, cfg)
}

// buildImages builds leaseguard's binary exactly as the Dockerfile does and
// our pause program, and writes both images as tarballs into dir.
func buildImages(repoRoot, moduleDir, dir string) (tarballs []string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	df, err := readDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	if err := goBuild(repoRoot, filepath.Join(dir, "leaseguard"), nil, df.BuildArgs...); err != nil {
		return nil, err
	}
	if err := goBuild(moduleDir, filepath.Join(dir, "pause"), nil, "-trimpath", "-ldflags", "-s -w", "./pause"); err != nil {
		return nil, err
	}
	images := []struct {
		ref, binary, file, user string
		entrypoint, cmd         []string
	}{
		{LeaseguardImage, filepath.Join(dir, "leaseguard"), "leaseguard", df.User, df.Entrypoint, df.Cmd},
		{PauseImage, filepath.Join(dir, "pause"), "pause", "65535:65535", []string{"/pause"}, nil},
	}
	for _, i := range images {
		img, err := singleFileImage(i.binary, i.file, i.user, i.entrypoint, i.cmd)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", i.ref, err)
		}
		tag, err := name.NewTag(i.ref)
		if err != nil {
			return nil, err
		}
		out := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(i.ref)+".tar")
		if err := tarball.WriteToFile(out, tag, img); err != nil {
			return nil, fmt.Errorf("writing %s: %w", out, err)
		}
		tarballs = append(tarballs, out)
	}
	return tarballs, nil
}

// importImages loads the tarballs into containerd's k8s.io namespace, where
// the CRI (and so the kubelet) finds them.
func (s State) importImages(tarballs []string) error {
	for _, t := range tarballs {
		out, err := exec.Command("ctr", "--address", s.ContainerdSocket(), "-n", "k8s.io", "images", "import", t).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s: %v\n%s", t, err, out)
		}
	}
	out, err := exec.Command("ctr", "--address", s.ContainerdSocket(), "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images ls: %v\n%s", err, out)
	}
	for _, want := range []string{"/leaseguard:e2e", PauseImage} {
		if !strings.Contains(string(out), want) {
			return fmt.Errorf("image %s missing from containerd after import; it has:\n%s", want, out)
		}
	}
	return nil
}
