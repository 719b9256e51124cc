package preflight

import (
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

// Issue 36 item 6: the preflight reads the configs where the node's runtime reads them: the GPU
// Operator's toolkit config next to its runtime wrapper, k3s's rendered containerd config, and
// the candidates the agent's flags name, and says which it read and which it tried.

// gpuOperatorCtd is containerd's config on a GPU Operator node: the toolkit container made
// nvidia the default runtime, running its wrapper.
const gpuOperatorCtd = `version = 3
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "nvidia"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
`

func gpuOperatorNode(toolkit string) fstest.MapFS {
	return fstest.MapFS{
		"etc/containerd/config.toml": {Data: []byte(gpuOperatorCtd)},
		"usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml": {Data: []byte(toolkit)},
	}
}

func gpuOperatorInput(fsys fstest.MapFS) Input {
	in := Input{RuntimeName: "containerd", RuntimeVersion: "v2.1.4", NRIConnected: true, Backend: BackendNVML,
		DeviceListStrategy: StrategyCDI, Enforcement: EnforceNone}
	in.Toolkit, in.Containerd = ReadNodeConfigs(fsys, nil, nil)
	return in
}

func TestGPUOperatorNodeWindowOpenWhenEnvvarUnset(t *testing.T) {
	in := gpuOperatorInput(gpuOperatorNode("[nvidia-container-runtime]\nmode = \"cdi\"\n"))
	if in.Toolkit.Path != GPUOperatorToolkitConfigPath || in.Containerd.Path != DefaultContainerdConfigPath {
		t.Fatalf("read toolkit %q, containerd %q", in.Toolkit.Path, in.Containerd.Path)
	}
	r := Evaluate(in)
	if !r.FailOpen {
		t.Fatalf("window reported closed on a GPU Operator node with %s unset: %s", KeyAcceptEnvvarUnprivileged, orReason(FindingFailOpenWindow))
	}
	for _, s := range []string{"default runtime is nvidia", "/usr/local/nvidia/toolkit/nvidia-container-runtime", GPUOperatorToolkitConfigPath, "unset: the default"} {
		if !strings.Contains(r.FailOpenReason, s) {
			t.Errorf("reason %q lacks %q", r.FailOpenReason, s)
		}
	}
	f, _ := r.Finding(FindingToolkitConfig)
	if !strings.Contains(f.Message, "read from "+GPUOperatorToolkitConfigPath) {
		t.Errorf("ToolkitConfig: %q", f.Message)
	}
	f, _ = r.Finding(FindingContainerdConfig)
	// k3s's and rke2's paths come first and are absent here: the message names them as tried.
	for _, p := range DefaultContainerdConfigPaths {
		if !strings.Contains(f.Message, p) {
			t.Errorf("ContainerdConfig %q does not name %s", f.Message, p)
		}
	}
}

func TestGPUOperatorNodeWindowClosedByToolkitKey(t *testing.T) {
	in := gpuOperatorInput(gpuOperatorNode(KeyAcceptEnvvarUnprivileged + " = false\n"))
	r := Evaluate(in)
	f, _ := r.Finding(FindingFailOpenWindow)
	if r.FailOpen || !f.OK {
		t.Fatalf("window reported open: %s", r.FailOpenReason)
	}
	if want := KeyAcceptEnvvarUnprivileged + " = false in " + GPUOperatorToolkitConfigPath; !strings.Contains(f.Message, want) {
		t.Errorf("FailOpenWindow %q lacks %q", f.Message, want)
	}
}

// A stale package-install config in /etc loses to the one the GPU Operator's wrapper reads.
func TestToolkitConfigNextToWrapperWinsOverEtc(t *testing.T) {
	fsys := gpuOperatorNode(KeyAcceptEnvvarUnprivileged + " = false\n")
	fsys["etc/nvidia-container-runtime/config.toml"] = &fstest.MapFile{Data: []byte(KeyAcceptEnvvarUnprivileged + " = true\n")}
	in := gpuOperatorInput(fsys)
	if in.Toolkit.Path != GPUOperatorToolkitConfigPath || in.Toolkit.AcceptEnvvarUnprivileged {
		t.Fatalf("toolkit %+v", in.Toolkit)
	}
	if want := []string{GPUOperatorToolkitConfigPath}; !reflect.DeepEqual(in.Toolkit.Tried, want) {
		t.Errorf("Tried %q, want %q", in.Toolkit.Tried, want)
	}
	if Evaluate(in).FailOpen {
		t.Error("window reported open")
	}
}

// The project's local cluster: the toolkit's wrapper and containerd's config under a state
// directory, named by the agent's flags.
func TestWrapperAnywhereAndExplicitPaths(t *testing.T) {
	const st = "/var/lib/hami-go-cluster"
	ctd := strings.ReplaceAll(gpuOperatorCtd, "/usr/local/nvidia/toolkit", st+"/toolkit")
	fsys := fstest.MapFS{
		"var/lib/hami-go-cluster/containerd/config.toml":                               {Data: []byte(ctd)},
		"var/lib/hami-go-cluster/toolkit/.config/nvidia-container-runtime/config.toml": {Data: []byte("[nvidia-container-runtime]\nmode = \"legacy\"\n")},
	}
	tk, c := ReadNodeConfigs(fsys, []string{"/opt/none.toml"}, []string{DefaultContainerdConfigPath, st + "/containerd/config.toml"})
	if c.Path != st+"/containerd/config.toml" || !reflect.DeepEqual(c.Tried, []string{DefaultContainerdConfigPath, st + "/containerd/config.toml"}) {
		t.Errorf("containerd %q tried %q", c.Path, c.Tried)
	}
	if want := st + "/toolkit/" + ToolkitConfigDirName; tk.Path != want || tk.Mode != "legacy" {
		t.Errorf("toolkit %q (mode %q), want %q", tk.Path, tk.Mode, want)
	}
	in := Input{RuntimeName: "containerd", RuntimeVersion: "2.1.4", NRIConnected: true, Backend: BackendNVML, DeviceListStrategy: StrategyCDI, Toolkit: tk, Containerd: c}
	if !Evaluate(in).FailOpen {
		t.Error("window reported closed")
	}
}

func TestK3sContainerdConfigRead(t *testing.T) {
	fsys := fstest.MapFS{
		"var/lib/rancher/k3s/agent/etc/containerd/config.toml": {Data: []byte(`version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
`)},
		"etc/nvidia-container-runtime/config.toml": {Data: []byte(KeyAcceptEnvvarUnprivileged + " = false\n")},
	}
	tk, c := ReadNodeConfigs(fsys, nil, nil)
	if c.Path != K3sContainerdConfigPath || c.DefaultRuntime().Name != "runc" || len(c.NVIDIARuntimes()) != 1 {
		t.Fatalf("containerd %+v", c)
	}
	// /usr/bin/.config/... (next to a package install's runtime) does not exist: /etc's is read.
	if tk.Path != DefaultToolkitConfigPath || tk.AcceptEnvvarUnprivileged ||
		!reflect.DeepEqual(tk.Tried, []string{"/usr/bin/" + ToolkitConfigDirName, DefaultToolkitConfigPath}) {
		t.Errorf("toolkit %+v", tk)
	}
	in := Input{RuntimeName: "containerd", RuntimeVersion: "2.1.4", NRIConnected: true, Backend: BackendNVML, DeviceListStrategy: StrategyCDI, Toolkit: tk, Containerd: c}
	r := Evaluate(in)
	f, _ := r.Finding(FindingFailOpenWindow)
	if r.FailOpen || !strings.Contains(f.Message, "runtime handler(s) nvidia in "+K3sContainerdConfigPath) {
		t.Errorf("FailOpenWindow %+v", f)
	}
	// Without the key the k3s nvidia handler keeps the window open (by RuntimeClass).
	delete(fsys, "etc/nvidia-container-runtime/config.toml")
	in.Toolkit, in.Containerd = ReadNodeConfigs(fsys, nil, nil)
	if r := Evaluate(in); !r.FailOpen || !strings.Contains(r.FailOpenReason, "RuntimeClass") {
		t.Errorf("window: %v %q", r.FailOpen, r.FailOpenReason)
	}
}

func TestNothingFoundNamesTheTriedPaths(t *testing.T) {
	tk, c := ReadNodeConfigs(fstest.MapFS{}, nil, nil)
	in := Input{RuntimeName: "containerd", RuntimeVersion: "2.1.4", NRIConnected: true, Backend: BackendNVML, DeviceListStrategy: StrategyCDI, Toolkit: tk, Containerd: c}
	r := Evaluate(in)
	f, _ := r.Finding(FindingFailOpenWindow)
	for _, p := range append(append([]string{}, DefaultToolkitConfigPaths...), DefaultContainerdConfigPaths...) {
		if !strings.Contains(f.Message, p) {
			t.Errorf("FailOpenWindow %q does not name %s", f.Message, p)
		}
	}
}
