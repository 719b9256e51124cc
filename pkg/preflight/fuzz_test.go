package preflight

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

// FuzzParseConfigs feeds arbitrary bytes to both parsers (as a single file and as a containerd
// config with imports) and Evaluate: none may panic, and a file either parses or names itself in
// its error.
func FuzzParseConfigs(f *testing.F) {
	for _, dir := range []string{"testdata/toolkit", "testdata/containerd"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("imports = [\"*.toml\", \"../../**\"]\nversion = 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk := ParseToolkitConfig("/t.toml", data)
		ctd := ParseContainerdConfig("/c.toml", data)
		for _, err := range []error{tk.Err, ctd.Err} {
			if err != nil && len(err.Error()) == 0 {
				t.Error("empty error")
			}
		}
		fsys := fstest.MapFS{"etc/containerd/config.toml": {Data: data}, "etc/containerd/x.toml": {Data: data}}
		read := ReadContainerdConfig(fsys)
		for _, s := range []string{StrategyCDI, StrategyEnvvar} {
			checkShape(t, Evaluate(Input{RuntimeName: "containerd", RuntimeVersion: string(data), Backend: BackendNVML,
				DeviceListStrategy: s, CDISpecDir: "/var/run/cdi", Toolkit: tk, Containerd: read}))
		}
	})
}
