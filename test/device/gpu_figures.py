"""The GPU figures `gcp-t4 plan serve` and the serving runbook assume, measured
on whatever NVIDIA GPU this machine has, with nothing but the driver:
libcuda through ctypes (no torch, no CUDA toolkit, no network needed).

  - the CUDA driver's version and the CUDA version it supports;
  - the memory a bare CUDA context takes (nvidia-smi's used memory with and
    without this process's context; plan serve's --cuda-context-memory
    assumes 0.5 GiB for context and NCCL together);
  - the device-to-device copy bandwidth reached (cuMemcpyDtoD of a large
    buffer, read + write counted, timed with CUDA events), against the data
    sheet's peak where this script knows it (plan serve's
    --memory-bandwidth assumes 75 % of peak for a T4).

Writes one JSON object to --out and prints it. `--self-test` checks the
arithmetic without a GPU.
"""

import argparse
import ctypes
import json
import subprocess
import sys
import time

# Data-sheet peak memory bandwidth, bytes per second, by the name CUDA
# reports (NVIDIA's T4 and H200 data sheets).
PEAK_BANDWIDTH = {"Tesla T4": 320e9, "NVIDIA H200": 4.8e12}
# CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR (cuda.h).
CC_MAJOR, CC_MINOR = 75, 76


class CUDAError(RuntimeError):
    pass


def copy_bandwidth(nbytes, seconds):
    """A device-to-device copy reads and writes every byte once."""
    return 2 * nbytes / seconds


def plan_flags(bandwidth, context_bytes):
    return f"--memory-bandwidth {bandwidth / 1e9:.0f}GB/s --cuda-context-memory {context_bytes / (1 << 20):.0f}MiB"


class Driver:
    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise CUDAError(f"libcuda.so.1: {e}: no NVIDIA driver here") from e

    def call(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(msg))
            raise CUDAError(f"{name}: error {rc} {msg.value.decode() if msg.value else ''}")


def smi_used_mib(index):
    out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60)
    return int(out.stdout.strip().splitlines()[0])


def measure(device_index, buffer_bytes, iters):
    d = Driver()
    d.call("cuInit", 0)
    v = ctypes.c_int()
    d.call("cuDriverGetVersion", ctypes.byref(v))
    dev = ctypes.c_int()
    d.call("cuDeviceGet", ctypes.byref(dev), device_index)
    name = ctypes.create_string_buffer(256)
    d.call("cuDeviceGetName", name, 256, dev)
    total = ctypes.c_size_t()
    d.call("cuDeviceTotalMem_v2", ctypes.byref(total), dev)
    major, minor = ctypes.c_int(), ctypes.c_int()
    d.call("cuDeviceGetAttribute", ctypes.byref(major), CC_MAJOR, dev)
    d.call("cuDeviceGetAttribute", ctypes.byref(minor), CC_MINOR, dev)
    before = smi_used_mib(device_index)
    ctx = ctypes.c_void_p()
    d.call("cuCtxCreate_v2", ctypes.byref(ctx), 0, dev)
    # nvidia-smi updates its figure asynchronously; a second read settles.
    time.sleep(1)
    after = smi_used_mib(device_index)
    nbytes = min(buffer_bytes, total.value // 4)
    src, dst = ctypes.c_uint64(), ctypes.c_uint64()
    d.call("cuMemAlloc_v2", ctypes.byref(src), ctypes.c_size_t(nbytes))
    d.call("cuMemAlloc_v2", ctypes.byref(dst), ctypes.c_size_t(nbytes))
    start, stop = ctypes.c_void_p(), ctypes.c_void_p()
    d.call("cuEventCreate", ctypes.byref(start), 0)
    d.call("cuEventCreate", ctypes.byref(stop), 0)
    for _ in range(3):
        d.call("cuMemcpyDtoD_v2", dst, src, ctypes.c_size_t(nbytes))
    d.call("cuCtxSynchronize")
    d.call("cuEventRecord", start, None)
    for _ in range(iters):
        d.call("cuMemcpyDtoD_v2", dst, src, ctypes.c_size_t(nbytes))
    d.call("cuEventRecord", stop, None)
    d.call("cuEventSynchronize", stop)
    ms = ctypes.c_float()
    d.call("cuEventElapsedTime", ctypes.byref(ms), start, stop)
    seconds = ms.value / 1000 / iters
    bw = copy_bandwidth(nbytes, seconds)
    d.call("cuMemFree_v2", src)
    d.call("cuMemFree_v2", dst)
    d.call("cuCtxDestroy_v2", ctx)
    gpu = name.value.decode()
    context = (after - before) << 20
    peak = PEAK_BANDWIDTH.get(gpu)
    return {
        "gpu": gpu,
        "compute_capability": f"{major.value}.{minor.value}",
        "total_memory_bytes": total.value,
        "driver_cuda": f"{v.value // 1000}.{(v.value % 1000) // 10}",
        "cuda_context_bytes": context,
        "copy_buffer_bytes": nbytes,
        "copy_bandwidth_bytes_per_s": bw,
        "peak_bandwidth_bytes_per_s": peak,
        "bandwidth_fraction_of_peak": (bw / peak) if peak else None,
        "plan_flags": plan_flags(bw, context),
        "note": "the plan serve flags apply to a T4 only" if gpu != "Tesla T4" else "",
    }


def self_test():
    assert copy_bandwidth(1 << 30, 0.01) == 2 * (1 << 30) / 0.01
    assert plan_flags(240e9, 300 << 20) == "--memory-bandwidth 240GB/s --cuda-context-memory 300MiB"
    print("gpu_figures self-test ok")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the figures as JSON here")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--buffer-bytes", type=int, default=1 << 30)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args(argv)
    if a.self_test:
        return self_test()
    try:
        figures = measure(a.device, a.buffer_bytes, a.iters)
    except (CUDAError, OSError, subprocess.SubprocessError, IndexError, ValueError) as e:
        print(f"GPU-FIGURES FAIL: {e}", flush=True)
        return 1
    text = json.dumps(figures, indent=2)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    print(f"GPU-FIGURES PASS gpu={figures['gpu']!r} copy_GBps={figures['copy_bandwidth_bytes_per_s'] / 1e9:.0f} "
          f"context_MiB={figures['cuda_context_bytes'] >> 20} plan_flags=\"{figures['plan_flags']}\"", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
