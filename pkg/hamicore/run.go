package hamicore

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Default source of the library: HAMi's images (projecthami/hamicore, projecthami/hami) ship it
// as /k8s-vgpu/lib/nvidia/libvgpu.so.<VERSION>.
const (
	// DefaultSourceDir is where the node agents' pods mount the HAMi-core image (the chart:
	// an image volume from Kubernetes 1.35 on, before that an emptyDir an init container fills
	// with the image's library at the same relative path).
	DefaultSourceDir = "/hami-core-image"
	// DefaultSourceGlob matches the library in the image, relative to the image's root.
	DefaultSourceGlob = "k8s-vgpu/lib/nvidia/libvgpu.so*"
	// DefaultHostDir is the host directory the library is installed in.
	DefaultHostDir = "/usr/local/vgpu"
)

// Config says where a node agent installs the library from and to.
type Config struct {
	// SourceDir is the absolute path of the image's root in the agent's container (the image
	// volume's mount path), e.g. DefaultSourceDir.
	SourceDir string
	// SourceGlob is a path.Match pattern, relative to SourceDir and slash-separated, that must
	// match exactly one regular file (symbolic links are skipped), e.g. DefaultSourceGlob.
	SourceGlob string
	// HostDir is the absolute path of the install directory, a host directory mounted
	// read-write at the same path in the agent's container, e.g. DefaultHostDir.
	HostDir string
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	if !filepath.IsAbs(c.SourceDir) {
		return fmt.Errorf("hamicore: SourceDir %q: not an absolute path", c.SourceDir)
	}
	if c.SourceGlob == "" || strings.HasPrefix(c.SourceGlob, "/") {
		return fmt.Errorf("hamicore: SourceGlob %q: want a non-empty pattern relative to SourceDir", c.SourceGlob)
	}
	if _, err := filepath.Match(c.SourceGlob, ""); err != nil {
		return fmt.Errorf("hamicore: SourceGlob %q: %w", c.SourceGlob, err)
	}
	if !filepath.IsAbs(c.HostDir) {
		return fmt.Errorf("hamicore: HostDir %q: not an absolute path", c.HostDir)
	}
	return nil
}

// Run installs the one library cfg.SourceGlob matches in cfg.SourceDir into cfg.HostDir
// (Install) and returns it: the node agents call it at start, before they answer any container,
// and mount Installed.Path (gpuenv.Config.HAMiCoreLibrary). It fails when the pattern matches
// no regular file or more than one (the error lists them), and when ctx ends while another
// installer holds the install directory's lock.
func Run(ctx context.Context, cfg Config) (Installed, error) {
	if err := cfg.Validate(); err != nil {
		return Installed{}, err
	}
	src := os.DirFS(cfg.SourceDir)
	name, err := findSource(src, cfg)
	if err != nil {
		return Installed{}, err
	}
	return install(ctx, src, name, cfg.HostDir)
}

// findSource returns the one regular file cfg.SourceGlob matches.
func findSource(src fs.FS, cfg Config) (string, error) {
	matches, err := fs.Glob(src, cfg.SourceGlob)
	if err != nil {
		return "", fmt.Errorf("hamicore: SourceGlob %q: %w", cfg.SourceGlob, err)
	}
	var files []string
	for _, m := range matches {
		st, err := fs.Lstat(src, m)
		if err != nil {
			return "", fmt.Errorf("hamicore: source %s: %w", filepath.Join(cfg.SourceDir, m), err)
		}
		if st.Mode().IsRegular() {
			files = append(files, m)
		}
	}
	sort.Strings(files)
	switch len(files) {
	case 1:
		return files[0], nil
	case 0:
		return "", fmt.Errorf("hamicore: no regular file matches %q in %s (matches: %q): is the HAMi-core image mounted there?", cfg.SourceGlob, cfg.SourceDir, matches)
	default:
		return "", fmt.Errorf("hamicore: %d files match %q in %s (%q), want one: narrow the pattern", len(files), cfg.SourceGlob, cfg.SourceDir, files)
	}
}
