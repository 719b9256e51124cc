package preflight

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two GPUs as `nvidia-ctk cdi generate --device-name-strategy index --device-name-strategy uuid`
// names them (the device nodes, libraries and hooks abridged).
const (
	uuidA = "GPU-8d2c3b4e-1111-2222-3333-444455556666"
	uuidB = "GPU-9e3d4c5f-7777-8888-9999-aaaabbbbcccc"
	uuidC = "GPU-0f4e5d6a-dddd-eeee-ffff-000011112222"
)

const nvidiaSpec = `---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: ` + uuidA + `
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
- name: ` + uuidB + `
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    options:
    - ro
    - nosuid
    - nodev
    - bind
`

// hostRoot returns a temporary host root holding files (host path -> content).
func hostRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, data := range files {
		f := filepath.Join(root, fsPath(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// toolkitInput is base with the toolkit kind, the node's GPUs and the specs read under root.
func toolkitInput(t *testing.T, root string, uuids ...string) Input {
	in := base(t)
	in.ToolkitCDIKind, in.GPUUUIDs = "nvidia.com/gpu", uuids
	in.CDISpecs = ReadCDISpecs(root, in.RuntimeCDISpecDirs())
	return in
}

// case C55: a node without the NVIDIA Container Toolkit's CDI spec fails every GPU container
// ("unresolvable CDI devices": each names nvidia.com/gpu=<UUID> beside hami-go's device). The
// ToolkitCDISpec check reads the runtime's CDI spec directories under the host root as the
// runtime does, and names the devices no spec defines and the directories read.
func TestC55ToolkitCDISpec(t *testing.T) {
	withSpec := hostRoot(t, map[string]string{"/var/run/cdi/nvidia.yaml": nvidiaSpec, "/var/run/cdi/hami-go.io-gpu.json": "{}", "/etc/cdi/README": "not a spec"})
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		in   Input
		ok   bool
		sev  Severity
		has  []string
		not  []string
	}{{
		name: "both GPUs resolve",
		in:   toolkitInput(t, withSpec, uuidA, uuidB),
		ok:   true,
		has:  []string{"every GPU (2) resolves as nvidia.com/gpu=<UUID>", "/etc/cdi, /var/run/cdi"},
	}, {
		name: "a GPU the spec lacks (generated before it was added)",
		in:   toolkitInput(t, withSpec, uuidA, uuidB, uuidC),
		sev:  SeverityError,
		has:  []string{"nvidia.com/gpu=" + uuidC + " not defined by the CDI specs in /etc/cdi, /var/run/cdi", "unresolvable CDI devices", "nvidia-ctk cdi generate", "devicePlugin.toolkitCDIKind"},
		not:  []string{uuidA, uuidB},
	}, {
		name: "no spec directory on the host",
		in:   toolkitInput(t, empty, uuidA, uuidB),
		sev:  SeverityError,
		has:  []string{"nvidia.com/gpu=" + uuidA + ", nvidia.com/gpu=" + uuidB + " not defined", "(absent: /etc/cdi, /var/run/cdi)"},
	}, {
		name: "another kind than the node's spec defines",
		in: func() Input {
			in := toolkitInput(t, withSpec, uuidA)
			in.ToolkitCDIKind = "example.com/gpu"
			return in
		}(),
		sev: SeverityError,
		has: []string{"example.com/gpu=" + uuidA + " not defined"},
	}, {
		name: "containerd's cdi_spec_dirs name /run/cdi: the /var/run/cdi mount is the same directory",
		in: func() Input {
			in := base(t)
			in.Containerd.CDISpecDirs = []string{"/run/cdi"}
			in.ToolkitCDIKind, in.GPUUUIDs = "nvidia.com/gpu", []string{uuidA}
			in.CDISpecs = ReadCDISpecs(withSpec, in.RuntimeCDISpecDirs())
			return in
		}(),
		ok:  true,
		has: []string{"in /run/cdi"},
	}, {
		name: "an invalid spec is skipped, as the runtime skips it, and named by its host path",
		in:   toolkitInput(t, hostRoot(t, map[string]string{"/etc/cdi/nvidia.yaml": strings.Replace(nvidiaSpec, "kind: nvidia.com/gpu", "kind: gpu", 1)}), uuidA),
		sev:  SeverityError,
		has:  []string{"(specs the runtime skips: /etc/cdi/nvidia.yaml: "},
		not:  []string{withSpec, os.TempDir()},
	}, {
		name: "not read (no host root)",
		in: func() Input {
			in := base(t)
			in.ToolkitCDIKind, in.GPUUUIDs = "nvidia.com/gpu", []string{uuidA}
			return in
		}(),
		sev: SeverityWarning,
		has: []string{"not read"},
	}, {
		name: "fake backend: not applicable",
		in: func() Input {
			in := toolkitInput(t, empty, uuidA)
			in.Backend = BackendFake
			return in
		}(),
		ok:  true,
		has: []string{"fake backend"},
	}, {
		name: "no toolkit kind: not applicable",
		in: func() Input {
			in := toolkitInput(t, empty, uuidA)
			in.ToolkitCDIKind = ""
			return in
		}(),
		ok:  true,
		has: []string{"--toolkit-cdi-kind empty"},
	}, {
		name: "envvar strategy: no CDI device named",
		in: func() Input {
			in := toolkitInput(t, empty, uuidA)
			in.DeviceListStrategy = StrategyEnvvar
			return in
		}(),
		ok:  true,
		has: []string{"envvar"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(tc.in)
			checkShape(t, r)
			f, _ := r.Finding(FindingToolkitCDISpec)
			if f.OK != tc.ok || (!tc.ok && f.Severity != tc.sev) {
				t.Errorf("OK %v severity %s, want %v %s: %s", f.OK, f.Severity, tc.ok, tc.sev, f.Message)
			}
			for _, s := range tc.has {
				if !strings.Contains(f.Message, s) {
					t.Errorf("message lacks %q: %s", s, f.Message)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(f.Message, s) {
					t.Errorf("message names %q: %s", s, f.Message)
				}
			}
			if !tc.ok && tc.sev == SeverityError {
				if c := r.Condition(); c.Status != "False" || !strings.Contains(c.Message, FindingToolkitCDISpec+": ") {
					t.Errorf("condition %+v does not name %s", c, FindingToolkitCDISpec)
				}
			}
		})
	}
}

// ReadCDISpecs reports every device the valid specs define, the directories it read and those
// absent, and reads nothing outside the host root when none exists (the cache's defaults would
// be the agent's own directories).
func TestReadCDISpecs(t *testing.T) {
	root := hostRoot(t, map[string]string{"/var/run/cdi/nvidia.yaml": nvidiaSpec})
	s := ReadCDISpecs(root, DefaultCDISpecDirs)
	want := []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=" + uuidA, "nvidia.com/gpu=" + uuidB, "nvidia.com/gpu=all"}
	if strings.Join(s.Devices, " ") != strings.Join(want, " ") || strings.Join(s.Absent, " ") != "/etc/cdi" || len(s.Errors) != 0 {
		t.Errorf("ReadCDISpecs = %+v, want devices %v, /etc/cdi absent", s, want)
	}
	if s := ReadCDISpecs(t.TempDir(), DefaultCDISpecDirs); len(s.Devices) != 0 || len(s.Absent) != 2 || s.Dirs == nil {
		t.Errorf("empty host root: %+v", s)
	}
	if s := ReadCDISpecs(t.TempDir(), nil); s.Dirs == nil || len(s.Devices) != 0 {
		t.Errorf("no directories: %+v (read counts as done, with nothing found)", s)
	}
}
