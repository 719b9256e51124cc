package main

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hami-go/hami-go/hack/images/imagebuild"
)

// glibcSkip are the parts of the libc6 package an image does not need.
var glibcSkip = []string{"usr/share/doc", "usr/share/lintian", "usr/share/man"}

// glibcLayer unpacks Debian's libc6 package (cfg.LibcDeb, or one apt-get download fetches into
// work) with dpkg-deb -x and packs it as a layer, plus /etc/ld.so.conf, so a cgo binary linked
// against the same glibc runs and can dlopen libnvidia-ml.so.1 (which the NVIDIA container runtime
// mounts into /usr/lib/<arch>-linux-gnu, a directory the Debian loader searches).
func glibcLayer(cfg Config, run Runner, work string) (v1.Layer, error) {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	deb := cfg.LibcDeb
	if deb == "" {
		if err := run.Run(work, nil, "apt-get", "download", "libc6"); err != nil {
			return nil, fmt.Errorf("apt-get download libc6 (or pass --libc-deb): %w", err)
		}
		matches, _ := filepath.Glob(filepath.Join(work, "libc6_*.deb"))
		if len(matches) != 1 {
			return nil, fmt.Errorf("apt-get download libc6 left %d libc6_*.deb files in %s, want 1", len(matches), work)
		}
		deb = matches[0]
	}
	root := filepath.Join(work, "root")
	if err := run.Run(work, nil, "dpkg-deb", "-x", deb, root); err != nil {
		return nil, fmt.Errorf("unpacking %s: %w", deb, err)
	}
	files, err := imagebuild.DirFiles(root, glibcSkip)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", deb, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s unpacked to nothing", deb)
	}
	files = append(files, imagebuild.File{Path: "/etc/ld.so.conf", Mode: 0o644, Data: []byte("include /etc/ld.so.conf.d/*.conf\n")})
	return imagebuild.Layer(files)
}
