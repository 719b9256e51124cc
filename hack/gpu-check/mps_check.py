#!/usr/bin/env python3
"""One MPS client of hami-go's real-GPU check (hack/gpu-check/README.md).

Sets the env the device plugin's Allocate produced (a JSON object in --env) before CUDA starts,
then either allocates --within-mib and --beyond-mib of device memory (mode alloc) or measures the
bf16 matmul rate for --seconds (mode rate). Writes one JSON object to --out; never raises.
"""
import argparse
import json
import os
import sys
import time
import traceback

MIB = 1 << 20


def try_alloc(torch, mib):
    try:
        x = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        del x
        torch.cuda.empty_cache()
        return {"mib": mib, "ok": True}
    except Exception as e:  # torch.cuda.OutOfMemoryError or a CUDA error
        torch.cuda.empty_cache()
        return {"mib": mib, "ok": False, "error": (type(e).__name__ + ": " + str(e))[:600]}


def rate(torch, seconds, n=8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    iters, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds and iters < 100000:
        for _ in range(5):
            a @ b
        torch.cuda.synchronize()
        iters += 5
    el = time.perf_counter() - start
    return {"n": n, "iters": iters, "seconds": round(el, 3), "tflops": round(2 * n**3 * iters / el / 1e12, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", required=True)
    ap.add_argument("--mode", choices=["alloc", "rate"], required=True)
    ap.add_argument("--threads", default="", help="override CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    ap.add_argument("--within-mib", type=int, default=3000)
    ap.add_argument("--beyond-mib", type=int, default=6000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res = {"mode": a.mode}
    try:
        with open(a.env) as f:
            for k, v in json.load(f).items():
                os.environ[k] = v
        # The Allocate env names the slice's GPUs in HAMI_GO_GPU_UUIDS and sets no
        # CUDA_VISIBLE_DEVICES (a container sees only its own GPUs); on this host the client is
        # pinned to them as the container runtime would (MPS clients are not HAMi-core's, so
        # CUDA's UUID form is read right).
        if os.environ.get("HAMI_GO_GPU_UUIDS") and not os.environ.get("CUDA_VISIBLE_DEVICES"):
            os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["HAMI_GO_GPU_UUIDS"]
        if a.threads:
            os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = a.threads
        res["env"] = {k: os.environ.get(k, "") for k in (
            "HAMI_GO_GPU_UUIDS", "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}
        import torch
        res["torch"] = torch.__version__
        res["device"] = torch.cuda.get_device_name(0)
        free, total = torch.cuda.mem_get_info()
        res["memGetInfoMiB"] = {"free": free // MIB, "total": total // MIB}
        if a.mode == "alloc":
            res["within"] = try_alloc(torch, a.within_mib)
            res["beyond"] = try_alloc(torch, a.beyond_mib)
        else:
            res["rate"] = rate(torch, a.seconds)
    except Exception:
        res["error"] = traceback.format_exc()[-1500:]
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
