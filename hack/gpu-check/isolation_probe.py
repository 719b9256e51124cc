#!/usr/bin/env python3
"""One client of hami-go's isolation checks (hack/gpu-check/README.md, isolation).

Runs with the env gpucheck gives it at exec (the slice env of pkg/gpuenv: HAMi-core's limits, with
libvgpu.so preloaded through /etc/ld.so.preload in a private mount namespace or LD_PRELOAD, or the MPS
client limits); it sets nothing itself. Every output names the libvgpu files mapped in the process
(/proc/self/maps) and its /etc/ld.so.preload. Modes:
  steps   allocate each of --steps MiB in turn (freeing each), e.g. 1000,2000,3000,3900,4100,5000
  shared  start a second client (mode hold) that allocates and holds --mib, then allocate --mib here
  hold    allocate --mib, print "ready" (or "failed: ...") and hold it until stdin closes
  rate    bf16 matmul rate over --seconds (a compute-bound loop)
  devices on each CUDA device of --device-steps ("0:2000,3100;1:4000,5100"), allocate each MiB in turn
Every mode but hold writes one JSON object to --out; never raises.
"""
import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import traceback

MIB = 1 << 20
ENV_KEYS = (
    "HAMI_GO_GPU_UUIDS", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_SM_LIMIT_0",
    "CUDA_DEVICE_MEMORY_LIMIT_1", "CUDA_DEVICE_SM_LIMIT_1", "CUDA_DEVICE_ORDER",
    "CUDA_DEVICE_MEMORY_SHARED_CACHE", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")


def alloc(torch, mib, device="cuda"):
    """Allocates and touches mib MiB; returns the tensor (or None) and the attempt's record."""
    try:
        x = torch.empty(mib * MIB, dtype=torch.uint8, device=device)
        x.fill_(1)
        torch.cuda.synchronize()
        return x, {"mib": mib, "ok": True}
    except Exception as e:  # torch.cuda.OutOfMemoryError or another CUDA error
        torch.cuda.empty_cache()
        return None, {"mib": mib, "ok": False, "error": (type(e).__name__ + ": " + str(e))[:600]}


def mem_view(torch, device=None):
    free, total = torch.cuda.mem_get_info() if device is None else torch.cuda.mem_get_info(device)
    return {"api": "torch.cuda.mem_get_info", "free": free // MIB, "total": total // MIB}


def preload_facts(res):
    """The libvgpu files mapped in this process and its /etc/ld.so.preload."""
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if "libvgpu" in os.path.basename(path) and path not in libs:
                    libs.append(path)
    except OSError:
        pass
    res["libvgpu"] = libs
    try:
        with open("/etc/ld.so.preload") as f:
            res["preloadFile"] = f.read().strip()
    except OSError:
        res["preloadFile"] = ""


def devices(torch, res, plan):
    """plan: "0:2000,3100;1:4000,5100": on each device, each allocation in turn (freed each time)."""
    res["deviceCount"] = torch.cuda.device_count()
    res["devices"] = []
    for part in [p for p in plan.split(";") if p]:
        idx, sizes = part.split(":")
        d = {"device": int(idx), "steps": []}
        res["devices"].append(d)
        try:
            d["name"] = torch.cuda.get_device_name(int(idx))
            d["memGetInfoMiB"] = mem_view(torch, int(idx))
            for mib in [int(s) for s in sizes.split(",") if s]:
                x, rec = alloc(torch, mib, "cuda:%d" % int(idx))
                d["steps"].append(rec)
                del x
                torch.cuda.empty_cache()
        except Exception as e:
            d["error"] = (type(e).__name__ + ": " + str(e))[:600]


def steps(torch, res, sizes):
    res["memGetInfoMiB"] = mem_view(torch)
    res["steps"] = []
    for mib in sizes:
        x, rec = alloc(torch, mib)
        res["steps"].append(rec)
        del x
        torch.cuda.empty_cache()


def shared(res, mib, script, timeout=60):
    """The other client allocates and holds mib, then this one tries mib under the same limit."""
    # The other client's stderr (HAMi-core logs there) goes to a file: a full pipe would stall it.
    errf = tempfile.TemporaryFile()
    child = subprocess.Popen([sys.executable, script, "--mode", "hold", "--mib", str(mib), "--out", "-"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf)
    try:
        import torch  # imported while the other client starts
        res["torch"] = torch.__version__
        line, deadline = b"", time.time() + timeout
        while not line.endswith(b"\n") and time.time() < deadline:
            r, _, _ = select.select([child.stdout], [], [], max(0.0, deadline - time.time()))
            if not r:
                break
            b = os.read(child.stdout.fileno(), 4096)
            if not b:
                break
            line += b
        text = line.decode(errors="replace").strip()
        if text == "ready":
            res["first"] = {"mib": mib, "ok": True}
        else:
            res["first"] = {"mib": mib, "ok": False, "error": text or "no answer within %ds" % timeout}
            return
        res["memGetInfoMiB"] = mem_view(torch)
        x, res["second"] = alloc(torch, mib)
        del x
    finally:
        try:
            child.stdin.close()
            child.wait(timeout=30)
        except Exception:
            child.kill()
        errf.seek(0)
        res["firstStderr"] = errf.read().decode(errors="replace")[-1500:]


def hold(mib):
    try:
        import torch
        x, rec = alloc(torch, mib)
        print("ready" if rec["ok"] else "failed: " + rec["error"].replace("\n", " "), flush=True)
        sys.stdin.read()  # hold until the other client closes stdin
        del x
    except Exception as e:
        print("failed: %s: %s" % (type(e).__name__, str(e).replace("\n", " ")), flush=True)
    return 0


def rate(torch, res, seconds, n=8192):
    res["memGetInfoMiB"] = mem_view(torch)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    iters, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds and iters < 1000000:
        a @ b
        torch.cuda.synchronize()
        iters += 1
    el = time.perf_counter() - start
    res["rate"] = {"n": n, "iters": iters, "seconds": round(el, 3), "tflops": round(2 * n**3 * iters / el / 1e12, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["steps", "shared", "hold", "rate", "devices"], required=True)
    ap.add_argument("--device-steps", default="0:2000,3100;1:4000,5100")
    ap.add_argument("--steps", default="1000,2000,3000,3900,4100,5000")
    ap.add_argument("--mib", type=int, default=2500)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.mode == "hold":
        return hold(a.mib)
    res = {"mode": a.mode, "env": {k: os.environ.get(k, "") for k in ENV_KEYS}}
    preload_facts(res)
    try:
        if a.mode == "shared":
            shared(res, a.mib, os.path.abspath(__file__))
        else:
            import torch
            res["torch"] = torch.__version__
            res["device"] = torch.cuda.get_device_name(0)
            if a.mode == "steps":
                steps(torch, res, [int(s) for s in a.steps.split(",") if s])
            elif a.mode == "devices":
                devices(torch, res, a.device_steps)
            else:
                rate(torch, res, a.seconds)
    except Exception:
        res["error"] = traceback.format_exc()[-1500:]
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
