package preflight

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Default paths of the node configs the preflight reads (host paths; ReadToolkitConfig and
// ReadContainerdConfig take them relative to an fs.FS root, leading "/" stripped).
const (
	// DefaultToolkitConfigPath is the NVIDIA Container Toolkit's config file (NVIDIA Container
	// Toolkit docs, "Configuration": /etc/nvidia-container-runtime/config.toml, moved with
	// XDG_CONFIG_HOME). It is read by nvidia-container-runtime and nvidia-container-runtime-hook.
	DefaultToolkitConfigPath = "/etc/nvidia-container-runtime/config.toml"
	// GPUOperatorToolkitConfigPath is where the NVIDIA GPU Operator's toolkit container installs
	// its config (its runtime wrapper points XDG_CONFIG_HOME at /usr/local/nvidia/toolkit/.config).
	GPUOperatorToolkitConfigPath = "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"
	// DefaultContainerdConfigPath is containerd's config file (containerd docs, "containerd
	// config": containerd --config, default /etc/containerd/config.toml).
	DefaultContainerdConfigPath = "/etc/containerd/config.toml"
	// K3sContainerdConfigPath and RKE2ContainerdConfigPath are the containerd configs k3s and
	// rke2 render for their embedded containerd (from config.toml.tmpl beside them, if present).
	K3sContainerdConfigPath  = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
	RKE2ContainerdConfigPath = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"
)

// ToolkitConfigDirName is where the NVIDIA container runtime looks for its config under
// $XDG_CONFIG_HOME: <XDG_CONFIG_HOME>/nvidia-container-runtime/config.toml. The GPU Operator's
// runtime wrapper (<toolkit dir>/nvidia-container-runtime, a script that is containerd's
// BinaryName) sets XDG_CONFIG_HOME=<toolkit dir>/.config.
const ToolkitConfigDirName = ".config/nvidia-container-runtime/config.toml"

// DefaultToolkitConfigPaths are the toolkit config paths ReadToolkitConfig tries, first found
// wins: the package install's, then the GPU Operator's.
var DefaultToolkitConfigPaths = []string{DefaultToolkitConfigPath, GPUOperatorToolkitConfigPath}

// DefaultContainerdConfigPaths are the containerd config paths ReadContainerdConfig tries, first
// found wins: k3s's and rke2's rendered configs first (a node running them rarely has a stray
// /etc/containerd/config.toml, while a plain node never has theirs), then containerd's own.
var DefaultContainerdConfigPaths = []string{K3sContainerdConfigPath, RKE2ContainerdConfigPath, DefaultContainerdConfigPath}

// NVIDIA Container Toolkit config keys (NVIDIA Container Toolkit docs, "Configuration" /
// internal/config: top-level keys unless a table is named).
const (
	// KeyAcceptEnvvarUnprivileged is the top-level boolean
	// accept-nvidia-visible-devices-envvar-when-unprivileged (default true): whether an
	// unprivileged container's NVIDIA_VISIBLE_DEVICES (image ENV included) selects devices.
	KeyAcceptEnvvarUnprivileged = "accept-nvidia-visible-devices-envvar-when-unprivileged"
	// KeyAcceptVolumeMounts is the top-level boolean
	// accept-nvidia-visible-devices-as-volume-mounts (default false): whether mounts of the
	// host's /dev/null under /var/run/nvidia-container-devices/ (one per device name, "all"
	// included) select devices; checked before the env.
	KeyAcceptVolumeMounts = "accept-nvidia-visible-devices-as-volume-mounts"
	// KeyRuntimeMode is mode in the [nvidia-container-runtime] table: "auto" (the default),
	// "legacy", "cdi", "csv" or "jit-cdi". Every mode honours NVIDIA_VISIBLE_DEVICES under the
	// two keys above.
	KeyRuntimeMode = "nvidia-container-runtime.mode"
)

// ToolkitConfig is what the preflight needs from the NVIDIA Container Toolkit config
// (DefaultToolkitConfigPath). The zero value is "no config found": the toolkit's defaults.
type ToolkitConfig struct {
	// Path is the file read (host path); "" when none was found.
	Path string
	// Tried are the candidate paths looked for, in order, up to and including Path (all of
	// them when none was found); nil when not read from a filesystem.
	Tried []string
	// Found is true when a file was read (even if it did not parse).
	Found bool
	// Err is the read or TOML parse error (the file and the parser's line in it); nil when the
	// file parsed or none was found. With Err set the fields below hold the defaults.
	Err error
	// AcceptEnvvarUnprivileged is KeyAcceptEnvvarUnprivileged's value (true when absent).
	AcceptEnvvarUnprivileged bool
	// AcceptEnvvarUnprivilegedSet is true when the key is in the file.
	AcceptEnvvarUnprivilegedSet bool
	// AcceptVolumeMounts is KeyAcceptVolumeMounts's value (false when absent).
	AcceptVolumeMounts bool
	// Mode is KeyRuntimeMode's value ("auto" when absent or empty).
	Mode string
}

// DefaultToolkitConfig returns the toolkit's built-in defaults, as when no config file exists
// (Found false): KeyAcceptEnvvarUnprivileged true, KeyAcceptVolumeMounts false, mode "auto".
func DefaultToolkitConfig() ToolkitConfig {
	return ToolkitConfig{AcceptEnvvarUnprivileged: true, Mode: "auto"}
}

type toolkitFile struct {
	AcceptEnvvarUnprivileged *bool `toml:"accept-nvidia-visible-devices-envvar-when-unprivileged"`
	AcceptVolumeMounts       *bool `toml:"accept-nvidia-visible-devices-as-volume-mounts"`
	Runtime                  struct {
		Mode string `toml:"mode"`
	} `toml:"nvidia-container-runtime"`
}

// ParseToolkitConfig parses the NVIDIA Container Toolkit config at path (a host path, for
// messages) from data. It never panics: a malformed file gives Err naming path and the parse
// error, and the defaults.
func ParseToolkitConfig(path string, data []byte) ToolkitConfig {
	c := DefaultToolkitConfig()
	c.Path, c.Found = path, true
	var f toolkitFile
	if _, err := decode(data, &f); err != nil {
		c.Err = fmt.Errorf("%s: %w", path, err)
		return c
	}
	if f.AcceptEnvvarUnprivileged != nil {
		c.AcceptEnvvarUnprivileged, c.AcceptEnvvarUnprivilegedSet = *f.AcceptEnvvarUnprivileged, true
	}
	if f.AcceptVolumeMounts != nil {
		c.AcceptVolumeMounts = *f.AcceptVolumeMounts
	}
	if f.Runtime.Mode != "" {
		c.Mode = f.Runtime.Mode
	}
	return c
}

// decode is toml.Decode behind a recover: the parser is not ours and a node's file is input.
func decode(data []byte, v any) (md toml.MetaData, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("toml: parser panic: %v", r)
		}
	}()
	return toml.Decode(string(data), v)
}

