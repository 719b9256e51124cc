package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// imagePath is the PATH of every image.
const imagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// epoch is the mtime of every file and the creation time of every image (reproducible builds).
var epoch = time.Unix(0, 0).UTC()

// file is one entry of a layer: a directory, a symlink to Link, or a regular file with Data.
type file struct {
	Path string // absolute path in the image
	Mode int64
	Dir  bool
	Link string
	Data []byte
}

// binaryImage makes a linux image of the base layers plus one layer holding bin as
// /usr/local/bin/<binName> (the entrypoint), /tmp, and minimal /etc/passwd and /etc/group
// (root, and nonroot = 65532, the uid the chart runs as).
func binaryImage(base []v1.Layer, binName, bin string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	top, err := layerOf([]file{
		{Path: "/etc", Dir: true, Mode: 0o755},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/usr", Dir: true, Mode: 0o755},
		{Path: "/usr/local", Dir: true, Mode: 0o755},
		{Path: "/usr/local/bin", Dir: true, Mode: 0o755},
		{Path: "/usr/local/bin/" + binName, Mode: 0o755, Data: data},
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, append(base, top)...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: []string{"/usr/local/bin/" + binName},
		Env:        []string{"PATH=" + imagePath},
		WorkingDir: "/",
		Labels:     map[string]string{"org.opencontainers.image.source": "https://github.com/hami-go/hami-go"},
	}
	return mutate.ConfigFile(img, cf)
}

// layerOf packs files into a gzip layer, root-owned, mtime epoch.
func layerOf(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return layerFromBytes(buf.Bytes())
}

func layerFromBytes(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
}

// dirFiles lists the tree under root as layer entries (directories, symlinks, regular files;
// anything else is an error), skipping paths under any of skip (relative, slash-separated).
func dirFiles(root string, skip []string) ([]file, error) {
	var files []file
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		for _, s := range skip {
			if rel == s || strings.HasPrefix(rel, s+"/") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := file{Path: "/" + rel, Mode: int64(info.Mode().Perm())}
		switch {
		case d.IsDir():
			f.Dir = true
		case info.Mode()&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if f.Data, err = os.ReadFile(p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unsupported file type %v", p, info.Mode().Type())
		}
		files = append(files, f)
		return nil
	})
	return files, err
}
