package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/hami-go/hami-go/pkg/preflight"
)

// Issue 36 item 6: --toolkit-config and --containerd-config name the candidate host paths, in
// order; the defaults are the package install's and the GPU Operator's toolkit configs, and
// k3s's, rke2's and containerd's own config.
func TestPreflightConfigPathFlags(t *testing.T) {
	_, c, err := parse(nil, map[string]string{"NODE_NAME": "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.ToolkitConfigPaths, preflight.DefaultToolkitConfigPaths) ||
		!reflect.DeepEqual(c.ContainerdConfigPaths, preflight.DefaultContainerdConfigPaths) {
		t.Errorf("defaults: toolkit %q, containerd %q", c.ToolkitConfigPaths, c.ContainerdConfigPaths)
	}
	_, c, err = parse([]string{"--node-name=n1", "--toolkit-config=/a/config.toml,/b/config.toml", "--containerd-config=/c/config.toml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.ToolkitConfigPaths, []string{"/a/config.toml", "/b/config.toml"}) || !reflect.DeepEqual(c.ContainerdConfigPaths, []string{"/c/config.toml"}) {
		t.Errorf("toolkit %q, containerd %q", c.ToolkitConfigPaths, c.ContainerdConfigPaths)
	}
	for _, a := range []string{"--toolkit-config=etc/x.toml", "--containerd-config=/c.toml,rel.toml"} {
		if _, _, err := parse([]string{"--node-name=n1", a}, nil); err == nil || !strings.Contains(err.Error(), strings.SplitN(a, "=", 2)[0]) {
			t.Errorf("%s: err %v", a, err)
		}
	}
}

func TestNVMLLibraryFlag(t *testing.T) {
	f, _, err := parse([]string{"--node-name=n1", "--nvml-library=/host/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"}, nil)
	if err != nil || f.NVMLLibrary != "/host/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" {
		t.Errorf("NVMLLibrary %q, err %v", f.NVMLLibrary, err)
	}
	if _, _, err := parse([]string{"--node-name=n1", "--backend=fake", "--nvml-library=/x.so"}, nil); err == nil || !strings.Contains(err.Error(), "--nvml-library") {
		t.Errorf("fake backend with --nvml-library: err %v", err)
	}
}

// The agent reads the configs below its host root at the paths it is given: a GPU Operator node
// (nvidia the default runtime through the toolkit's wrapper, the toolkit's config beside it)
// reports the window open, and closed once the toolkit's config refuses the env.
func TestPreflightReadsGPUOperatorNode(t *testing.T) {
	root := t.TempDir()
	put := func(p, data string) {
		f := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("etc/containerd/config.toml", `version = 3
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "nvidia"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
`)
	const tk = "usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"
	put(tk, "[nvidia-container-runtime]\nmode = \"cdi\"\n")
	cfg := Defaults()
	p := &Preflight{Client: fake.NewClientset(testNode()), Node: "n1", HostRoot: root,
		ToolkitConfigPaths: cfg.ToolkitConfigPaths, ContainerdConfigPaths: cfg.ContainerdConfigPaths,
		Input: func() preflight.Input {
			return preflight.Input{RuntimeName: "containerd", RuntimeVersion: "v2.1.4", NRIConnected: true, Backend: BackendNVML,
				DeviceListStrategy: preflight.StrategyCDI, Enforcement: preflight.EnforceNone}
		}}
	ctx := context.Background()
	r := p.Evaluate(ctx)
	if !r.FailOpen || !strings.Contains(r.FailOpenReason, "/"+tk) {
		t.Errorf("window open %v: %q", r.FailOpen, r.FailOpenReason)
	}
	put(tk, preflight.KeyAcceptEnvvarUnprivileged+" = false\n")
	if r := p.Evaluate(ctx); r.FailOpen {
		t.Errorf("window still open: %q", r.FailOpenReason)
	}
	// Paths the flags do not name, and that are not next to the runtime, are not read.
	p.ContainerdConfigPaths = []string{"/opt/containerd.toml"}
	r = p.Evaluate(ctx)
	f, _ := r.Finding(preflight.FindingContainerdConfig)
	if !strings.Contains(f.Message, "not found (tried /opt/containerd.toml)") {
		t.Errorf("ContainerdConfig %q", f.Message)
	}
}
