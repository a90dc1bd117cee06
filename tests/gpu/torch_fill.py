# SPDX-License-Identifier: MIT
"""torch_fill.py: PyTorch workloads for run-all.sh (its allocator is chosen
by PYTORCH_CUDA_ALLOC_CONF, set by the caller).

    python3 torch_fill.py fill CHUNK_MIB HOLD_MS [SLACK_MIB]
        optional slack: a SLACK_MIB tensor made and freed first (it stays in
        the caching allocator or in cudaMallocAsync's pool); then tensors of
        CHUNK_MIB until torch.cuda.OutOfMemoryError; then, outside
        PyTorch's allocator, cudaMalloc (libcudart through ctypes) of
        CHUNK_MIB until refused. Prints
        "torch held H raw R reserved V physical P charged C".
    python3 torch_fill.py view
        "torch_total T torch_free F" (get_device_properties, mem_get_info)
physical: the device's used memory from the meter (GPUCHECK_METER, run
without LD_PRELOAD) minus what it was before CUDA started; charged:
total - free of torch.cuda.mem_get_info (the shim's view under the shim).
"""
import ctypes
import os
import subprocess
import sys
import time

MIB = 1 << 20


def outside():
    meter = os.environ.get("GPUCHECK_METER")
    if not meter:
        return -1
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([meter, "once", str(os.getpid())], env=env,
                         capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        if line.startswith("used "):
            return int(line.split()[1])
    return -1


def cudart():
    """The libcudart PyTorch loaded (so the same runtime and context)."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "libcudart.so" in path:
                return ctypes.CDLL(path)
    try:
        return ctypes.CDLL("libcudart.so")
    except OSError:
        return None


def main(argv):
    base = outside()
    import torch
    if len(argv) > 1 and argv[1] == "view":
        free, _ = torch.cuda.mem_get_info()
        print("torch_total", torch.cuda.get_device_properties(0).total_memory,
              "torch_free", free)
        return 0
    if len(argv) < 4 or argv[1] != "fill":
        print(__doc__, file=sys.stderr)
        return 2
    chunk, hold = int(argv[2]) * MIB, int(argv[3]) / 1000
    slack = int(argv[4]) * MIB if len(argv) > 4 else 0
    torch.zeros(1, device="cuda")
    if slack:
        t = torch.empty(slack, dtype=torch.uint8, device="cuda")
        del t
        torch.cuda.synchronize()
    xs = []
    oom = 0
    try:
        while True:
            xs.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError:
        oom = 1
    raw, lib = 0, cudart()
    if lib is not None:
        p = ctypes.c_void_p()
        while lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(chunk)) == 0:
            raw += chunk
        lib.cudaGetLastError()
    free, total = torch.cuda.mem_get_info()
    used = outside()
    print("torch held", len(xs) * chunk, "raw", raw, "reserved",
          torch.cuda.memory_reserved(), "oom", oom,
          "physical", used - base if used >= 0 and base >= 0 else -1,
          "charged", total - free, flush=True)
    time.sleep(hold)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
