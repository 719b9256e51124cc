package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTorch is a stand-in for PyTorch: allocations count against FAKE_TORCH_LIMIT_MIB held in a
// file that every process shares (as HAMi-core's cache file), and fail past it as PyTorch's
// OutOfMemoryError does.
const fakeTorch = `import fcntl, os
__version__ = "fake"
uint8, bfloat16 = "uint8", "bfloat16"
LIMIT = int(os.environ["FAKE_TORCH_LIMIT_MIB"])
STATE = os.environ["FAKE_TORCH_STATE"]

class OutOfMemoryError(RuntimeError):
    pass

def _dev(device):
    if device is None or device == "cuda":
        return 0
    if isinstance(device, int):
        return device
    return int(str(device).split(":")[1])

def _add(mib, d=0):
    limit = int(os.environ.get("FAKE_TORCH_LIMIT_MIB_%d" % d, LIMIT))
    with open(STATE + ("" if d == 0 else ".%d" % d), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        held = int(f.read() or 0)
        if held + mib > limit:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d MiB" % mib)
        f.seek(0)
        f.truncate()
        f.write(str(held + mib))
    return held + mib

class _T:
    def __init__(self, mib, d=0):
        self.d = d
        self.mib = _add(mib, d) and mib
    def fill_(self, v):
        return self
    def __matmul__(self, o):
        return self
    def __del__(self):
        _add(-self.mib, self.d)

def empty(n, dtype=None, device=None):
    return _T(n >> 20, _dev(device))

def randn(*a, **k):
    return _T(0)

class cuda:
    OutOfMemoryError = OutOfMemoryError
    def synchronize():
        pass
    def empty_cache():
        pass
    def get_device_name(i):
        return "Fake GPU"
    def device_count():
        return int(os.environ.get("FAKE_TORCH_DEVICES", "1"))
    def mem_get_info(device=None):
        d = _dev(device)
        limit = int(os.environ.get("FAKE_TORCH_LIMIT_MIB_%d" % d, LIMIT))
        held = _add(0, d)
        return (limit - held) << 20, limit << 20
`

// isolation_probe.py end to end over a fake PyTorch: its output parses and evaluates as an
// enforced slice (steps, two clients under one limit, a rate).
func TestProbeScriptWithFakeTorch(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not in PATH")
	}
	dir := t.TempDir()
	_ = os.MkdirAll(filepath.Join(dir, "torch"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "torch", "__init__.py"), []byte(fakeTorch), 0o644); err != nil {
		t.Fatal(err)
	}
	env := hamiEnv()
	probe := func(label string, args ...string) probeOut {
		out := filepath.Join(dir, label+".json")
		cmd := exec.Command(py, append([]string{"isolation_probe.py", "--out", out}, args...)...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "FAKE_TORCH_LIMIT_MIB=4000", "FAKE_TORCH_STATE="+filepath.Join(dir, label+".state"))
		cmd.Env = append(cmd.Env, envList(env)...)
		if label == "devices" {
			// Two GPUs with their own limits (what HAMi-core gives CUDA_DEVICE_MEMORY_LIMIT_0/1).
			cmd.Env = append(cmd.Env, "FAKE_TORCH_DEVICES=2", "FAKE_TORCH_LIMIT_MIB_0=3000", "FAKE_TORCH_LIMIT_MIB_1=5000")
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", label, err, b)
		}
		return readProbe(out, "")
	}
	p := isoProbes{
		Steps:   probe("steps", "--mode", "steps", "--steps", isoSteps),
		Shared:  probe("shared", "--mode", "shared", "--mib", "2500"),
		Limited: probe("limited", "--mode", "rate", "--seconds", "0.2"),
		Ref:     probe("ref", "--mode", "rate", "--seconds", "0.1"),
	}
	vals, row := evalIsolation(p, env, false)
	for _, v := range vals {
		if !v.OK {
			t.Errorf("%+v differs", v)
		}
	}
	if row.LargestOKMiB != 3900 || row.FirstFailedMiB != 4100 || row.Error != "OutOfMemoryError: CUDA out of memory. Tried to allocate 4100 MiB" ||
		row.MemoryView != "torch.cuda.mem_get_info: total 4000 MiB, free 4000 MiB (the limit's view)" || p.Limited.Rate == nil || p.Limited.Rate.Iters == 0 {
		t.Fatalf("row = %+v; probes %+v", row, p)
	}
	if p.Shared.MemInfo == nil || p.Shared.MemInfo.Free != 1500 {
		t.Fatalf("second client's view = %+v, want 1500 MiB free while the first holds 2500", p.Shared.MemInfo)
	}
	if p.Steps.Libvgpu == nil || len(p.Steps.Libvgpu) != 0 {
		t.Fatalf("libvgpu mapped without a preload: %q", p.Steps.Libvgpu)
	}
	// The devices mode (isolation-2gpu): each GPU's own limit; libvgpu.so is not mapped here
	// (no preload in this test: TestPreloadNamespaceReal maps one), the one difference.
	env = env2GPU()
	d := probe("devices", "--mode", "devices", "--device-steps", twoGPUPlan())
	vals, rows := eval2GPU(d, env, [2]string{testUUID, testUUID2})
	var bad []string
	for _, v := range vals {
		if !v.OK {
			bad = append(bad, v.What)
		}
	}
	if strings.Join(bad, "|") != "devices client: libvgpu.so mapped in the process (/proc/self/maps)" || d.DeviceCount != 2 ||
		rows[0].LargestOKMiB != 2000 || rows[0].FirstFailedMiB != 3100 || rows[1].LargestOKMiB != 4000 || rows[1].FirstFailedMiB != 5100 ||
		rows[1].MemoryView != "torch.cuda.mem_get_info: total 5000 MiB, free 5000 MiB (the limit's view)" {
		t.Fatalf("devices: differing %q, rows %+v, probe %+v", bad, rows, d)
	}
}
