"""NCCL and Gloo between the two podVMs, before vLLM depends on them.

Run by torchrun on both pods. Prints one line per step and ends with
NCCL-CHECK OK, or exits non-zero naming what failed. An MTU black hole on
the VXLAN path lets the small all-reduces through and stalls the large
ones, so the sizes run from below one packet to far above NCCL's buffers;
the process-group timeout turns a stall into an error.
"""

import datetime
import os
import time

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if not torch.cuda.is_available():
        raise SystemExit(f"rank {rank}: no CUDA device: check the podVM's CAA-GCP-T4-GPU line and the CDI spec")
    dev = torch.device("cuda", 0)
    print(f"rank {rank}: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, NCCL {torch.cuda.nccl.version()}", flush=True)
    # A kernel launch proves the image's CUDA runs on the podVM's driver.
    x = torch.randn(1024, 1024, device=dev, dtype=torch.float16)
    torch.cuda.synchronize()
    print(f"rank {rank}: matmul ok ({float((x @ x).float().abs().mean()):.3f})", flush=True)

    timeout = datetime.timedelta(minutes=3)
    dist.init_process_group("nccl", timeout=timeout, device_id=dev)
    for size in (256, 64 << 10, 16 << 20, 256 << 20):
        t = torch.ones(size // 2, dtype=torch.float16, device=dev)
        torch.cuda.synchronize()
        start = time.monotonic()
        dist.all_reduce(t)
        torch.cuda.synchronize()
        sec = time.monotonic() - start
        if float(t[0]) != world:
            raise SystemExit(f"rank {rank}: all_reduce of {size} B gave {float(t[0])}, want {world}")
        busbw = 2 * (world - 1) / world * size / sec / 1e9
        print(f"rank {rank}: nccl all_reduce {size} B: {sec * 1e3:.1f} ms, bus bandwidth {busbw:.2f} GB/s", flush=True)

    gloo = dist.new_group(backend="gloo", timeout=timeout)
    c = torch.ones(1 << 20)
    dist.all_reduce(c, group=gloo)
    if float(c[0]) != world:
        raise SystemExit(f"rank {rank}: gloo all_reduce gave {float(c[0])}, want {world}")
    print(f"rank {rank}: gloo all_reduce ok", flush=True)
    dist.destroy_process_group()
    print(f"rank {rank}: NCCL-CHECK OK", flush=True)


if __name__ == "__main__":
    main()
