package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hami-go/hami-go/hack/images/imagebuild"
)

// Config is what mkimage builds from. Paths are host files; versions are image tags. The
// kube-scheduler image is hack/images' (--kube-scheduler-bin there).
type Config struct {
	Out         string
	WorkloadBin string
	BashBin     string
	BusyboxBin  string
	// GetenvBin is the static C program of hack/getenv (optional; /bin/getenv, case C37).
	GetenvBin string
	// CudaprobeBin is hack/simgpu's cudaprobe, a dynamically linked glibc program (optional;
	// /bin/cudaprobe). With it the image carries the loader and libc it was linked against,
	// GlibcFiles, so it runs and dlopens the libcuda.so.1 a CDI spec mounts.
	CudaprobeBin string
	// GlibcFiles are host files copied to the same path in the image with CudaprobeBin (the
	// loader and libc.so.6; DefaultGlibcFiles).
	GlibcFiles []string
	// HAMiCoreLib is a libvgpu.so built from HAMi-core's source against the simulated driver
	// (hack/simgpu/hamicore.sh; optional): written as HAMiCoreRepo:HAMiCoreTag with the file at
	// /k8s-vgpu/lib/nvidia/libvgpu.so.<HAMiCoreTag>, the layout of HAMi's hamicore image that
	// the chart installs from (hamiCore.libraryPath).
	HAMiCoreLib string
	HAMiCoreTag string
	Version     string
	RayVersion  string
}

// Image names the images get (docker.io/... is what containerd stores for rayproject/ray).
const (
	PauseRepo    = "registry.k8s.io/pause"
	WorkloadRepo = "docker.io/hami-go/workload"
	// ImageEnvRepo is the workload image with ImageEnv in its config (case C37: what a
	// container sees when its image sets a protected variable).
	ImageEnvRepo = "docker.io/hami-go/workload-imageenv"
	RayRepo      = "docker.io/rayproject/ray"
	// HAMiCoreRepo is the local cluster's HAMi-core image (never pushed: a test build).
	HAMiCoreRepo = "docker.io/hami-go/hamicore-sim"
)

// ImageEnv is the ENV of the ImageEnvRepo image: a widened HAMi-core memory limit.
const ImageEnv = "CUDA_DEVICE_MEMORY_LIMIT_0=81920m"

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
	for flagName, ref := range map[string]string{"--version": WorkloadRepo + ":" + cfg.Version, "--ray-version": RayRepo + ":" + cfg.RayVersion} {
		if _, err := name.NewTag(ref); err != nil {
			return nil, fmt.Errorf("%s: %q is not an image reference: %w", flagName, ref, err)
		}
	}
	if err := checkHAMiCore(cfg); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	var written []string

	pause, err := image([]imagebuild.File{{Path: "/pause", Mode: 0o755, Src: cfg.WorkloadBin}}, v1.Config{Entrypoint: []string{"/pause"}})
	if err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	refs := map[string]v1.Image{}
	for _, t := range PauseTags {
		refs[PauseRepo+":"+t] = pause
	}
	if err := imagebuild.Write(filepath.Join(cfg.Out, "pause.tar"), refs); err != nil {
		return nil, err
	}
	written = append(written, filepath.Join(cfg.Out, "pause.tar"))

	files := []imagebuild.File{
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
	if cfg.GetenvBin != "" {
		if _, err := os.Stat(cfg.GetenvBin); err != nil {
			return nil, fmt.Errorf("--getenv-bin %q: %w", cfg.GetenvBin, err)
		}
		files = append(files, imagebuild.File{Path: "/bin/getenv", Mode: 0o755, Src: cfg.GetenvBin})
	}
	if cfg.CudaprobeBin != "" {
		more, err := cudaprobeFiles(cfg)
		if err != nil {
			return nil, err
		}
		files = append(files, more...)
	}
	for _, p := range []string{"ray", "envdump", "sleep", "pause", "wget"} {
		files = append(files, imagebuild.File{Path: "/bin/" + p, Link: "workload"})
	}
	for _, a := range busyboxApplets {
		files = append(files, imagebuild.File{Path: "/bin/" + a, Link: "busybox"})
	}
	workload, err := image(files, v1.Config{Cmd: []string{"/bin/sleep", "infinity"}, WorkingDir: "/"})
	if err != nil {
		return nil, fmt.Errorf("workload image: %w", err)
	}
	if err := imagebuild.Write(filepath.Join(cfg.Out, "workload.tar"), map[string]v1.Image{
		WorkloadRepo + ":" + cfg.Version: workload,
		RayRepo + ":" + cfg.RayVersion:   workload,
	}); err != nil {
		return nil, err
	}
	written = append(written, filepath.Join(cfg.Out, "workload.tar"))
	imageEnv, err := image(files, v1.Config{Cmd: []string{"/bin/sleep", "infinity"}, WorkingDir: "/", Env: []string{ImageEnv}})
	if err != nil {
		return nil, fmt.Errorf("workload-imageenv image: %w", err)
	}
	if err := imagebuild.Write(filepath.Join(cfg.Out, "workload-imageenv.tar"), map[string]v1.Image{ImageEnvRepo + ":" + cfg.Version: imageEnv}); err != nil {
		return nil, err
	}
	written = append(written, filepath.Join(cfg.Out, "workload-imageenv.tar"))

	if cfg.HAMiCoreLib != "" {
		w, err := hamiCoreImage(cfg)
		if err != nil {
			return nil, err
		}
		written = append(written, w)
	}
	return written, nil
}

