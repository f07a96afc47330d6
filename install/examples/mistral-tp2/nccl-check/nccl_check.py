"""Before vLLM depends on them: the GPU, the image's CUDA and Triton on the
podVM's driver, and NCCL and Gloo between the two podVMs.

Run by torchrun on both pods (pods.yaml). Each step prints one line; the
last line is the summary, on both ranks:

  NCCL-CHECK PASS rank=R ... floor_ms_per_token=F ...   (exit 0)
  NCCL-CHECK FAIL rank=R step=S: what failed            (exit 1)

What it measures, and why:
  - a fp16 FlexAttention forward compiled with torch.compile, as vLLM 0.11
    runs attention on compute capability 7.5 (vllm/v1/attention/backends/
    flex_attention.py): Triton compiles for the GPU through the driver, so
    a driver/CUDA mismatch shows here rather than in vLLM's start-up;
  - small-message all-reduce latency: warmed up, then LATENCY_ITERS
    all-reduces of one decode step's hidden state (hidden_size x 2 bytes,
    10 KiB for Mistral-Nemo), each timed; decode is latency-bound, and the
    p50 times the collectives per token (2 per layer, the embedding's
    all-reduce, the logits' all-gather) is the network floor per token;
  - large-message bus bandwidth after a warm-up (an MTU black hole lets
    the small messages through and stalls these; the process-group
    timeout turns a stall into an error);
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
import time

STEPS = ("device", "kernel", "flex_attention", "init", "warmup", "latency", "bandwidth", "gloo")
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

    def __init__(self, s, fail):
        self.s, self.fail, self.n, self.step = s, fail, 0, None

    def _maybe_fail(self):
        if self.fail == self.step:
            raise RuntimeError(f"simulated failure of {self.step}")

    def device(self):
        self._maybe_fail()
        return "simulated T4, compute capability 7.5"

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
        enter("kernel")
        log(backend.kernel())
        enter("flex_attention")
        compile_s, line = backend.flex_attention()
        log(line)
        enter("init")
        log(backend.init())
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
        out(summary, flush=True)
        return summary, 1
    finally:
        backend.close()
    bw16 = busbw[16 << 20] / 1e9
    summary = (f"NCCL-CHECK PASS rank={s.rank} world={s.world} allreduce_{s.latency_bytes}B_p50_us={lat['p50']:.0f} "
               f"p90_us={lat['p90']:.0f} floor_ms_per_token={floor:.1f} collectives_per_token={s.collectives_per_token} "
               f"busbw_16MiB_GBps={bw16:.2f} flex_compile_s={compile_s:.1f} "
               f"plan_flags=\"--nccl-latency {lat['p50']:.0f}us --nccl-bandwidth {bw16:.2f}GB/s\"")
    out(summary, flush=True)
    return summary, 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="simulated timings, no torch: checks the script itself")
    p.add_argument("--dry-run-fail", choices=STEPS, help="with --dry-run: make this step fail")
    a = p.parse_args(argv)
    s = Settings()
    if a.dry_run_fail and not a.dry_run:
        p.error("--dry-run-fail needs --dry-run")
    if a.dry_run:
        backend = FakeBackend(s, a.dry_run_fail)
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