// containerd's CRI plugin tables per config schema version (containerd docs, "CRI Plugin
// Config Guide"): version 3 (containerd 2.x) splits the runtime part into
// io.containerd.cri.v1.runtime; version 2 uses io.containerd.grpc.v1.cri; version 1 (containerd
// 1.x without a version key) uses cri.
const (
	criTableV3 = "io.containerd.cri.v1.runtime"
	criTableV2 = "io.containerd.grpc.v1.cri"
	criTableV1 = "cri"
	// nriTable is containerd's NRI plugin table (containerd docs, "NRI": disable = false turns
	// NRI on; the default since containerd 2.0, off in 1.7).
	nriTable = "io.containerd.nri.v1.nri"
)

// ContainerdRuntime is one runtime handler in containerd's CRI config
// ([plugins.<cri>.containerd.runtimes.<Name>]); a pod selects it by a RuntimeClass whose
// handler is Name, or gets it when it is default_runtime_name.
type ContainerdRuntime struct {
	// Name is the handler name ("runc", "nvidia", "nvidia-cdi", ...).
	Name string
	// Type is runtime_type ("io.containerd.runc.v2").
	Type string
	// BinaryName is options.BinaryName, the OCI runtime binary the runc shim runs ("" = runc).
	BinaryName string
}

// NVIDIA reports whether the handler runs the NVIDIA container runtime: its BinaryName
// contains "nvidia-container-runtime" (nvidia-container-runtime, .cdi, .legacy, the GPU
// Operator's /usr/local/nvidia/toolkit/ wrappers), or it is named "nvidia" with no BinaryName
// to say otherwise.
func (r ContainerdRuntime) NVIDIA() bool {
	if strings.Contains(r.BinaryName, "nvidia-container-runtime") {
		return true
	}
	return r.BinaryName == "" && r.Name == "nvidia"
}

