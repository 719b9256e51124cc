package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// This file is the preflight's only I/O: reading the node's configs from an fs.FS whose root is
// the host's / (os.DirFS("/"), or os.DirFS("/host") where the host root is mounted there), so
// tests read testdata through os.DirFS or fstest.MapFS; and the runtime's CDI specs through the
// CDI library's cache, which reads OS paths (ReadCDISpecs: the host root's directory).

// maxImportDepth bounds containerd import chains (containerd itself does not nest deeper in
// practice; the bound only stops a cycle through globs).
const maxImportDepth = 8

// fsPath turns a host path into an fs.FS path: "/etc/x" -> "etc/x".
func fsPath(p string) string {
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	if p == "" {
		return "."
	}
	return p
}

// ReadToolkitConfig reads the first of paths (host paths; DefaultToolkitConfigPaths when none
// are given) that exists in fsys and parses it (ParseToolkitConfig). No file found gives
// DefaultToolkitConfig(); a file that cannot be read gives Err naming it. Tried lists the paths
// looked for.
func ReadToolkitConfig(fsys fs.FS, paths ...string) ToolkitConfig {
	if len(paths) == 0 {
		paths = DefaultToolkitConfigPaths
	}
	var tried []string
	for _, p := range paths {
		if slices.Contains(tried, p) {
			continue
		}
		tried = append(tried, p)
		data, err := fs.ReadFile(fsys, fsPath(p))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var c ToolkitConfig
		if err != nil {
			c = DefaultToolkitConfig()
			c.Path, c.Found, c.Err = p, true, fmt.Errorf("%s: %w", p, err)
		} else {
			c = ParseToolkitConfig(p, data)
		}
		c.Tried = tried
		return c
	}
	c := DefaultToolkitConfig()
	c.Tried = tried
	return c
}

// ReadNodeConfigs reads containerd's config from the first of containerdPaths that exists
// (ReadContainerdConfig), then the toolkit's: first the configs next to the NVIDIA runtimes
// containerd runs (ToolkitConfigNextToRuntimes: the GPU Operator's wrapper points the runtime at
// <toolkit dir>/.config/nvidia-container-runtime/config.toml), then toolkitPaths
// (ReadToolkitConfig). Empty path lists mean the defaults.
func ReadNodeConfigs(fsys fs.FS, toolkitPaths, containerdPaths []string) (ToolkitConfig, ContainerdConfig) {
	c := ReadContainerdConfig(fsys, containerdPaths...)
	if len(toolkitPaths) == 0 {
		toolkitPaths = DefaultToolkitConfigPaths
	}
	tk := ReadToolkitConfig(fsys, append(ToolkitConfigNextToRuntimes(c), toolkitPaths...)...)
	return tk, c
}

// ReadContainerdConfig reads the first of paths (host paths; DefaultContainerdConfigPaths when
// none are given) that exists in fsys, merges the files its top-level imports name (containerd
// docs, "imports": paths relative to the importing file's directory, globs allowed, later files
// overriding earlier ones), and extracts the settings (ParseContainerdConfig). No file found
// gives the zero ContainerdConfig (containerd's defaults).
func ReadContainerdConfig(fsys fs.FS, paths ...string) ContainerdConfig {
	if len(paths) == 0 {
		paths = DefaultContainerdConfigPaths
	}
	var tried []string
	for _, p := range paths {
		if slices.Contains(tried, p) {
			continue
		}
		tried = append(tried, p)
		data, err := fs.ReadFile(fsys, fsPath(p))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return ContainerdConfig{Path: p, Tried: tried, Found: true, Err: fmt.Errorf("%s: %w", p, err)}
		}
		m, err := decodeMap(p, data)
		if err != nil {
			return ContainerdConfig{Path: p, Tried: tried, Found: true, Err: err}
		}
		var imported []string
		ierr := mergeImports(fsys, p, m, &imported, map[string]bool{p: true}, 0)
		c := containerdFromMap(p, m)
		c.Path, c.Tried, c.Found, c.Imports = p, tried, true, imported
		c.Err = errors.Join(ierr, c.Err)
		return c
	}
	return ContainerdConfig{Tried: tried}
}

