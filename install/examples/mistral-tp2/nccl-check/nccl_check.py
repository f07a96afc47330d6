"""Before vLLM depends on them: the GPU, the image's CUDA and Triton on the
podVM's driver, and NCCL and Gloo between the two podVMs.

Run by torchrun on both pods (pods.yaml). Each step prints one line; the
last line is the summary, on both ranks:

  NCCL-CHECK PASS rank=R ... floor_ms_per_token=F ...   (exit 0)
  NCCL-CHECK FAIL rank=R step=S: what failed            (exit 1)

What it measures, and why:
  - the driver's version and the CUDA version it supports against the CUDA
    version the image's torch was built for: the same major version runs
    through CUDA minor-version compatibility (Debian's 535 driver supports
    CUDA 12.2; the cu128 image's torch wants 12.8), an older major version
    cannot run at all and the check refuses before anything else;
  - a fp16 FlexAttention forward compiled with torch.compile, as vLLM 0.11
    runs attention on compute capability 7.5 (vllm/v1/attention/backends/
    flex_attention.py): Triton compiles for the GPU through the driver, so
    a driver/CUDA mismatch shows here rather than in vLLM's start-up;
  - small-message all-reduce latency: warmed up, then LATENCY_ITERS
    all-reduces of one decode step's hidden state (hidden_size x 2 bytes,
    10 KiB for Mistral-Nemo), each timed; decode is latency-bound, and the
    p50 times the collectives per token (2 per layer, the embedding's
    all-reduce, the logits' all-gather) is the network floor per token;
  - messages larger than one MTU across the tunnel, before anything is
    timed: UDP datagrams that fill the pod interface's MTU with "don't
    fragment" set, a 4 MiB TCP stream, then NCCL all-reduces of 64 KiB and
    1 MiB, each under its own deadline. An MTU black hole (VXLAN adds 50
    bytes; a 1460-byte VPC drops 1500-byte packets) lets NCCL's
    initialisation through and stalls these: the check fails with the
    step and what to change instead of hanging;
  - large-message bus bandwidth after a warm-up;
  - one Gloo all-reduce (vLLM's CPU-side group).

`python3 nccl_check.py --dry-run` runs every step with simulated timings
and no torch, to check the script itself; `--dry-run-fail STEP` makes that
step fail.
"""

import argparse
import datetime
import math
import os
import statistics
import sys
import threading
import time

STEPS = ("device", "versions", "kernel", "flex_attention", "init", "mtu", "warmup", "latency", "bandwidth", "gloo")
# Larger than one MTU, in all-reduce payloads (fp16 elements x 2 bytes).
MTU_ALLREDUCE_SIZES = (64 << 10, 1 << 20)
# The TCP probe's stream: thousands of full-size segments.
MTU_TCP_BYTES = 4 << 20
# The probe's port on rank 0, next to torchrun's rendezvous (29500).
MTU_PROBE_PORT = 29501
# CUDA minor-version compatibility: a driver of the same major CUDA
# version runs newer-minor applications from this driver version on
# (NVIDIA's CUDA compatibility guide: CUDA 12.x needs >= 525.60.13 on
# Linux); PTX newer than the driver cannot be JIT-compiled.
MINOR_COMPAT_MIN_DRIVER = {12: (525, 60, 13), 13: (580, 0, 0)}

MTU_HINT = ("hint: packets larger than the path MTU are being dropped. In a podVM the pod interface is a VXLAN "
            "tunnel (MTU 1450) and VXLAN adds 50 bytes, so full-size packets are 1500 bytes on the VPC: its MTU "
            "must be at least 1500 (gcloud compute networks describe NETWORK --format='value(mtu)'; gcp-t4 "
            "preflight checks it), and udp:4789 must pass both ways between nodes and podVMs")
# From below one packet to far above NCCL's buffers.
BANDWIDTH_SIZES = (64 << 10, 16 << 20, 256 << 20)


def env_int(name, default):
    v = os.environ.get(name, "")
    try:
        return int(v) if v else default
    except ValueError:
        raise SystemExit(f"{name}={v!r} is not a whole number")