// ContainerdConfig is what the preflight needs from containerd's config
// (DefaultContainerdConfigPath, with its imports merged). The zero value is "no config found":
// containerd's built-in defaults.
type ContainerdConfig struct {
	// Path is the main file read (host path); "" when none was found.
	Path string
	// Tried are the candidate paths looked for, in order, up to and including Path (all of
	// them when none was found); nil when not read from a filesystem.
	Tried []string
	// Imports are the imported files merged into it, in order (host paths).
	Imports []string
	// Found is true when a file was read (even if it did not parse).
	Found bool
	// Err is the read, TOML parse or type error (naming the file); nil when all parsed.
	Err error
	// Version is the schema version key (1 when absent: containerd reads such a file as v1).
	Version int64
	// CRITable is the CRI plugin table the runtime settings were read from, as TOML
	// (`plugins."io.containerd.cri.v1.runtime"`); "" when the file has none.
	CRITable string
	// EnableCDI is enable_cdi under CRITable; nil when unset (containerd >= 2.0 defaults to
	// true, 1.7 to false).
	EnableCDI *bool
	// CDISpecDirs is cdi_spec_dirs under CRITable; nil when unset (default
	// ["/etc/cdi", "/var/run/cdi"]).
	CDISpecDirs []string
	// NRIDisable is disable under [plugins."io.containerd.nri.v1.nri"]; nil when unset
	// (containerd >= 2.0 defaults to false, 1.7 to true).
	NRIDisable *bool
	// DefaultRuntimeName is containerd.default_runtime_name under CRITable ("" = unset: runc).
	DefaultRuntimeName string
	// Runtimes are the handlers under CRITable's containerd.runtimes, sorted by Name.
	Runtimes []ContainerdRuntime
}

// DefaultRuntime returns the handler containerd uses for a pod without a RuntimeClass:
// DefaultRuntimeName ("runc" when unset), with its entry when the file has one.
func (c ContainerdConfig) DefaultRuntime() ContainerdRuntime {
	name := c.DefaultRuntimeName
	if name == "" {
		name = "runc"
	}
	for _, r := range c.Runtimes {
		if r.Name == name {
			return r
		}
	}
	return ContainerdRuntime{Name: name}
}

// NVIDIARuntimes returns the handlers that run the NVIDIA container runtime (ContainerdRuntime.
// NVIDIA), the default one included.
func (c ContainerdConfig) NVIDIARuntimes() []ContainerdRuntime {
	var out []ContainerdRuntime
	for _, r := range c.Runtimes {
		if r.NVIDIA() {
			out = append(out, r)
		}
	}
	if d := c.DefaultRuntime(); d.NVIDIA() && !containsRuntime(out, d.Name) {
		out = append(out, d)
	}
	return out
}

