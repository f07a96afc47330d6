// Package fit answers whether a model can be served by vLLM on a given number
// of GPUs with tensor parallelism: the weights each GPU holds, the room left
// for the KV cache inside vLLM's gpu_memory_utilization budget, how many
// tokens that room holds, and a verdict against max_model_len.
//
// The memory model follows how vLLM sizes its KV cache: it may use
// utilization x total GPU memory; from that it subtracts the weights, the peak
// activation of a profiling forward pass and memory outside PyTorch's
// allocator; what is left becomes KV-cache blocks. Activation, non-PyTorch and
// CUDA-graph memory are not knowable from the model alone, so they enter as
// stated assumptions (Overheads) that can be overridden.
package fit

import (
	"errors"
	"fmt"
	"math"
)

// GiB is 2^30 bytes, the unit vLLM and PyTorch report GPU memory in.
const GiB = 1 << 30

// blockTokens is vLLM's default KV-cache block size: capacity is allocated
// in whole blocks of this many tokens.
const blockTokens = 16

// Model describes what the calculation needs to know about a checkpoint.
// Either Params or Bytes16 sizes the weights; the architecture fields are
// optional and, when all set, let the calculator turn KV room into tokens.
type Model struct {
	Name string
	// Params is the parameter count; 0 when only Bytes16 is known.
	Params int64
	// Bytes16 is the weights' size at 16 bits per parameter (the size of an
	// fp16 or bf16 checkpoint); used when Params is 0.
	Bytes16 int64
	// Layers, KVHeads and HeadDim size the KV cache per token.
	Layers, KVHeads, HeadDim int
	// Heads (attention heads) must divide by the tensor-parallel size.
	Heads int
}

// hasArch reports whether the KV cache per token can be computed.
func (m Model) hasArch() bool { return m.Layers > 0 && m.KVHeads > 0 && m.HeadDim > 0 }

// GPU is one accelerator as CUDA reports it.
type GPU struct {
	Name string
	// Memory is the total CUDA reports (torch.cuda.mem_get_info), which is
	// what vLLM multiplies by gpu_memory_utilization; less than the marketing
	// size (ECC and the driver's reservation).
	Memory int64
	// BF16 is false for GPUs below compute capability 8.0.
	BF16 bool
}

// Overheads are the per-GPU amounts the model alone does not determine.
type Overheads struct {
	// NonTorch: memory outside PyTorch's allocator that vLLM's profiling
	// counts against the budget (NCCL communicators and buffers, cuBLAS
	// workspaces).
	NonTorch int64
	// Activation: the peak of vLLM's profiling forward pass (one batch of
	// max_num_batched_tokens plus the sampler's logits).
	Activation int64
	// CUDAGraphs: memory of captured CUDA graphs; zero with enforce_eager.
	// Counted inside the budget, which is conservative: versions that
	// capture after sizing the KV cache take it from the headroom instead.
	CUDAGraphs int64
}

// DefaultOverheads are the assumptions used unless overridden. They are
// deliberately on the high side of what vLLM's start-up log reports for 7-12B
// models on one node (non-torch a few hundred MiB, activation peak below
// 1 GiB at the default batch sizes, graphs 0.2-0.5 GiB).
var DefaultOverheads = Overheads{NonTorch: GiB / 2, Activation: GiB, CUDAGraphs: GiB / 2}

// Config is one question: this model, on TP GPUs like GPU, with these vLLM
// engine settings.
type Config struct {
	Model                Model
	GPU                  GPU
	TP                   int
	Dtype                string
	MaxModelLen          int
	GPUMemoryUtilization float64
	EnforceEager         bool
	Overheads            Overheads
}

// Verdict is the answer's headline.
type Verdict string

const (
	// Fits: at least two sequences of max_model_len fit in the KV cache (or,
	// without the architecture, the KV cache gets room).
	Fits Verdict = "FITS"
	// Tight: max_model_len fits, but fewer than two such sequences at once.
	Tight Verdict = "FITS (TIGHT)"
	// DoesNotFit: vLLM would refuse to start with these settings.
	DoesNotFit Verdict = "DOES NOT FIT"
)