class Settings:
    """The model the floor is computed for, and the loop sizes; from the
    environment pods.yaml sets (Mistral-Nemo at tensor parallelism 2)."""

    def __init__(self):
        self.rank = env_int("RANK", 0)
        self.world = env_int("WORLD_SIZE", 2)
        self.layers = env_int("MODEL_LAYERS", 40)
        self.hidden = env_int("MODEL_HIDDEN", 5120)
        self.heads = env_int("MODEL_HEADS_PER_RANK", 16)
        self.kv_heads = env_int("MODEL_KV_HEADS_PER_RANK", 4)
        self.head_dim = env_int("MODEL_HEAD_DIM", 128)
        self.latency_iters = env_int("LATENCY_ITERS", 200)
        self.warmup_iters = env_int("WARMUP_ITERS", 20)
        self.bandwidth_iters = env_int("BANDWIDTH_ITERS", 5)
        self.pg_timeout_s = env_int("PG_TIMEOUT_S", 300)
        self.mtu_timeout_s = env_int("MTU_TIMEOUT_S", 60)
        self.ifname = os.environ.get("NCCL_SOCKET_IFNAME", "eth0").lstrip("=^")
        self.master_addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        for name in ("world", "layers", "hidden", "heads", "kv_heads", "head_dim", "latency_iters", "warmup_iters", "bandwidth_iters"):
            if getattr(self, name) < 1:
                raise SystemExit(f"{name} must be at least 1")

    @property
    def latency_bytes(self):
        return self.hidden * 2

    @property
    def collectives_per_token(self):
        # Per decoder layer the all-reduces after o_proj and down_proj
        # (vLLM's RowParallelLinear), the VocabParallelEmbedding all-reduce,
        # the logits all-gather; none on one GPU. gcp-t4 plan serve counts
        # the same (gcp-t4/internal/fit collectivesPerToken).
        return 2 * self.layers + 2 if self.world > 1 else 0


class CheckError(RuntimeError):
    """A failure with what to change, printed on the FAIL line."""

    def __init__(self, msg, hint=""):
        super().__init__(msg)
        self.hint = hint


def parse_driver(v):
    """'535.247.01' -> (535, 247, 1)."""
    parts = [int(x) for x in v.strip().split(".") if x.isdigit()]
    if not parts:
        raise CheckError(f"driver version {v!r} is not a version")
    return tuple(parts + [0] * (3 - len(parts)))[:3]


def check_versions(driver, driver_cuda, torch_cuda):
    """The driver (e.g. '535.247.01'), the CUDA version it supports (from
    cuDriverGetVersion: 12020 for 12.2) and torch.version.cuda ('12.8'):
    returns the line to print and the summary's fields, or raises
    CheckError when the image cannot run on this driver."""
    if not torch_cuda:
        raise CheckError("this torch has no CUDA build", "hint: run the check in the serving image (a cu12x ray-llm tag)")
    dmaj, dmin = driver_cuda // 1000, (driver_cuda % 1000) // 10
    tparts = [int(x) for x in torch_cuda.split(".")[:2]]
    tmaj, tmin = tparts[0], (tparts[1] if len(tparts) > 1 else 0)
    head = f"driver {driver} supports CUDA {dmaj}.{dmin}; torch is built for CUDA {tmaj}.{tmin}"
    fields = f"driver={driver} driver_cuda={dmaj}.{dmin} torch_cuda={tmaj}.{tmin}"
    if (dmaj, dmin) >= (tmaj, tmin):
        return f"{head}: native", fields + " cuda_compat=native"
    need = MINOR_COMPAT_MIN_DRIVER.get(tmaj)
    if dmaj == tmaj and need is not None and parse_driver(driver) >= need:
        return (f"{head}: runs through CUDA minor-version compatibility (driver >= {'.'.join(map(str, need))}); "
                f"PTX newer than CUDA {dmaj}.{dmin} cannot be JIT-compiled, so a kernel shipped only as PTX fails "
                f"(the kernel and flex_attention steps try both paths)"), fields + " cuda_compat=minor-version"
    raise CheckError(f"{head}: incompatible",
                     f"hint: a CUDA {tmaj}.x image needs a driver that supports CUDA {tmaj}"
                     + (f" (>= {'.'.join(map(str, need))})" if need else "")
                     + ": build the podVM image with a newer driver, or use an image built for CUDA "
                     + f"{dmaj}.x")


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        raise ValueError("no samples")
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def latency_summary(seconds):
    us = sorted(s * 1e6 for s in seconds)
    return {
        "p50": statistics.median(us),
        "p90": percentile(us, 90),
        "p99": percentile(us, 99),
        "max": us[-1],
        "mean": statistics.fmean(us),
    }


