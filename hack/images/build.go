package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hami-go/hami-go/hack/images/imagebuild"
)

// Components are the hami-go binaries that get an image, each built from ./cmd/<name>
// (kube-scheduler-hami-go from its own module there: pluginModule).
var Components = []string{"device-plugin", "scheduler-extender", "webhook", "dra-driver", pluginComponent}

// pluginComponent is kube-scheduler v1.37.2 built with hami-go's framework plugin HamiGo: the
// chart's scheduler.plugin.image (scheduler.placement=plugin), command kube-scheduler-hami-go.
const pluginComponent = "kube-scheduler-hami-go"

// pluginModule is pluginComponent's Go module, relative to the repository root: a module of its
// own, so that k8s.io/kubernetes stays out of the library's go.mod. Its first build compiles
// kube-scheduler (minutes); later ones reuse go's build cache.
const pluginModule = "cmd/kube-scheduler-hami-go"

// nvmlComponent reports whether component c links go-nvml (cgo): the device plugin and the DRA
// driver. Both follow Config.DevicePluginLink.
func nvmlComponent(c string) bool { return c == "device-plugin" || c == "dra-driver" }

// KubeSchedulerRepo is the repository of the kube-scheduler image built from --kube-scheduler-bin
// (the chart's scheduler.kubeScheduler.image default).
const KubeSchedulerRepo = "registry.k8s.io/kube-scheduler"

// Config says what to build. Paths are host paths; Version and KubeVersion are image tags.
type Config struct {
	// Version tags the images, e.g. "0.1.0".
	Version string
	// Out is the directory the .tar files are written to (created).
	Out string
	// Images is the subset of Components to build.
	Images []string
	// Repository prefixes the image names: <Repository>/<component>:<Version>.
	Repository string
	// RepoRoot is the module root that holds ./cmd/<component>.
	RepoRoot string
	// DevicePluginLink is "dynamic" (cgo against glibc plus a glibc layer: NVML works) or
	// "static" (cgo linked statically, no base layer: fake backend only).
	DevicePluginLink string
	// LibcDeb is Debian's libc6 package file; empty downloads it with apt-get download.
	LibcDeb string
	// Prebuilt maps component names to binaries already built; those are not built again.
	Prebuilt map[string]string
	// KubeSchedulerBin, when set, is packed as KubeSchedulerRepo:KubeVersion.
	KubeSchedulerBin string
	// KubeVersion is the kube-scheduler image tag, e.g. "v1.37.2".
	KubeVersion string
	// GoBin is the go command.
	GoBin string
}

// DefaultConfig is the configuration of `go run .` in hack/images (a module of its own) without
// flags: the repository root is two folders up, and the tars go to its _output/images.
func DefaultConfig() Config {
	return Config{
		Version:          "0.1.0",
		Out:              "../../_output/images",
		Images:           slices.Clone(Components),
		Repository:       "docker.io/hami-go",
		RepoRoot:         "../..",
		DevicePluginLink: "dynamic",
		KubeVersion:      "v1.37.2",
		GoBin:            "go",
	}
}

// Written is one tar Build wrote and the image reference it holds.
type Written struct {
	Path string
	Ref  string
}

// Runner runs an external command (go build, apt-get download, dpkg-deb) in dir with extra env.
type Runner interface {
	Run(dir string, env []string, name string, args ...string) error
}

type osRunner struct{}

