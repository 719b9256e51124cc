package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Config is what mkimage builds from. Paths are host files; versions are image tags.
type Config struct {
	Out              string
	WorkloadBin      string
	BashBin          string
	BusyboxBin       string
	KubeSchedulerBin string // empty: no kube-scheduler image
	Version          string
	RayVersion       string
	KubeVersion      string
}

// Image names the images get (docker.io/... is what containerd stores for rayproject/ray).
const (
	PauseRepo         = "registry.k8s.io/pause"
	WorkloadRepo      = "docker.io/hami-go/workload"
	RayRepo           = "docker.io/rayproject/ray"
	KubeSchedulerRepo = "registry.k8s.io/kube-scheduler"
)

// PauseTags are the sandbox image tags: our containerd config names 3.10; containerd 1.6's
// built-in default is 3.6.
var PauseTags = []string{"3.10", "3.6"}

// busyboxApplets are linked to /bin/busybox in the workload image. wget is the workload
// program's: the static busybox crashes resolving "localhost" (glibc NSS cannot load).
var busyboxApplets = []string{
	"sh", "grep", "cat", "ls", "echo", "env", "ps", "head", "tail", "mkdir", "rm", "cp",
	"mv", "true", "false", "hostname", "id", "uname", "tr", "sed", "awk", "cut", "wc", "date",
	"printf", "test", "[", "expr", "nc", "find", "xargs", "sort", "uniq", "tee", "touch", "ln",
	"chmod", "stat", "df", "du", "free", "top", "kill", "pidof", "basename", "dirname", "which",
}

// entry is one file of a layer: a copy of host file Src, a symlink to Link, or a directory.
type entry struct {
	Path string // absolute path in the image
	Mode int64
	Src  string
	Link string
	Dir  bool
	Data []byte
}

const imagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Build writes the tars into cfg.Out and returns their paths. Missing inputs are errors
// naming the flag and the path; nothing is written under a final name until complete.
func Build(cfg Config) ([]string, error) {
	if cfg.Out == "" {
		return nil, errors.New("--out is required")
	}
	for flagName, p := range map[string]string{"--workload-bin": cfg.WorkloadBin, "--bash": cfg.BashBin, "--busybox": cfg.BusyboxBin} {
		if p == "" {
			return nil, fmt.Errorf("%s is required", flagName)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s %q: %w", flagName, p, err)
		}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	var written []string

	pause, err := image([]entry{{Path: "/pause", Mode: 0o755, Src: cfg.WorkloadBin}}, v1.Config{Entrypoint: []string{"/pause"}})
	if err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	refs := map[name.Reference]v1.Image{}
	for _, t := range PauseTags {
		refs[mustTag(PauseRepo+":"+t)] = pause
	}
	if err := write(filepath.Join(cfg.Out, "pause.tar"), refs); err != nil {
		return nil, err
	}
	written = append(written, filepath.Join(cfg.Out, "pause.tar"))

	files := []entry{
		{Path: "/bin", Dir: true, Mode: 0o755}, {Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/etc", Dir: true, Mode: 0o755}, {Path: "/usr/bin", Dir: true, Mode: 0o755},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/bash\nray:x:1000:100:ray:/home/ray:/bin/bash\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nusers:x:100:\n")},
		{Path: "/root", Dir: true, Mode: 0o700}, {Path: "/home/ray", Dir: true, Mode: 0o755},
		{Path: "/bin/workload", Mode: 0o755, Src: cfg.WorkloadBin},
		{Path: "/bin/bash", Mode: 0o755, Src: cfg.BashBin},
		{Path: "/bin/busybox", Mode: 0o755, Src: cfg.BusyboxBin},
		{Path: "/usr/bin/env", Link: "/bin/busybox"},
	}
	for _, p := range []string{"ray", "envdump", "sleep", "pause", "wget"} {
		files = append(files, entry{Path: "/bin/" + p, Link: "workload"})
	}
	for _, a := range busyboxApplets {
		files = append(files, entry{Path: "/bin/" + a, Link: "busybox"})
	}
	workload, err := image(files, v1.Config{Cmd: []string{"/bin/sleep", "infinity"}, WorkingDir: "/"})
	if err != nil {
		return nil, fmt.Errorf("workload image: %w", err)
	}
	if err := write(filepath.Join(cfg.Out, "workload.tar"), map[name.Reference]v1.Image{
		mustTag(WorkloadRepo + ":" + cfg.Version): workload,
		mustTag(RayRepo + ":" + cfg.RayVersion):   workload,
	}); err != nil {
		return nil, err
	}
	written = append(written, filepath.Join(cfg.Out, "workload.tar"))

	if cfg.KubeSchedulerBin != "" {
		ks, err := image([]entry{{Path: "/usr/local/bin/kube-scheduler", Mode: 0o755, Src: cfg.KubeSchedulerBin}, {Path: "/tmp", Dir: true, Mode: 0o1777}},
			v1.Config{Entrypoint: []string{"/usr/local/bin/kube-scheduler"}})
		if err != nil {
			return nil, fmt.Errorf("kube-scheduler image (--kube-scheduler-bin %q): %w", cfg.KubeSchedulerBin, err)
		}
		p := filepath.Join(cfg.Out, "kube-scheduler.tar")
		if err := write(p, map[name.Reference]v1.Image{mustTag(KubeSchedulerRepo + ":" + cfg.KubeVersion): ks}); err != nil {
			return nil, err
		}
		written = append(written, p)
	}
	return written, nil
}

func mustTag(s string) name.Tag {
	t, err := name.NewTag(s)
	if err != nil {
		panic(fmt.Sprintf("image name %q: %v", s, err)) // constant names: a programming error
	}
	return t
}

// image makes a one-layer linux image of files with config c (PATH set).
func image(files []entry, c v1.Config) (v1.Image, error) {
	layerTar, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	c.Env = append([]string{"PATH=" + imagePath}, c.Env...)
	cf.Config = c
	return mutate.ConfigFile(img, cf)
}

// tarOf writes files as an uncompressed tar, root-owned, with a fixed mtime (reproducible).
func tarOf(files []entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	for _, f := range files {
		name := f.Path[1:]
		h := &tar.Header{Name: name, Mode: f.Mode, ModTime: mtime, Format: tar.FormatPAX}
		var body []byte
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		case f.Data != nil:
			h.Typeflag, body = tar.TypeReg, f.Data
		default:
			b, err := os.ReadFile(f.Src)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Path, err)
			}
			h.Typeflag, body = tar.TypeReg, b
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// write writes refs as one docker-archive tar at path (through a temporary file).
func write(path string, refs map[name.Reference]v1.Image) error {
	tmp := path + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