def floor_ms_per_token(p50_us, collectives):
    return p50_us * collectives / 1000.0


def bus_bandwidth(nbytes, seconds, world):
    # NCCL's bus bandwidth for all-reduce (nccl-tests doc/PERFORMANCE.md):
    # algbw x 2(n-1)/n.
    return nbytes / seconds * 2 * (world - 1) / world


def read_mtu(ifname):
    try:
        with open(f"/sys/class/net/{ifname}/mtu") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 1450


def stall_exit(s, what, done):
    """A collective that stalls blocks in NCCL until the process-group
    timeout, and the watchdog then kills the process without a summary:
    print the FAIL line with the hint first."""
    if done.is_set():
        return
    print(f"NCCL-CHECK FAIL rank={s.rank} step=mtu: {what} {MTU_HINT}", flush=True)
    os._exit(1)


def socket_probe(s, mtu):
    """Rank 0 echoes, rank 1 sends: UDP datagrams of 1200 bytes and of the
    interface MTU (IP and UDP headers included, "don't fragment" set), then
    a TCP stream of MTU_TCP_BYTES acknowledged by its byte count. Both
    ranks learn the outcome through the process group."""
    import socket
    import struct

    import torch
    import torch.distributed as dist

    deadline = s.mtu_timeout_s
    # An IPv4 datagram is at most 65535 bytes (loopback's MTU is larger).
    sizes = (1200, min(mtu, 65535))
    result = {"ok": True, "msg": ""}

    def server():
        try:
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u.bind(("0.0.0.0", MTU_PROBE_PORT))
            u.settimeout(deadline)
            t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            t.bind(("0.0.0.0", MTU_PROBE_PORT))
            t.listen(1)
            t.settimeout(deadline)
            ready.set()
            c, _ = t.accept()
            c.settimeout(deadline)
            got = 0
            while got < MTU_TCP_BYTES:
                chunk = c.recv(1 << 16)
                if not chunk:
                    break
                got += len(chunk)
            c.sendall(struct.pack("!Q", got))
            c.close()
            t.close()
            u.close()
        except OSError as e:
            result.update(ok=False, msg=f"probe server: {e}")
            ready.set()

    def udp_echo():
        try:
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u.bind(("0.0.0.0", MTU_PROBE_PORT + 1))
            u.settimeout(deadline)
            for _ in range(len(sizes) * 3):
                data, peer = u.recvfrom(1 << 16)
                u.sendto(data[:8], peer)
        except OSError:
            pass

    ready = threading.Event()
    threads = []
    if s.rank == 0:
        # The echo thread ends on its own socket timeout; only the TCP
        # server is waited for.
        threading.Thread(target=udp_echo, daemon=True).start()
        threads = [threading.Thread(target=server, daemon=True)]
        threads[0].start()
        ready.wait(deadline)
    dist.barrier()
    lines = []
    if s.rank == 1:
        try:
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            # IP_MTU_DISCOVER = 10, IP_PMTUDISC_DO = 2: set DF, never fragment.
            u.setsockopt(socket.IPPROTO_IP, 10, 2)
            u.settimeout(3)
            for size in sizes:
                payload = size - 28  # IPv4 20 + UDP 8
                echoed = False
                for _ in range(3):
                    try:
                        u.sendto(b"x" * payload, (s.master_addr, MTU_PROBE_PORT + 1))
                        u.recvfrom(64)
                        echoed = True
                        break
                    except socket.timeout:
                        continue
                if not echoed:
                    raise CheckError(f"UDP datagrams of {size} bytes (DF set) to {s.master_addr} got no echo; {sizes[0]}-byte ones "
                                     + ("did" if size != sizes[0] else "did not either"), MTU_HINT)
                lines.append(f"UDP {size} B echoed")
            t = socket.create_connection((s.master_addr, MTU_PROBE_PORT), timeout=deadline)
            t.settimeout(deadline)
            start = time.monotonic()
            t.sendall(b"\0" * MTU_TCP_BYTES)
            t.shutdown(socket.SHUT_WR)
            got = struct.unpack("!Q", t.recv(8).ljust(8, b"\0"))[0]
            t.close()
            if got != MTU_TCP_BYTES:
                raise CheckError(f"TCP stream: {got} of {MTU_TCP_BYTES} bytes arrived", MTU_HINT)
            lines.append(f"TCP {MTU_TCP_BYTES} B in {(time.monotonic() - start) * 1e3:.0f} ms")
        except CheckError as e:
            result.update(ok=False, msg=str(e))
        except OSError as e:
            result.update(ok=False, msg=f"TCP stream of {MTU_TCP_BYTES} B to {s.master_addr}:{MTU_PROBE_PORT}: {e}")
    for th in threads:
        th.join(deadline)
    # Both ranks fail together: a stalled rank 1 must not leave rank 0 passing.
    flag = torch.tensor([0 if result["ok"] else 1], dtype=torch.int32, device="cuda")
    dist.all_reduce(flag)
    if int(flag.item()) != 0:
        raise CheckError(result["msg"] or "the peer's socket probe failed (see its FAIL line)", MTU_HINT)
    return ", ".join(lines) if lines else f"socket probe served for rank 1 on port {MTU_PROBE_PORT}"