// DefaultGlibcFiles are Debian 12's (amd64) dynamic loader and C library: what a program linked
// by the host's gcc against glibc needs, and all it needs to dlopen a driver library (glibc 2.34
// and later keep libdl and libpthread in libc.so.6).
var DefaultGlibcFiles = []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"}

// cudaprobeFiles is /bin/cudaprobe with the glibc files it needs, each at its host path (symlinks
// followed), the directories the NVIDIA Container Toolkit mounts driver libraries into, and
// /etc/ld.so.conf, which the toolkit's update-ldcache hook extends and runs ldconfig over.
func cudaprobeFiles(cfg Config) ([]imagebuild.File, error) {
	if _, err := os.Stat(cfg.CudaprobeBin); err != nil {
		return nil, fmt.Errorf("--cudaprobe-bin %q: %w", cfg.CudaprobeBin, err)
	}
	glibc := cfg.GlibcFiles
	if glibc == nil {
		glibc = DefaultGlibcFiles
	}
	files := []imagebuild.File{
		{Path: "/bin/cudaprobe", Mode: 0o755, Src: cfg.CudaprobeBin},
		{Path: "/lib", Dir: true, Mode: 0o755}, {Path: "/lib64", Dir: true, Mode: 0o755},
		{Path: "/lib/x86_64-linux-gnu", Dir: true, Mode: 0o755},
		{Path: "/usr/lib", Dir: true, Mode: 0o755}, {Path: "/usr/lib/x86_64-linux-gnu", Dir: true, Mode: 0o755},
		{Path: "/etc/ld.so.conf.d", Dir: true, Mode: 0o755},
		{Path: "/etc/ld.so.conf", Mode: 0o644, Data: []byte("include /etc/ld.so.conf.d/*.conf\n")},
	}
	for _, g := range glibc {
		src, err := filepath.EvalSymlinks(g)
		if err != nil {
			return nil, fmt.Errorf("glibc file %q (for --cudaprobe-bin): %w", g, err)
		}
		files = append(files, imagebuild.File{Path: g, Mode: 0o755, Src: src})
	}
	return files, nil
}

// checkHAMiCore checks the HAMi-core inputs, if any, before anything is written.
func checkHAMiCore(cfg Config) error {
	if cfg.HAMiCoreLib == "" {
		return nil
	}
	if _, err := os.Stat(cfg.HAMiCoreLib); err != nil {
		return fmt.Errorf("--hamicore-lib %q: %w", cfg.HAMiCoreLib, err)
	}
	ref := HAMiCoreRepo + ":" + cfg.HAMiCoreTag
	if _, err := name.NewTag(ref); err != nil || cfg.HAMiCoreTag == "" {
		return fmt.Errorf("--hamicore-tag %q: %q is not an image reference", cfg.HAMiCoreTag, ref)
	}
	return nil
}

// hamiCoreImage writes hamicore.tar: HAMiCoreRepo:<tag> with the library where HAMi's image keeps it.
func hamiCoreImage(cfg Config) (string, error) {
	ref := HAMiCoreRepo + ":" + cfg.HAMiCoreTag
	img, err := image([]imagebuild.File{
		{Path: "/k8s-vgpu", Dir: true, Mode: 0o755}, {Path: "/k8s-vgpu/lib", Dir: true, Mode: 0o755},
		{Path: "/k8s-vgpu/lib/nvidia", Dir: true, Mode: 0o755},
		{Path: "/k8s-vgpu/lib/nvidia/libvgpu.so." + cfg.HAMiCoreTag, Mode: 0o755, Src: cfg.HAMiCoreLib},
	}, v1.Config{})
	if err != nil {
		return "", fmt.Errorf("hamicore image: %w", err)
	}
	out := filepath.Join(cfg.Out, "hamicore.tar")
	return out, imagebuild.Write(out, map[string]v1.Image{ref: img})
}

// image makes a one-layer linux image of files with config c (PATH set).
func image(files []imagebuild.File, c v1.Config) (v1.Image, error) {
	layer, err := imagebuild.Layer(files)
	if err != nil {
		return nil, err
	}
	return imagebuild.Image([]v1.Layer{layer}, c)
}