// Result holds every figure the verdict rests on; memory in bytes, per GPU.
type Result struct {
	Config Config
	// DtypeBytes is the bytes per parameter and per KV element.
	DtypeBytes int
	// Weights is the whole model's weights at Dtype; WeightsPerGPU its share
	// on one GPU (vLLM shards the layers, the embedding and the LM head; the
	// replicated norms are negligible).
	Weights, WeightsPerGPU int64
	// Budget is GPUMemoryUtilization x GPU memory.
	Budget int64
	// Overhead is the sum of the Overheads that apply (graphs only without
	// enforce_eager).
	Overhead int64
	// KVRoom is Budget - WeightsPerGPU - Overhead; negative when short.
	KVRoom int64
	// KVBytesPerToken is per GPU; zero when the architecture is unknown.
	KVBytesPerToken int64
	// KVTokens is the KV capacity in tokens, whole blocks only; -1 when
	// the architecture is unknown.
	KVTokens int64
	// Concurrency is KVTokens / MaxModelLen: how many full-length sequences
	// fit at once (vLLM logs the same figure as "Maximum concurrency").
	Concurrency float64
	// MinGPUs is the fewest GPUs whose budgets hold the weights and the
	// overheads, ignoring the KV cache, rounded up to divide the attention
	// heads: a lower bound for --tp at these settings (0: none does).
	MinGPUs int
	Verdict Verdict
	// Reason explains the verdict and, when it fails, what to change.
	Reason string
}

// DtypeBytes maps vLLM's --dtype values to bytes per element. "auto" is
// refused: it follows the checkpoint (often bf16), which must be decided
// before the GPU is known to support it.
func DtypeBytes(dtype string) (int, bool, error) {
	switch dtype {
	case "half", "float16":
		return 2, false, nil
	case "bfloat16":
		return 2, true, nil
	case "float", "float32":
		return 4, false, nil
	}
	return 0, false, fmt.Errorf("dtype %q is not one of half, float16, bfloat16, float32: name the dtype vLLM will run (T4: half)", dtype)
}

// Compute evaluates cfg. An error means the question itself is malformed
// (a setting vLLM rejects outright); a model that is too big is a Result
// with Verdict DoesNotFit.
func Compute(cfg Config) (Result, error) {
	r := Result{Config: cfg, KVTokens: -1}
	m := cfg.Model
	switch {
	case cfg.TP < 1:
		return r, fmt.Errorf("tp %d: the tensor-parallel size must be at least 1", cfg.TP)
	case cfg.GPU.Memory <= 0:
		return r, errors.New("gpu memory is not set: pick --gpu or give --gpu-memory")
	case !(cfg.GPUMemoryUtilization > 0 && cfg.GPUMemoryUtilization <= 1):
		return r, fmt.Errorf("gpu-memory-utilization %v: must be in (0, 1], a fraction of the GPU's memory", cfg.GPUMemoryUtilization)
	case cfg.MaxModelLen < 1:
		return r, fmt.Errorf("max-model-len %d: must be at least 1 token", cfg.MaxModelLen)
	case m.Params <= 0 && m.Bytes16 <= 0:
		return r, errors.New("model size unknown: give --model, --model-size or --params")
	case m.Heads > 0 && m.Heads%cfg.TP != 0:
		return r, fmt.Errorf("tp %d does not divide the model's %d attention heads: vLLM refuses this split; pick a divisor", cfg.TP, m.Heads)
	case m.KVHeads > 0 && m.KVHeads%cfg.TP != 0 && cfg.TP%m.KVHeads != 0:
		return r, fmt.Errorf("tp %d and the model's %d KV heads: one must divide the other for vLLM to shard or replicate them", cfg.TP, m.KVHeads)
	}
	b, bf16, err := DtypeBytes(cfg.Dtype)
	if err != nil {
		return r, err
	}
	if bf16 && !cfg.GPU.BF16 {
		return r, fmt.Errorf("dtype bfloat16 on %s: the GPU has no bf16 (compute capability below 8.0); use --dtype half", cfg.GPU.Name)
	}
	r.DtypeBytes = b
	if m.Params > 0 {
		r.Weights = m.Params * int64(b)
	} else {
		r.Weights = m.Bytes16 / 2 * int64(b)
	}
	tp := int64(cfg.TP)
	r.WeightsPerGPU = ceilDiv(r.Weights, tp)
	r.Budget = int64(math.Floor(cfg.GPUMemoryUtilization * float64(cfg.GPU.Memory)))
	o := cfg.Overheads
	r.Overhead = o.NonTorch + o.Activation
	if !cfg.EnforceEager {
		r.Overhead += o.CUDAGraphs
	}
	r.KVRoom = r.Budget - r.WeightsPerGPU - r.Overhead
	r.MinGPUs = minGPUs(r.Weights, r.Budget-r.Overhead, m.Heads)
	if m.hasArch() {
		// K and V, per layer, for the KV heads this GPU holds (vLLM
		// replicates KV heads when tp exceeds their number).
		kvHeads := max(1, m.KVHeads/cfg.TP)
		r.KVBytesPerToken = 2 * int64(m.Layers) * int64(kvHeads) * int64(m.HeadDim) * int64(b)
		if r.KVRoom > 0 {
			r.KVTokens = r.KVRoom / (r.KVBytesPerToken * blockTokens) * blockTokens
		} else {
			r.KVTokens = 0
		}
		r.Concurrency = float64(r.KVTokens) / float64(cfg.MaxModelLen)
	}
	r.Verdict, r.Reason = verdict(r)
	return r, nil
}

