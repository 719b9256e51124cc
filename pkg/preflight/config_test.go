package preflight

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func readTestdata(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// toolkit parses testdata/toolkit/<name>.toml as if it were at DefaultToolkitConfigPath; ""
// is no file (the defaults).
func toolkit(t *testing.T, name string) ToolkitConfig {
	t.Helper()
	if name == "" {
		return DefaultToolkitConfig()
	}
	return ParseToolkitConfig(DefaultToolkitConfigPath, readTestdata(t, "toolkit/"+name+".toml"))
}

// containerd parses testdata/containerd/<name>.toml as if it were at DefaultContainerdConfigPath;
// "" is no file.
func containerd(t *testing.T, name string) ContainerdConfig {
	t.Helper()
	if name == "" {
		return ContainerdConfig{}
	}
	return ParseContainerdConfig(DefaultContainerdConfigPath, readTestdata(t, "containerd/"+name+".toml"))
}

func TestParseToolkitConfig(t *testing.T) {
	for _, tc := range []struct {
		file           string
		envvar, envSet bool
		volumes        bool
		mode           string
		errHas         []string
	}{
		{file: "", envvar: true, mode: "auto"},
		{file: "default", envvar: true, mode: "auto"},
		{file: "envvar-false", envvar: false, envSet: true, mode: "cdi"},
		{file: "cdi-mode-true", envvar: true, envSet: true, mode: "cdi"},
		{file: "volume-mounts", envvar: false, envSet: true, volumes: true, mode: "legacy"},
		{file: "malformed", envvar: true, mode: "auto", errHas: []string{DefaultToolkitConfigPath, "line 3"}},
		{file: "wrongtype", envvar: true, mode: "auto", errHas: []string{DefaultToolkitConfigPath, KeyAcceptEnvvarUnprivileged}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c := toolkit(t, tc.file)
			if c.AcceptEnvvarUnprivileged != tc.envvar || c.AcceptEnvvarUnprivilegedSet != tc.envSet ||
				c.AcceptVolumeMounts != tc.volumes || c.Mode != tc.mode {
				t.Errorf("got %+v", c)
			}
			if c.Found != (tc.file != "") {
				t.Errorf("Found = %v", c.Found)
			}
			if (c.Err != nil) != (len(tc.errHas) > 0) {
				t.Fatalf("Err = %v", c.Err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(c.Err.Error(), s) {
					t.Errorf("Err %q lacks %q", c.Err, s)
				}
			}
		})
	}
}

func TestParseContainerdConfig(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		file       string
		version    int64
		table      string
		cdi        *bool
		dirs       []string
		nriDisable *bool
		def        string
		nvidia     []string
		errHas     []string
	}{
		{file: "v3-runc", version: 3, table: `plugins."io.containerd.cri.v1.runtime"`, cdi: &yes, dirs: []string{"/etc/cdi", "/var/run/cdi"},
			nriDisable: &no, def: "runc"},
		{file: "v3-nvidia-default", version: 3, table: `plugins."io.containerd.cri.v1.runtime"`, def: "nvidia", nvidia: []string{"nvidia"}},
		{file: "v2-nvidia-handler", version: 2, table: `plugins."io.containerd.grpc.v1.cri"`, cdi: &yes, def: "runc",
			nvidia: []string{"nvidia", "nvidia-cdi"}},
		{file: "v2-cdi-off", version: 2, table: `plugins."io.containerd.grpc.v1.cri"`, cdi: &no, dirs: []string{"/etc/cdi"}, nriDisable: &yes, def: "runc"},
		{file: "v1-cri", version: 1, table: "plugins.cri", def: "nvidia", nvidia: []string{"nvidia"}},
		{file: "cdi-dirs", version: 3, table: `plugins."io.containerd.cri.v1.runtime"`, dirs: []string{"/var/cdi/static", "/var/cdi/dynamic"}, def: "runc"},
		{file: "malformed", def: "runc", errHas: []string{DefaultContainerdConfigPath, "line 3"}},
		{file: "wrongtype", version: 3, table: `plugins."io.containerd.cri.v1.runtime"`, def: "runc",
			errHas: []string{`plugins."io.containerd.cri.v1.runtime".enable_cdi is string, want a boolean`, `plugins."io.containerd.nri.v1.nri".disable is int64`}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c := containerd(t, tc.file)
			if !c.Found || c.Path != DefaultContainerdConfigPath {
				t.Errorf("Found %v Path %q", c.Found, c.Path)
			}
			if c.Version != tc.version || c.CRITable != tc.table || !reflect.DeepEqual(c.EnableCDI, tc.cdi) ||
				!reflect.DeepEqual(c.CDISpecDirs, tc.dirs) || !reflect.DeepEqual(c.NRIDisable, tc.nriDisable) || c.DefaultRuntime().Name != tc.def {
				t.Errorf("got %+v", c)
			}
			var nv []string
			for _, r := range c.NVIDIARuntimes() {
				nv = append(nv, r.Name)
			}
			if !reflect.DeepEqual(nv, tc.nvidia) {
				t.Errorf("NVIDIA runtimes %q, want %q", nv, tc.nvidia)
			}
			if (c.Err != nil) != (len(tc.errHas) > 0) {
				t.Fatalf("Err = %v", c.Err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(c.Err.Error(), s) {
					t.Errorf("Err %q lacks %q", c.Err, s)
				}
			}
		})
	}
}

