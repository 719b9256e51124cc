package imagebuild

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DirFiles lists the tree under the host directory root as layer entries rooted at "/"
// (directories, symlinks, regular files with their content and permission bits), skipping paths
// under any of skip (relative to root, slash-separated, e.g. "usr/share/doc"). Errors: anything
// else (a device, a socket) names the host path and its type; walk and read errors as they come.
func DirFiles(root string, skip []string) ([]File, error) {
	var files []File
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
		f := File{Path: "/" + rel, Mode: int64(info.Mode().Perm())}
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