class TorchBackend:
    """The real thing: CUDA, Triton through torch.compile, NCCL, Gloo."""

    def __init__(self, s):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.s = torch, dist, s
        self.dev = self.step = None

    def device(self):
        t = self.torch
        if not t.cuda.is_available():
            raise RuntimeError("no CUDA device: check the podVM's CAA-GCP-T4-GPU line and the CDI spec")
        self.dev = t.device("cuda", 0)
        cap = t.cuda.get_device_capability(self.dev)
        nccl = t.cuda.nccl.version()
        nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        return (f"{t.cuda.get_device_name(self.dev)}, compute capability {cap[0]}.{cap[1]}, torch {t.__version__}, "
                f"CUDA {t.version.cuda}, NCCL {nccl}")

    def versions(self):
        import ctypes

        try:
            cuda = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise CheckError(f"libcuda.so.1: {e}", "hint: the driver's user-space libraries are not in the container: check the CDI spec gpu-init wrote")
        v = ctypes.c_int()
        if cuda.cuDriverGetVersion(ctypes.byref(v)) != 0:
            raise CheckError("cuDriverGetVersion failed")
        driver = "unknown"
        try:
            with open("/proc/driver/nvidia/version") as f:
                for word in f.readline().split():
                    if word[:1].isdigit() and "." in word:
                        driver = word
                        break
        except OSError:
            pass
        if driver == "unknown":
            import subprocess

            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.split("\n")[0].strip() or "unknown"
        return check_versions(driver, v.value, self.torch.version.cuda)

    def kernel(self):
        t = self.torch
        x = t.randn(1024, 1024, device=self.dev, dtype=t.float16)
        y = float((x @ x).float().abs().mean())
        t.cuda.synchronize()
        return f"fp16 matmul ok ({y:.3f})"

    def flex_attention(self):
        # vLLM's call: torch.compile(flex_attention, fullgraph=True) with
        # kernel_options FORCE_USE_FLEX_ATTENTION and BLOCK_M/N 64, halved
        # when the GPU's opt-in shared memory is under 144 KiB (a T4 has
        # 64 KiB), GQA on (get_kernel_options, FlexAttentionImpl.forward).
        t = self.torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        import torch.nn.functional as F

        s = self.s
        block = 64
        if t.cuda.get_device_properties(self.dev).shared_memory_per_block_optin < 144 * 1024:
            block //= 2
        options = {"FORCE_USE_FLEX_ATTENTION": True, "BLOCK_M": block, "BLOCK_N": block}
        seq = 256
        q = t.randn(1, s.heads, seq, s.head_dim, device=self.dev, dtype=t.float16)
        k = t.randn(1, s.kv_heads, seq, s.head_dim, device=self.dev, dtype=t.float16)
        v = t.randn(1, s.kv_heads, seq, s.head_dim, device=self.dev, dtype=t.float16)
        mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, B=None, H=None, Q_LEN=seq, KV_LEN=seq, device=self.dev)
        compiled = t.compile(flex_attention, fullgraph=True)
        start = time.monotonic()
        out = compiled(q, k, v, block_mask=mask, enable_gqa=True, kernel_options=options)
        t.cuda.synchronize()
        compile_s = time.monotonic() - start
        rep = s.heads // s.kv_heads
        ref = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)
        err = float((out.float() - ref.float()).abs().max())
        if not err < 2e-2:
            raise RuntimeError(f"FlexAttention differs from SDPA by {err:.4f}")
        return compile_s, f"fp16 FlexAttention (BLOCK {block}, {s.heads}/{s.kv_heads} heads, head_dim {s.head_dim}) compiled and ran in {compile_s:.1f} s, max |diff| {err:.4f}"

    def init(self):
        self.dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=self.s.pg_timeout_s), device_id=self.dev)
        return f"NCCL process group of {self.dist.get_world_size()}"

    def mtu(self):
        """UDP datagrams filling the interface MTU with DF set, a TCP
        stream, then all-reduces above one MTU; each under a deadline."""
        s = self.s
        mtu = read_mtu(s.ifname)
        lines = []
        if s.world == 2:
            lines.append(socket_probe(s, mtu))
        for nbytes in MTU_ALLREDUCE_SIZES:
            done = threading.Event()
            watchdog = threading.Timer(s.mtu_timeout_s, stall_exit, (s, f"all_reduce of {nbytes} B did not finish in {s.mtu_timeout_s} s", done))
            watchdog.daemon = True
            watchdog.start()
            try:
                sec = self._all_reduce(nbytes)
            finally:
                done.set()
                watchdog.cancel()
            lines.append(f"all_reduce {nbytes} B in {sec * 1e3:.1f} ms")
        return f"{s.ifname} MTU {mtu}; " + "; ".join(lines)

    def _all_reduce(self, nbytes):
        t = self.torch
        x = t.ones(nbytes // 2, dtype=t.float16, device=self.dev)
        t.cuda.synchronize()
        start = time.perf_counter()
        self.dist.all_reduce(x)
        t.cuda.synchronize()
        sec = time.perf_counter() - start
        if float(x[0]) != self.s.world or float(x[-1]) != self.s.world:
            raise RuntimeError(f"all_reduce of {nbytes} B gave {float(x[0])}, want {self.s.world}")
        return sec

    def all_reduce(self, nbytes, iters):
        return [self._all_reduce(nbytes) for _ in range(iters)]

    def gloo(self):
        t = self.torch
        g = self.dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.s.pg_timeout_s))
        c = t.ones(1 << 20)
        self.dist.all_reduce(c, group=g)
        if float(c[0]) != self.s.world:
            raise RuntimeError(f"gloo all_reduce gave {float(c[0])}, want {self.s.world}")
        return "gloo all_reduce of 4 MiB ok"

    def close(self):
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