func TestContainerdRuntimeNVIDIA(t *testing.T) {
	for _, tc := range []struct {
		r    ContainerdRuntime
		want bool
	}{
		{ContainerdRuntime{Name: "nvidia"}, true},
		{ContainerdRuntime{Name: "nvidia", BinaryName: "/usr/bin/runc"}, false},
		{ContainerdRuntime{Name: "gpu", BinaryName: "/usr/bin/nvidia-container-runtime"}, true},
		{ContainerdRuntime{Name: "nvidia-legacy", BinaryName: "/usr/local/nvidia/toolkit/nvidia-container-runtime.legacy"}, true},
		{ContainerdRuntime{Name: "runc"}, false},
		{ContainerdRuntime{Name: "crun", BinaryName: "/usr/bin/crun"}, false},
	} {
		if got := tc.r.NVIDIA(); got != tc.want {
			t.Errorf("%+v: NVIDIA() = %v", tc.r, got)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Version
		err  bool
	}{
		{in: "v2.4.2", want: Version{2, 4, 2}},
		{in: "2.4.2", want: Version{2, 4, 2}},
		{in: "v2.1.0", want: Version{2, 1, 0}},
		{in: "2.1", want: Version{2, 1, 0}},
		{in: "v2.0.2+unknown", want: Version{2, 0, 2}},
		{in: "1.7.24~ds1", want: Version{1, 7, 24}},
		{in: "v1.7.27-0ubuntu1", want: Version{1, 7, 27}},
		{in: "1.34.1", want: Version{1, 34, 1}},
		{in: " 1.33.0 ", want: Version{1, 33, 0}},
		{in: "", err: true},
		{in: "v2", err: true},
		{in: "unknown", err: true},
		{in: "99999999999999999999.1", err: true},
	} {
		got, err := ParseVersion(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseVersion(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func hostFS(name string) string { return filepath.Join("testdata", "hosts", name) }

func TestReadConfigs(t *testing.T) {
	for _, tc := range []struct {
		host           string
		tkPath         string
		tkEnvvar       bool
		tkErr          bool
		ctdPath        string
		ctdImports     []string
		ctdDefault     string
		ctdCDI         bool
		ctdErrHas      []string
		ctdNVIDIAFound bool
	}{
		{host: "plain", tkEnvvar: true, ctdPath: DefaultContainerdConfigPath, ctdDefault: "runc", ctdCDI: true},
		{host: "nvidia-default", tkPath: DefaultToolkitConfigPath, tkEnvvar: true, ctdPath: DefaultContainerdConfigPath, ctdDefault: "nvidia", ctdNVIDIAFound: true},
		{host: "dropin", tkPath: DefaultToolkitConfigPath, tkEnvvar: false, ctdPath: DefaultContainerdConfigPath,
			ctdImports: []string{"/etc/containerd/conf.d/10-cdi.toml", "/etc/containerd/conf.d/99-nvidia.toml"}, ctdDefault: "nvidia", ctdCDI: true, ctdNVIDIAFound: true},
		{host: "k3s", tkPath: GPUOperatorToolkitConfigPath, tkEnvvar: true, ctdPath: K3sContainerdConfigPath, ctdDefault: "runc", ctdCDI: true, ctdNVIDIAFound: true},
		{host: "malformed", tkPath: DefaultToolkitConfigPath, tkEnvvar: true, tkErr: true, ctdPath: DefaultContainerdConfigPath, ctdDefault: "runc",
			ctdErrHas: []string{DefaultContainerdConfigPath, "line 3"}},
		{host: "badimport", tkEnvvar: true, ctdPath: DefaultContainerdConfigPath, ctdDefault: "runc",
			ctdErrHas: []string{"import /etc/containerd/missing.toml", "/etc/containerd/conf.d/bad.toml"}},
	} {
		t.Run(tc.host, func(t *testing.T) {
			fsys := os.DirFS(hostFS(tc.host))
			tk := ReadToolkitConfig(fsys)
			if tk.Path != tc.tkPath || tk.Found != (tc.tkPath != "") || tk.AcceptEnvvarUnprivileged != tc.tkEnvvar || (tk.Err != nil) != tc.tkErr {
				t.Errorf("toolkit %+v", tk)
			}
			c := ReadContainerdConfig(fsys)
			if c.Path != tc.ctdPath || !reflect.DeepEqual(c.Imports, tc.ctdImports) || c.DefaultRuntime().Name != tc.ctdDefault ||
				(c.EnableCDI != nil && *c.EnableCDI) != tc.ctdCDI || (len(c.NVIDIARuntimes()) > 0) != tc.ctdNVIDIAFound {
				t.Errorf("containerd %+v", c)
			}
			if (c.Err != nil) != (len(tc.ctdErrHas) > 0) {
				t.Fatalf("containerd Err = %v", c.Err)
			}
			for _, s := range tc.ctdErrHas {
				if !strings.Contains(c.Err.Error(), s) {
					t.Errorf("Err %q lacks %q", c.Err, s)
				}
			}
		})
	}
}

func TestReadNothing(t *testing.T) {
	fsys := fstest.MapFS{}
	want := DefaultToolkitConfig()
	want.Tried = DefaultToolkitConfigPaths
	if tk := ReadToolkitConfig(fsys); !reflect.DeepEqual(tk, want) {
		t.Errorf("toolkit %+v", tk)
	}
	if c := ReadContainerdConfig(fsys); !reflect.DeepEqual(c, ContainerdConfig{Tried: DefaultContainerdConfigPaths}) {
		t.Errorf("containerd %+v", c)
	}
}

func TestReadExplicitPathsAndCycle(t *testing.T) {
	fsys := fstest.MapFS{
		"opt/ctd.toml":     {Data: []byte("version = 3\nimports = [\"a.toml\"]\n")},
		"opt/a.toml":       {Data: []byte("imports = [\"/opt/ctd.toml\", \"b.toml\"]\n[plugins.\"io.containerd.nri.v1.nri\"]\ndisable = true\n")},
		"opt/b.toml":       {Data: []byte("[plugins.\"io.containerd.nri.v1.nri\"]\ndisable = false\n")},
		"opt/toolkit.toml": {Data: []byte(KeyAcceptEnvvarUnprivileged + " = false\n")},
	}
	c := ReadContainerdConfig(fsys, "/opt/ctd.toml")
	if c.Err != nil || c.NRIDisable == nil || *c.NRIDisable || !reflect.DeepEqual(c.Imports, []string{"/opt/a.toml", "/opt/b.toml"}) {
		t.Errorf("containerd %+v (b.toml, imported by a.toml, must win; the cycle back to ctd.toml must be skipped)", c)
	}
	tk := ReadToolkitConfig(fsys, "/missing.toml", "/opt/toolkit.toml")
	if tk.Path != "/opt/toolkit.toml" || tk.AcceptEnvvarUnprivileged {
		t.Errorf("toolkit %+v", tk)
	}
}
