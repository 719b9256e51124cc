package nodeagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// SweepCacheDirs removes the HAMi-core cache directories (Config.HAMiCacheDir, one per container
// in device-plugin mode, one per claim in DRA mode: gpuenv.Request.CacheName) whose name stale
// reports true, with everything in them, and returns the names removed. It is how a node agent
// frees what ended while it was away (at start, against the pods or claims it knows); what ends
// while it runs is removed by name (RemoveCacheDir). A missing dir is no error; entries that are
// not directories, or whose name is not a valid cache name, are left alone. The error joins
// every removal that failed, each naming its path; the others are still removed.
func SweepCacheDirs(dir string, stale func(name string) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the HAMi-core cache directories in %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !gpuenv.ValidCacheName(e.Name()) || !stale(e.Name()) {
			continue
		}
		if err := RemoveCacheDir(dir, e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// RemoveCacheDir removes the cache directory <dir>/<name> of a container or claim that ended,
// with everything in it; a missing one is no error. A name that is not one path element
// (gpuenv.ValidCacheName) is refused, so nothing outside dir is ever removed.
func RemoveCacheDir(dir, name string) error {
	if !gpuenv.ValidCacheName(name) {
		return fmt.Errorf("remove HAMi-core cache directory: %q is not a cache name (one path element)", name)
	}
	if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("remove HAMi-core cache directory: %w", err)
	}
	return nil
}