class FakeBackend:
    """--dry-run: the same calls with simulated timings (deterministic)."""

    def __init__(self, s, fail, versions_in=("570.195.03", 12080, "12.8")):
        self.s, self.fail, self.n, self.step = s, fail, 0, None
        self.versions_in = versions_in

    def _maybe_fail(self):
        if self.fail == self.step:
            raise RuntimeError(f"simulated failure of {self.step}")

    def device(self):
        self._maybe_fail()
        return "simulated T4, compute capability 7.5"

    def versions(self):
        self._maybe_fail()
        driver, driver_cuda, torch_cuda = self.versions_in
        return check_versions(driver, driver_cuda, torch_cuda)

    def mtu(self):
        if self.fail == self.step:
            raise CheckError(f"simulated: UDP datagrams of 1450 bytes (DF set) to {self.s.master_addr} got no echo", MTU_HINT)
        return f"simulated {self.s.ifname} MTU 1450; UDP 1200 B echoed, UDP 1450 B echoed, TCP {MTU_TCP_BYTES} B"

    def kernel(self):
        self._maybe_fail()
        return "simulated fp16 matmul ok"

    def flex_attention(self):
        self._maybe_fail()
        return 42.0, "simulated FlexAttention compile 42.0 s"

    def init(self):
        self._maybe_fail()
        return f"simulated process group of {self.s.world}"

    def all_reduce(self, nbytes, iters):
        self._maybe_fail()
        out = []
        for _ in range(iters):
            self.n += 1
            # 250 us plus 1 GB/s, with a deterministic 0-9 us spread.
            out.append(250e-6 + (self.n % 10) * 1e-6 + nbytes / 1e9)
        return out

    def gloo(self):
        self._maybe_fail()
        return "simulated gloo all_reduce ok"

    def close(self):
        pass