// mergeImports merges into m the files m's imports name (read relative to file's directory),
// depth first as containerd loads them, recording each in imported.
func mergeImports(fsys fs.FS, file string, m map[string]any, imported *[]string, seen map[string]bool, depth int) error {
	raw, ok := m["imports"]
	if !ok {
		return nil
	}
	list, ok := strings1(raw)
	if !ok {
		return fmt.Errorf("%s: imports is %T, want an array of strings", file, raw)
	}
	if depth >= maxImportDepth {
		return fmt.Errorf("%s: imports nested deeper than %d", file, maxImportDepth)
	}
	var errs []error
	for _, imp := range list {
		if !path.IsAbs(imp) {
			imp = path.Join(path.Dir(file), imp)
		}
		matches := []string{imp}
		if strings.ContainsAny(imp, "*?[") {
			got, err := fs.Glob(fsys, fsPath(imp))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: imports %q: %w", file, imp, err))
				continue
			}
			matches = matches[:0]
			for _, g := range got {
				matches = append(matches, "/"+g)
			}
		}
		for _, f := range matches {
			if seen[f] {
				continue
			}
			seen[f] = true
			data, err := fs.ReadFile(fsys, fsPath(f))
			if err != nil {
				// containerd fails to start on a missing import it named without a glob.
				errs = append(errs, fmt.Errorf("%s: import %s: %w", file, f, err))
				continue
			}
			sub, err := decodeMap(f, data)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			*imported = append(*imported, f)
			if err := mergeImports(fsys, f, sub, imported, seen, depth+1); err != nil {
				errs = append(errs, err)
			}
			delete(sub, "imports")
			delete(sub, "version")
			mergeTOML(m, sub)
		}
	}
	return errors.Join(errs...)
}

// ReadCDISpecs reads the CDI specs of dirs (host paths, the runtime's cdi_spec_dirs in its
// order: Input.RuntimeCDISpecDirs) below root, the directory the host's / is mounted at ("/host";
// "/" in the host's own mount namespace), with the CDI library's cache as the runtime does. A
// directory under /var/run that is absent is also looked for under /run and the other way round
// (one directory on the host; the agents mount /var/run/cdi).
func ReadCDISpecs(root string, dirs []string) CDISpecs {
	s := CDISpecs{Dirs: slices.Clone(dirs)}
	if s.Dirs == nil {
		s.Dirs = []string{}
	}
	var local []string
	for _, d := range dirs {
		found := ""
		for _, c := range runAliases(d) {
			p := filepath.Join(root, fsPath(c))
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				found = p
				break
			}
		}
		if found == "" {
			s.Absent = append(s.Absent, d)
			continue
		}
		local = append(local, found)
	}
	if len(local) == 0 {
		return s // an empty list would make the cache read its defaults, the agent's own
	}
	c, _ := cdi.NewCache(cdi.WithSpecDirs(local...), cdi.WithAutoRefresh(false)) // the error is always nil
	s.Devices = c.ListDevices()
	r := filepath.Clean(root)
	for p, errs := range c.GetErrors() {
		msg := errors.Join(errs...).Error()
		if r != "/" {
			// Name host paths, not the agent's mount of them.
			p = strings.TrimPrefix(p, r)
			msg = strings.ReplaceAll(msg, r+"/", "/")
		}
		s.Errors = append(s.Errors, p+": "+strings.ReplaceAll(msg, "\n", "; "))
	}
	slices.Sort(s.Errors)
	return s
}

// runAliases returns d, then its other spelling under /run or /var/run (if any).
func runAliases(d string) []string {
	d = path.Clean("/" + d)
	switch {
	case strings.HasPrefix(d+"/", "/var/run/"):
		return []string{d, strings.TrimPrefix(d, "/var")}
	case strings.HasPrefix(d+"/", "/run/"):
		return []string{d, "/var" + d}
	}
	return []string{d}
}
