package main

import (
	"os"
	"os/exec"
	"path/filepath"
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

def _add(mib):
    with open(STATE, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        held = int(f.read() or 0)
        if held + mib > LIMIT:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d MiB" % mib)
        f.seek(0)
        f.truncate()
        f.write(str(held + mib))
    return held + mib

class _T:
    def __init__(self, mib):
        self.mib = _add(mib) and mib
    def fill_(self, v):
        return self
    def __matmul__(self, o):
        return self
    def __del__(self):
        _add(-self.mib)

def empty(n, dtype=None, device=None):
    return _T(n >> 20)

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
    def mem_get_info():
        held = _add(0)
        return (LIMIT - held) << 20, LIMIT << 20
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
}