def run(backend, s, out=print):
    """Runs the steps; returns the summary line and the exit status."""
    step = None

    def enter(name):
        nonlocal step
        step = backend.step = name

    def log(msg):
        out(f"rank {s.rank}: {msg}", flush=True)

    try:
        enter("device")
        log(backend.device())
        enter("versions")
        line, versions = backend.versions()
        log(line)
        enter("kernel")
        log(backend.kernel())
        enter("flex_attention")
        compile_s, line = backend.flex_attention()
        log(line)
        enter("init")
        log(backend.init())
        enter("mtu")
        log(backend.mtu())
        enter("warmup")
        backend.all_reduce(s.latency_bytes, s.warmup_iters)
        for nbytes in BANDWIDTH_SIZES:
            backend.all_reduce(nbytes, 2)
        log(f"warm-up: {s.warmup_iters} x {s.latency_bytes} B, 2 x each bandwidth size")
        enter("latency")
        lat = latency_summary(backend.all_reduce(s.latency_bytes, s.latency_iters))
        floor = floor_ms_per_token(lat["p50"], s.collectives_per_token)
        log(f"all_reduce {s.latency_bytes} B x {s.latency_iters}: p50 {lat['p50']:.0f} us, p90 {lat['p90']:.0f} us, "
            f"p99 {lat['p99']:.0f} us, max {lat['max']:.0f} us")
        log(f"network floor: {s.collectives_per_token} collectives per token (2 x {s.layers} layers + 2) x {lat['p50']:.0f} us "
            f"= {floor:.1f} ms per token")
        enter("bandwidth")
        busbw = {}
        for nbytes in BANDWIDTH_SIZES:
            med = statistics.median(backend.all_reduce(nbytes, s.bandwidth_iters))
            busbw[nbytes] = bus_bandwidth(nbytes, med, s.world)
            log(f"all_reduce {nbytes} B x {s.bandwidth_iters}: median {med * 1e3:.2f} ms, bus bandwidth {busbw[nbytes] / 1e9:.2f} GB/s")
        enter("gloo")
        log(backend.gloo())
    except Exception as e:  # noqa: BLE001 - every failure becomes the summary
        summary = f"NCCL-CHECK FAIL rank={s.rank} step={step}: {type(e).__name__}: {e}"
        if getattr(e, "hint", ""):
            summary += " " + e.hint
        out(summary, flush=True)
        return summary, 1
    finally:
        backend.close()
    bw16 = busbw[16 << 20] / 1e9
    summary = (f"NCCL-CHECK PASS rank={s.rank} world={s.world} allreduce_{s.latency_bytes}B_p50_us={lat['p50']:.0f} "
               f"p90_us={lat['p90']:.0f} floor_ms_per_token={floor:.1f} collectives_per_token={s.collectives_per_token} "
               f"busbw_16MiB_GBps={bw16:.2f} flex_compile_s={compile_s:.1f} {versions} mtu_probe=ok "
               f"plan_flags=\"--nccl-latency {lat['p50']:.0f}us --nccl-bandwidth {bw16:.2f}GB/s\"")
    out(summary, flush=True)
    return summary, 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="simulated timings, no torch: checks the script itself")
    p.add_argument("--dry-run-fail", choices=STEPS, help="with --dry-run: make this step fail")
    p.add_argument("--dry-run-versions", metavar="DRIVER:DRIVER_CUDA:TORCH_CUDA",
                   help="with --dry-run: the versions step's inputs, e.g. 535.247.01:12020:12.8")
    a = p.parse_args(argv)
    s = Settings()
    if a.dry_run_fail and not a.dry_run:
        p.error("--dry-run-fail needs --dry-run")
    if a.dry_run_versions and not a.dry_run:
        p.error("--dry-run-versions needs --dry-run")
    if a.dry_run:
        versions_in = ("570.195.03", 12080, "12.8")
        if a.dry_run_versions:
            try:
                d, dc, tc = a.dry_run_versions.split(":")
                versions_in = (d, int(dc), tc)
            except ValueError:
                p.error("--dry-run-versions: want DRIVER:DRIVER_CUDA:TORCH_CUDA, e.g. 535.247.01:12020:12.8")
        backend = FakeBackend(s, a.dry_run_fail, versions_in)
    else:
        try:
            backend = TorchBackend(s)
        except ImportError as e:
            print(f"NCCL-CHECK FAIL rank={s.rank} step=device: {e}: run it in the serving image", flush=True)
            return 1
    _, rc = run(backend, s)
    return rc


if __name__ == "__main__":
    sys.exit(main())