func (osRunner) Run(dir string, env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// validate reports the first bad field of cfg, naming the flag and the value.
func (cfg Config) validate() error {
	if cfg.Out == "" {
		return errors.New("--out is empty")
	}
	if cfg.Version == "" {
		return errors.New("--version is empty")
	}
	for _, i := range cfg.Images {
		if !slices.Contains(Components, i) {
			return fmt.Errorf("--images: unknown image %q (known: %s)", i, strings.Join(Components, ","))
		}
	}
	for n, p := range cfg.Prebuilt {
		if !slices.Contains(Components, n) {
			return fmt.Errorf("--prebuilt: unknown image %q (known: %s)", n, strings.Join(Components, ","))
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("--prebuilt %s=%s: %w", n, p, err)
		}
	}
	if cfg.DevicePluginLink != "dynamic" && cfg.DevicePluginLink != "static" {
		return fmt.Errorf("--device-plugin-link must be \"dynamic\" or \"static\", got %q", cfg.DevicePluginLink)
	}
	if cfg.KubeSchedulerBin != "" {
		if _, err := os.Stat(cfg.KubeSchedulerBin); err != nil {
			return fmt.Errorf("--kube-scheduler-bin %q: %w", cfg.KubeSchedulerBin, err)
		}
		if cfg.KubeVersion == "" {
			return errors.New("--kube-version is empty")
		}
	}
	if _, err := name.NewTag(cfg.Repository + "/x:" + cfg.Version); err != nil {
		return fmt.Errorf("--repository %q / --version %q do not make an image reference: %w", cfg.Repository, cfg.Version, err)
	}
	return nil
}

// Build builds the binaries that are not prebuilt, packs each image, and writes one tar per image
// into cfg.Out. A tar appears under its final name only when complete.
func Build(cfg Config, run Runner) ([]Written, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "hami-go-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	var written []Written
	for _, c := range cfg.Images {
		bin := cfg.Prebuilt[c]
		if bin == "" {
			bin = filepath.Join(work, c)
			if err := buildBinary(cfg, run, c, bin); err != nil {
				return written, err
			}
		}
		var layers []v1.Layer
		if nvmlComponent(c) && cfg.DevicePluginLink == "dynamic" {
			glibc, err := glibcLayer(cfg, run, filepath.Join(work, "libc6"))
			if err != nil {
				return written, fmt.Errorf("%s glibc layer: %w (or use --device-plugin-link=static for the fake backend)", c, err)
			}
			layers = append(layers, glibc)
		}
		img, err := binaryImage(layers, c, bin)
		if err != nil {
			return written, fmt.Errorf("%s image: %w", c, err)
		}
		w, err := writeImage(filepath.Join(cfg.Out, c+".tar"), fmt.Sprintf("%s/%s:%s", cfg.Repository, c, cfg.Version), img)
		if err != nil {
			return written, err
		}
		written = append(written, w)
	}
	if cfg.KubeSchedulerBin != "" {
		img, err := binaryImage(nil, "kube-scheduler", cfg.KubeSchedulerBin)
		if err != nil {
			return written, fmt.Errorf("kube-scheduler image (--kube-scheduler-bin %q): %w", cfg.KubeSchedulerBin, err)
		}
		w, err := writeImage(filepath.Join(cfg.Out, "kube-scheduler.tar"), KubeSchedulerRepo+":"+cfg.KubeVersion, img)
		if err != nil {
			return written, err
		}
		written = append(written, w)
	}
	return written, nil
}

// buildBinary runs go build for ./cmd/<c>: static without cgo, except the device plugin and
// the DRA driver (cgo); kube-scheduler-hami-go is built in its own module (go build -C).
func buildBinary(cfg Config, run Runner, c, out string) error {
	env := []string{"CGO_ENABLED=0", "GOOS=linux"}
	ldflags := "-s -w"
	if nvmlComponent(c) {
		env = []string{"CGO_ENABLED=1", "GOOS=linux", "CGO_CFLAGS=-Wno-deprecated-declarations"}
		if cfg.DevicePluginLink == "static" {
			ldflags += " -linkmode external -extldflags -static"
		}
	}
	args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/" + c}
	if c == pluginComponent {
		// -C is relative to the command's directory, RepoRoot; -o must then be absolute.
		abs, err := filepath.Abs(out)
		if err != nil {
			return err
		}
		args = []string{"build", "-C", pluginModule, "-trimpath", "-ldflags", ldflags, "-o", abs, "."}
	}
	if err := run.Run(cfg.RepoRoot, env, cfg.GoBin, args...); err != nil {
		return fmt.Errorf("building %s: %w", c, err)
	}
	return nil
}

// writeImage writes img tagged ref as a docker-archive tar at path (through a temporary file).
func writeImage(path, ref string, img v1.Image) (Written, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return Written{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := imagebuild.Write(path, map[string]v1.Image{ref: img}); err != nil {
		return Written{}, err
	}
	return Written{Path: path, Ref: tag.String()}, nil
}