// ToolkitConfigNextToRuntimes returns the toolkit configs the NVIDIA runtimes of c read when
// they are the GPU Operator's wrappers: <dir of BinaryName>/ToolkitConfigDirName for each NVIDIA
// handler with an absolute BinaryName, the default runtime's first, without duplicates. A
// package install's /usr/bin/nvidia-container-runtime gives /usr/bin/.config/..., which does not
// exist, so the candidates after these (ReadToolkitConfig) decide there.
func ToolkitConfigNextToRuntimes(c ContainerdConfig) []string {
	rs := c.NVIDIARuntimes()
	if d := c.DefaultRuntime(); d.NVIDIA() {
		rs = append([]ContainerdRuntime{d}, rs...)
	}
	var out []string
	for _, r := range rs {
		if !strings.HasPrefix(r.BinaryName, "/") {
			continue
		}
		p := path.Join(path.Dir(r.BinaryName), ToolkitConfigDirName)
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func containsRuntime(rs []ContainerdRuntime, name string) bool {
	for _, r := range rs {
		if r.Name == name {
			return true
		}
	}
	return false
}

// ParseContainerdConfig parses containerd's config at path (a host path, for messages) from
// data, without its imports (ReadContainerdConfig merges those). It never panics.
func ParseContainerdConfig(path string, data []byte) ContainerdConfig {
	m, err := decodeMap(path, data)
	if err != nil {
		return ContainerdConfig{Path: path, Found: true, Err: err}
	}
	c := containerdFromMap(path, m)
	c.Path, c.Found = path, true
	return c
}

func decodeMap(path string, data []byte) (map[string]any, error) {
	m := map[string]any{}
	if _, err := decode(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// containerdFromMap reads the settings from a decoded (and merged) containerd config; type
// errors name file (the main file: a merged value's own file is not tracked).
func containerdFromMap(file string, m map[string]any) ContainerdConfig {
	var c ContainerdConfig
	var errs []error
	bad := func(key string, v any, want string) {
		errs = append(errs, fmt.Errorf("%s: %s is %T, want %s", file, key, v, want))
	}
	c.Version = 1
	if v, ok := m["version"]; ok {
		if n, ok := v.(int64); ok {
			c.Version = n
		} else {
			bad("version", v, "an integer")
		}
	}
	plugins, _ := m["plugins"].(map[string]any)
	order := []string{criTableV1, criTableV2, criTableV3}
	switch {
	case c.Version >= 3:
		order = []string{criTableV3}
	case c.Version == 2:
		order = []string{criTableV2}
	}
	var cri map[string]any
	for _, name := range order {
		if t, ok := plugins[name].(map[string]any); ok {
			cri, c.CRITable = t, tomlTable("plugins", name)
			break
		}
	}
	if cri != nil {
		if v, ok := cri["enable_cdi"]; ok {
			if b, ok := v.(bool); ok {
				c.EnableCDI = &b
			} else {
				bad(c.CRITable+".enable_cdi", v, "a boolean")
			}
		}
		if v, ok := cri["cdi_spec_dirs"]; ok {
			dirs, ok := strings1(v)
			if !ok {
				bad(c.CRITable+".cdi_spec_dirs", v, "an array of strings")
			}
			c.CDISpecDirs = dirs
		}
		ctd, _ := cri["containerd"].(map[string]any)
		if v, ok := ctd["default_runtime_name"]; ok {
			if s, ok := v.(string); ok {
				c.DefaultRuntimeName = s
			} else {
				bad(c.CRITable+".containerd.default_runtime_name", v, "a string")
			}
		}
		rts, _ := ctd["runtimes"].(map[string]any)
		for name, v := range rts {
			t, _ := v.(map[string]any)
			r := ContainerdRuntime{Name: name}
			r.Type, _ = t["runtime_type"].(string)
			opts, _ := t["options"].(map[string]any)
			r.BinaryName, _ = opts["BinaryName"].(string)
			c.Runtimes = append(c.Runtimes, r)
		}
		sort.Slice(c.Runtimes, func(i, j int) bool { return c.Runtimes[i].Name < c.Runtimes[j].Name })
	}
	if t, ok := plugins[nriTable].(map[string]any); ok {
		if v, ok := t["disable"]; ok {
			if b, ok := v.(bool); ok {
				c.NRIDisable = &b
			} else {
				bad(tomlTable("plugins", nriTable)+".disable", v, "a boolean")
			}
		}
	}
	c.Err = errors.Join(errs...)
	return c
}

// tomlTable spells a dotted table path as TOML does, quoting keys with dots.
func tomlTable(keys ...string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		if strings.ContainsAny(k, ".\" ") {
			parts[i] = strconv.Quote(k)
		} else {
			parts[i] = k
		}
	}
	return strings.Join(parts, ".")
}

func strings1(v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return out, false
		}
		out = append(out, s)
	}
	return out, true
}

// mergeTOML merges src into dst the way containerd merges an imported file (its
// cmd/containerd/server/config mergeConfig, approximately): tables merge key by key,
// recursively; any other value in src replaces dst's.
func mergeTOML(dst, src map[string]any) {
	for k, sv := range src {
		if st, ok := sv.(map[string]any); ok {
			if dt, ok := dst[k].(map[string]any); ok {
				mergeTOML(dt, st)
				continue
			}
		}
		dst[k] = sv
	}
}

// Version is a runtime's version as major.minor.patch; parse with ParseVersion.
type Version struct {
	Major, Minor, Patch int
}

// ParseVersion reads "v2.4.2", "2.1.0", "1.34.1", "2.0.2+unknown", "1.7.24~ds1" or "2.1" (the
// leading v dropped, anything after the numeric major.minor[.patch] prefix ignored).
func ParseVersion(s string) (Version, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	end := 0
	for end < len(t) && (t[end] == '.' || (t[end] >= '0' && t[end] <= '9')) {
		end++
	}
	fields := strings.Split(strings.TrimRight(t[:end], "."), ".")
	if len(fields) < 2 {
		return Version{}, fmt.Errorf("version %q: want major.minor[.patch]", s)
	}
	var n [3]int
	for i := 0; i < len(fields) && i < 3; i++ {
		v, err := strconv.Atoi(fields[i])
		if err != nil {
			return Version{}, fmt.Errorf("version %q: want major.minor[.patch]", s)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

// AtLeast reports whether v >= major.minor.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// String returns "major.minor.patch".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }
