// Package imagebuild packs files into reproducible linux container images and writes them as
// docker-archive tars (what `ctr -n k8s.io images import` and `kind load image-archive` take),
// with go-containerregistry and without Docker or a registry. hack/images (hami-go's images and
// kube-scheduler) and hack/images/mkimage (the local cluster's pause and workload images) both
// build with it.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Path is the PATH every image gets (first entry of its Env).
const Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Epoch is the mtime of every file and the creation time of every image (1970-01-01T00:00:00Z),
// so the same inputs give the same image digest.
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of a layer, owned by root: a directory (Dir), a symlink to Link, or a
// regular file whose content is Data, or the host file Src when Src is set.
type File struct {
	// Path is the absolute path in the image, e.g. "/usr/local/bin/webhook".
	Path string
	// Mode is the permission bits, e.g. 0o755 (symlinks are always 0o777).
	Mode int64
	Dir  bool
	Link string
	Data []byte
	// Src is a host path whose content the regular file gets (read when the layer is made).
	Src string
}

// Layer packs files, in order, into a gzip layer. Errors: a Src that cannot be read (naming
// the image path and the host path) or a path tar cannot hold.
func Layer(files []File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode, ModTime: Epoch, Format: tar.FormatPAX}
		body := f.Data
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			if f.Src != "" {
				b, err := os.ReadFile(f.Src)
				if err != nil {
					return nil, fmt.Errorf("%s from %s: %w", f.Path, f.Src, err)
				}
				body = b
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		if _, err := tw.Write(body); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
}

// Image stacks layers (first = bottom) on an empty base into a linux image for this GOARCH,
// created at Epoch, with config c whose Env gets PATH=Path in front.
func Image(layers []v1.Layer, c v1.Config) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: Epoch}
	c.Env = append([]string{"PATH=" + Path}, c.Env...)
	cf.Config = c
	return mutate.ConfigFile(img, cf)
}

// Write writes the images under their references (e.g. "registry.k8s.io/pause:3.10"; several
// may name one image) as one docker-archive tar at path. The tar appears under path only when
// complete (it is written to path+".tmp" first). Errors name a reference that is not an image
// tag, or the path.
func Write(path string, refs map[string]v1.Image) error {
	tags := make(map[name.Reference]v1.Image, len(refs))
	for r, img := range refs {
		t, err := name.NewTag(r)
		if err != nil {
			return fmt.Errorf("image reference %q: %w", r, err)
		}
		tags[t] = img
	}
	tmp := path + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, tags); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