func verdict(r Result) (Verdict, string) {
	c := r.Config
	switch {
	case r.WeightsPerGPU >= c.GPU.Memory:
		return DoesNotFit, fmt.Sprintf("the weights alone need %s per GPU, more than a %s's %s; %s, or a quantised checkpoint",
			gib(r.WeightsPerGPU), c.GPU.Name, gib(c.GPU.Memory), tpHint(r.MinGPUs))
	case r.KVRoom <= 0:
		return DoesNotFit, fmt.Sprintf("weights %s + overheads %s per GPU exceed the %s budget (%.2f x %s): no room for the KV cache; use --enforce-eager or a higher --gpu-memory-utilization, or %s",
			gib(r.WeightsPerGPU), gib(r.Overhead), gib(r.Budget), c.GPUMemoryUtilization, gib(c.GPU.Memory), tpHint(r.MinGPUs))
	case r.KVTokens < 0:
		return Fits, fmt.Sprintf("%s per GPU left for the KV cache; token capacity against max_model_len %d not checked: give --layers, --kv-heads and --head-dim, or --model",
			gib(r.KVRoom), c.MaxModelLen)
	case r.KVTokens < int64(c.MaxModelLen):
		return DoesNotFit, fmt.Sprintf("the KV cache holds %d tokens, fewer than max_model_len %d (vLLM refuses to start); lower --max-model-len to at most %d, or free memory",
			r.KVTokens, c.MaxModelLen, r.KVTokens)
	case r.Concurrency < 2:
		return Tight, fmt.Sprintf("the KV cache holds %d tokens: %.2f sequences of %d tokens at once; keep max_num_seqs low",
			r.KVTokens, r.Concurrency, c.MaxModelLen)
	}
	return Fits, fmt.Sprintf("the KV cache holds %d tokens: %.2f sequences of %d tokens at once", r.KVTokens, r.Concurrency, c.MaxModelLen)
}

// minGPUs is the fewest GPUs, each with perGPU bytes for weights, that hold
// the weights, rounded up to a size that divides the attention heads when
// they are known (vLLM shards whole heads). 0 when no count suffices.
func minGPUs(weights, perGPU int64, heads int) int {
	if perGPU <= 0 {
		return 0
	}
	n := int(ceilDiv(weights, perGPU))
	if heads <= 0 {
		return n
	}
	for ; n <= heads; n++ {
		if heads%n == 0 {
			return n
		}
	}
	return 0
}

// tpHint names the tensor-parallel size to try.
func tpHint(minGPUs int) string {
	if minGPUs == 0 {
		return "no tensor-parallel size helps at these settings (the overheads fill the budget)"
	}
	return fmt.Sprintf("at these settings at least --tp %d", minGPUs)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// gib formats bytes as GiB with two decimals.
func gib(n int64) string { return fmt.Sprintf("%.2f GiB", float64(n)/GiB) }
