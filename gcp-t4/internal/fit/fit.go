// Package fit answers whether a model can be served by vLLM on a given number
// of GPUs with tensor parallelism, and how fast it can decode there: the
// weights each GPU holds, the memory left outside vLLM's budget, the room
// left for the KV cache inside it, how many tokens that holds, and an upper
// bound on decode speed from memory bandwidth and per-token collectives.
// Over one GPU per podVM it also sets pipeline parallelism on the same
// podVMs beside it (pipeline.go).
//
// The memory model follows vLLM v0.11.0's GPU worker
// (vllm/v1/worker/gpu_worker.py):
//
//   - load_model counts everything the model allocates as weights, the
//     RoPE cos_sin_cache buffer included: RotaryEmbedding registers one
//     max_position_embeddings x rotary_dim table at the model dtype
//     (vllm/model_executor/layers/rotary_embedding/base.py), shared by
//     every layer (get_rope's cache in rotary_embedding/__init__.py) and
//     not sharded: 1,024,000 x 128 x 2 bytes = 0.24 GiB per GPU for
//     Mistral-Nemo.
//
//   - init_device initialises NCCL, then takes a memory snapshot and
//     refuses to start when the free memory is below
//     gpu_memory_utilization x total ("Free memory on device ... is less
//     than desired GPU memory utilization"): the CUDA context and the NCCL
//     communicators must fit in the headroom (1 - utilization) x total.
//
//   - determine_available_memory runs one profiling pass
//     (gpu_model_runner.py profile_run: a forward of max_num_batched_tokens
//     tokens and a sampler run over min(max_num_seqs, those tokens)
//     requests) and gives the KV cache utilization x total minus the
//     weights, the pass's torch peak and the non-torch increase
//     (vllm/utils memory_profiling).
//
//   - compile_or_warm_up_model captures CUDA graphs after the KV cache is
//     allocated, and that capture's memory is in no budget: it comes out of
//     whatever the headroom has left. The sizes captured are vLLM's
//     default list (vllm/config/__init__.py VllmConfig._set_cudagraph_sizes,
//     vllm/config/scheduler.py SchedulerConfig.__post_init__): 1, 2, 4 and
//     multiples of 8 up to min(max_num_seqs x 2, 512), none above
//     max_num_batched_tokens, and none at all with enforce_eager (which
//     also turns torch.compile off: compilation level NO_COMPILATION).
//
// What the model alone does not determine (CUDA context, non-torch
// memory, graph memory) enters as stated assumptions that can be
// overridden; activation memory is derived from the shape and
// max_num_batched_tokens unless given.
package fit

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// GiB is 2^30 bytes, the unit vLLM and PyTorch report GPU memory in.
const GiB = 1 << 30

// blockTokens is vLLM's default KV-cache block size on CUDA
// (vllm/platforms/cuda.py check_and_update_config): capacity is allocated
// in whole blocks of this many tokens (kv_cache_utils.py get_num_blocks).
const blockTokens = 16

// vocabPadding is vLLM's DEFAULT_VOCAB_PADDING_SIZE: the embedding and the
// LM head are padded to a multiple of it before they are split.
const vocabPadding = 64

// samplerBytesPerLogit is the assumed memory per logit of the profiling
// sampler run (gpu_model_runner.py _dummy_sampler_run with top-k and
// top-p set): the gathered fp16 logits, their fp32 copy, the sort's fp32
// values and int64 indices, softmax and cumulative sums in fp32 — 26
// bytes, rounded up to 32 for temporaries.
const samplerBytesPerLogit = 32

// Model describes what the calculation needs to know about a checkpoint.
// Either the shape (from a config.json), Params or Bytes16 sizes the
// weights.
type Model struct {
	Name string
	// Source is where the shape was read (a config.json); Note, Base and
	// PublishedParams come from the catalogue entry.
	Source, Note, Base string
	PublishedParams    int64
	// Params is the parameter count; from the shape when it is known.
	Params int64
	// Bytes16 is the weights' size at 16 bits per parameter (the size of an
	// fp16 or bf16 checkpoint); used when neither the shape nor Params is.
	Bytes16 int64
	// Layers, KVHeads and HeadDim size the KV cache per token.
	Layers, KVHeads, HeadDim int
	// Heads (attention heads) must divide by the tensor-parallel size.
	Heads int
	// Hidden, Intermediate and Vocab complete the shape: with them the
	// weights are counted per layer as vLLM shards them, and the
	// activation peak can be derived.
	Hidden, Intermediate, Vocab int
	// Tied: the LM head shares the embedding matrix.
	Tied bool
	// MaxPositions is config.json's max_position_embeddings: the rows of
	// vLLM's RoPE cos_sin_cache (0: unknown, not counted).
	MaxPositions int
	// CheckpointDtype is config.json's torch_dtype.
	CheckpointDtype string
	// Quant is the checkpoint's weight format.
	Quant Quant
}

// hasArch reports whether the KV cache per token can be computed.
func (m Model) hasArch() bool { return m.Layers > 0 && m.KVHeads > 0 && m.HeadDim > 0 }

// hasShape reports whether the full shape is known.
func (m Model) hasShape() bool {
	return m.hasArch() && m.Heads > 0 && m.Hidden > 0 && m.Intermediate > 0 && m.Vocab > 0
}

// shapeParams counts weights: per layer the q/k/v/o projections, the gated
// MLP (gate, up, down) and two RMSNorms; plus the embedding, the LM head
// unless tied, and the final norm.
func (m Model) shapeParams() int64 {
	if !m.hasShape() {
		return m.Params
	}
	h, l := int64(m.Hidden), int64(m.Layers)
	q, kv := int64(m.Heads*m.HeadDim), int64(m.KVHeads*m.HeadDim)
	perLayer := h*(q+2*kv) + q*h + 3*h*int64(m.Intermediate) + 2*h
	emb := int64(m.Vocab) * h
	lm := emb
	if m.Tied {
		lm = 0
	}
	return l*perLayer + emb + lm + h
}

// Overheads are the per-GPU amounts the model alone does not determine.
type Overheads struct {
	// CUDAContext is memory in use before vLLM's snapshot: the CUDA
	// context and, since vLLM v0.11.0 initialises the distributed
	// environment first, the NCCL communicators. It must fit in the
	// headroom outside the budget.
	CUDAContext int64
	// NonTorch: memory outside PyTorch's allocator that appears between the
	// snapshot and the end of profiling (cuBLAS workspaces and the like);
	// counted inside the budget.
	NonTorch int64
	// Activation, when not zero, replaces the derived activation peak.
	Activation int64
	// CUDAGraphs, when not zero, is the memory of the captured CUDA graphs
	// (from vLLM's "Graph capturing finished ... took" line); otherwise it
	// is CUDAGraphPerSize for each size vLLM captures. Taken from the
	// headroom after the KV cache; none with enforce_eager.
	CUDAGraphs int64
	// CUDAGraphPerSize is the assumed memory of one captured batch size.
	CUDAGraphPerSize int64
}

// DefaultOverheads are the assumptions used unless overridden, on the high
// side of what vLLM's start-up log shows for 7-24B models on one GPU
// (non-torch 0.1-0.2 GiB; graph capture 0.3-0.8 GiB for vLLM's default 67
// sizes, hence 8 MiB a size).
var DefaultOverheads = Overheads{CUDAContext: GiB / 2, NonTorch: GiB / 4, CUDAGraphPerSize: 8 << 20}

// Decode holds the decode and prefill estimates' inputs.
type Decode struct {
	// Path is how the ranks reach each other (PathVPC: one GPU per podVM;
	// PathHost: all in one podVM).
	Path Path
	// NCCLLatency, when not zero, is a measured 2-rank all-reduce of one
	// hidden state (the NCCL check's p50); it replaces the path's assumed
	// ring-step latency (half of it per step).
	NCCLLatency time.Duration
	// BusBandwidth, when not zero, is NCCL's measured bus bandwidth for
	// large messages (the NCCL check's 16 MiB busbw), bytes per second.
	BusBandwidth float64
	// Bandwidth, when not zero, replaces the assumed memory bandwidth
	// reached (bytes per second); the bound stays at the GPU's peak.
	Bandwidth float64
	// Context is the sequence length the KV read is counted for.
	Context int
	// PromptTokens is the prompt the time to first token is estimated for.
	PromptTokens int
}

// DefaultDecode: the two-podVM path, 1024 tokens of context, a
// 2048-token prompt (one full prefill chunk at the example's
// max_num_batched_tokens).
var DefaultDecode = Decode{Path: PathVPC, Context: 1024, PromptTokens: 2048}

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
	// MaxNumBatchedTokens and MaxNumSeqs size the profiling pass (vLLM
	// v0.11.0 defaults for a GPU under 70 GiB behind the OpenAI server:
	// 2048 and 256, engine/arg_utils.py).
	MaxNumBatchedTokens, MaxNumSeqs int
	Overheads                       Overheads
	Decode                          Decode
}

// Verdict is the answer's headline.
type Verdict string

const (
	// Fits: at least two sequences of max_model_len fit in the KV cache (or,
	// without the architecture, the KV cache gets room).
	Fits Verdict = "FITS"
	// Tight: max_model_len fits, but fewer than two such sequences at once.
	Tight Verdict = "FITS (TIGHT)"
	// DoesNotFit: vLLM would refuse to start, or fail while starting.
	DoesNotFit Verdict = "DOES NOT FIT"
)

// Result holds every figure the verdict rests on; memory in bytes, per GPU.
type Result struct {
	Config Config
	// DtypeBytes is the bytes per activation and per KV element.
	DtypeBytes int
	// Weights is the whole model's weights; WeightsPerGPU one GPU's share
	// as vLLM shards them (replicated norms and KV heads included).
	Weights, WeightsPerGPU int64
	// RoPECache is the rotary cos_sin_cache each GPU holds; vLLM counts
	// it as weights.
	RoPECache int64
	// EmbeddingPerGPU is the embedding table's share (read one row per
	// token, so left out of the decode estimate's weight reads).
	EmbeddingPerGPU int64
	// Budget is GPUMemoryUtilization x GPU memory; Headroom the rest, and
	// HeadroomSpare what the headroom has left after the CUDA context.
	Budget, Headroom, HeadroomSpare int64
	// Activation is the profiling pass's peak; ActivationDerived says it
	// was derived (ForwardPeak and SamplerPeak are the candidates).
	Activation               int64
	ActivationDerived        bool
	ForwardPeak, SamplerPeak int64
	// Overhead is what the budget holds besides weights and KV cache:
	// non-torch memory and the activation peak.
	Overhead int64
	// KVRoom is Budget - WeightsPerGPU - RoPECache - Overhead; negative
	// when short.
	KVRoom int64
	// GraphSizes are the batch sizes vLLM captures CUDA graphs for (none
	// with enforce_eager); GraphMemory their memory, GraphMemoryDerived
	// whether it is CUDAGraphPerSize x len(GraphSizes).
	GraphSizes         []int
	GraphMemory        int64
	GraphMemoryDerived bool
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
	// Decode is the decode estimate; nil when the inputs are missing.
	Decode *DecodeEstimate
	// Prefill is the prefill and time-to-first-token estimate; nil when
	// the shape is unknown.
	Prefill *PrefillEstimate
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
	case cfg.MaxNumBatchedTokens < 1 || cfg.MaxNumSeqs < 1:
		return r, fmt.Errorf("max-num-batched-tokens %d and max-num-seqs %d: both must be at least 1", cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs)
	case m.Params <= 0 && m.Bytes16 <= 0 && !m.hasShape():
		return r, errors.New("model size unknown: give --model, --config, --model-size or --params")
	case m.Heads > 0 && m.Heads%cfg.TP != 0:
		return r, fmt.Errorf("tp %d does not divide the model's %d attention heads: vLLM refuses this split; pick a divisor", cfg.TP, m.Heads)
	case m.KVHeads > 0 && m.KVHeads%cfg.TP != 0 && cfg.TP%m.KVHeads != 0:
		return r, fmt.Errorf("tp %d and the model's %d KV heads: one must divide the other for vLLM to shard or replicate them", cfg.TP, m.KVHeads)
	case m.Quant.Method != None && !m.hasShape():
		return r, fmt.Errorf("quantization %s needs the model's shape to size the packed weights: use --model or --config", m.Quant.Method)
	}
	b, bf16, err := DtypeBytes(cfg.Dtype)
	if err != nil {
		return r, err
	}
	if bf16 && !cfg.GPU.BF16() {
		return r, fmt.Errorf("dtype bfloat16 on %s: the GPU has no bf16 (compute capability below 8.0); use --dtype half", cfg.GPU.Name)
	}
	if err := m.Quant.check(cfg.GPU, cfg.Dtype); err != nil {
		return r, err
	}
	r.DtypeBytes = b
	tp := int64(cfg.TP)
	if m.hasShape() {
		r.Weights = weightBytes(m, 1, b).total()
		w := weightBytes(m, cfg.TP, b)
		r.WeightsPerGPU, r.EmbeddingPerGPU = w.total(), w.embedding
	} else {
		if m.Params > 0 {
			r.Weights = m.Params * int64(b)
		} else {
			r.Weights = m.Bytes16 / 2 * int64(b)
		}
		r.WeightsPerGPU = ceilDiv(r.Weights, tp)
	}
	if m.MaxPositions > 0 && m.HeadDim > 0 {
		r.RoPECache = int64(m.MaxPositions) * int64(m.HeadDim) * int64(b)
	}
	r.Budget = int64(math.Floor(cfg.GPUMemoryUtilization * float64(cfg.GPU.Memory)))
	r.Headroom = cfg.GPU.Memory - r.Budget
	o := cfg.Overheads
	r.HeadroomSpare = r.Headroom - o.CUDAContext

	switch {
	case o.Activation > 0:
		r.Activation = o.Activation
	case m.hasShape():
		r.ForwardPeak, r.SamplerPeak = activationPeaks(m, cfg.TP, b, cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs)
		r.Activation, r.ActivationDerived = max(r.ForwardPeak, r.SamplerPeak), true
	default:
		// Without the shape there is nothing to derive from: vLLM's log
		// shows under 1 GiB for 7-12B models at the default batch sizes.
		r.Activation = GiB
	}
	r.Overhead = o.NonTorch + r.Activation
	r.KVRoom = r.Budget - r.WeightsPerGPU - r.RoPECache - r.Overhead
	r.MinGPUs = minGPUs(r.Weights, r.Budget-r.Overhead-r.RoPECache, m.Heads)
	if !cfg.EnforceEager {
		r.GraphSizes = cudaGraphSizes(cfg.MaxNumSeqs, cfg.MaxNumBatchedTokens)
		r.GraphMemory = o.CUDAGraphs
		if r.GraphMemory == 0 {
			r.GraphMemory, r.GraphMemoryDerived = int64(len(r.GraphSizes))*o.CUDAGraphPerSize, true
		}
	}
	if m.hasArch() {
		r.KVBytesPerToken = 2 * int64(m.Layers) * int64(kvHeadsPerGPU(m, cfg.TP)) * int64(m.HeadDim) * int64(b)
		if r.KVRoom > 0 {
			r.KVTokens = r.KVRoom / (r.KVBytesPerToken * blockTokens) * blockTokens
		} else {
			r.KVTokens = 0
		}
		r.Concurrency = float64(r.KVTokens) / float64(cfg.MaxModelLen)
	}
	r.Decode = estimateDecode(r)
	r.Prefill = estimatePrefill(r)
	r.Verdict, r.Reason = verdict(r)
	return r, nil
}

// cudaGraphSizes is vLLM v0.11.0's default capture list: with
// cuda_graph_sizes unset, SchedulerConfig takes [min(max_num_seqs x 2,
// 512)] and VllmConfig._set_cudagraph_sizes expands one value to 1, 2, 4
// and the multiples of 8 up to it, dropping sizes above
// max_num_batched_tokens. For 8 sequences: 1, 2, 4, 8, 16.
func cudaGraphSizes(maxNumSeqs, maxNumBatchedTokens int) []int {
	top := min(maxNumSeqs*2, 512)
	var sizes []int
	for _, s := range []int{1, 2, 4} {
		if s <= top {
			sizes = append(sizes, s)
		}
	}
	for s := 8; s <= top; s += 8 {
		sizes = append(sizes, s)
	}
	out := sizes[:0]
	for _, s := range sizes {
		if s <= maxNumBatchedTokens {
			out = append(out, s)
		}
	}
	return out
}

// kvHeadsPerGPU: vLLM shards KV heads over the tensor-parallel group and
// replicates them when the group is larger than their number.
func kvHeadsPerGPU(m Model, tp int) int { return max(1, m.KVHeads/tp) }

// weights is one GPU's weight memory by part.
type weights struct{ layers, norms, embedding, lmHead int64 }

func (w weights) total() int64 { return w.layers + w.norms + w.embedding + w.lmHead }

// weightBytes counts one GPU's weights at tensor-parallel size tp as
// vLLM's Llama/Mistral model (vllm/model_executor/models/llama.py) shards
// them: QKV and gate/up are column-parallel (outputs split), o_proj and
// down_proj row-parallel (inputs split), KV heads replicated beyond their
// number, norms replicated, embedding and LM head split by vocabulary
// (vocab_parallel_embedding.py).
func weightBytes(m Model, tp, act int) weights {
	t := int64(tp)
	h, hd := int64(m.Hidden), int64(m.HeadDim)
	qOut := int64(m.Heads) * hd / t
	kvOut := 2 * int64(kvHeadsPerGPU(m, tp)) * hd
	inter := int64(m.Intermediate) / t
	q := m.Quant
	perLayer := q.linearBytes(h, qOut+kvOut, act) + // qkv_proj
		q.linearBytes(int64(m.Heads)*hd/t, h, act) + // o_proj
		q.linearBytes(h, 2*inter, act) + // gate_up_proj
		q.linearBytes(inter, h, act) // down_proj
	vocab := ceilDiv(ceilDiv(int64(m.Vocab), vocabPadding)*vocabPadding, t)
	w := weights{
		layers:    int64(m.Layers) * perLayer,
		norms:     (2*int64(m.Layers) + 1) * h * int64(act),
		embedding: vocab * h * int64(act),
	}
	if !m.Tied {
		w.lmHead = w.embedding
	}
	return w
}

// activationPeaks derives the profiling pass's torch peak above the
// weights on one GPU, as vLLM v0.11.0's profile_run measures it (torch's
// peak allocation during one _dummy_run of max_num_batched_tokens tokens,
// then _dummy_sampler_run; gpu_model_runner.py). With enforce_eager the
// forward runs eagerly with vLLM's custom ops, so the live set of one
// decoder layer is what its Python code holds: the residual, the
// normalised input (held by the caller), every projection output in the
// block (LlamaMLP keeps gate_up alive until it returns), any dequantised
// weight, and, at tp > 1, the out-of-place all-reduce's output buffer
// (pynccl all_reduce allocates torch.empty_like of its input). The
// profile's attention is skipped (no metadata), so the MLP block sets the
// peak. The sampler run keeps the forward's hidden states and works on
// min(seqs, tokens) rows of the full, all-gathered vocabulary.
func activationPeaks(m Model, tp, act int, tokens, seqs int) (forward, sampler int64) {
	t := int64(tp)
	n, b := int64(tokens), int64(act)
	h, hd := int64(m.Hidden), int64(m.HeadDim)
	qOut := int64(m.Heads) * hd / t
	kvOut := 2 * int64(kvHeadsPerGPU(m, tp)) * hd
	inter := int64(m.Intermediate) / t
	q := m.Quant
	// The all-reduce's output, after o_proj and after down_proj.
	var reduced int64
	if tp > 1 {
		reduced = h
	}
	// Attention: residual, input, qkv output, attention output, o_proj output.
	attn := n*b*(2*h+qOut+kvOut+qOut+h+reduced) + max(q.dequantTemp(h, qOut+kvOut, n), q.dequantTemp(qOut, h, n))
	// MLP: residual, input, gate_up output, activation, down_proj output.
	mlp := n*b*(2*h+2*inter+inter+h+reduced) + max(q.dequantTemp(h, 2*inter, n), q.dequantTemp(inter, h, n))
	forward = max(attn, mlp)
	rows := int64(min(seqs, tokens))
	sampler = n*b*h + rows*int64(m.Vocab)*samplerBytesPerLogit
	return forward, sampler
}

func verdict(r Result) (Verdict, string) {
	c := r.Config
	o := c.Overheads
	switch {
	case r.WeightsPerGPU+r.RoPECache >= c.GPU.Memory:
		return DoesNotFit, fmt.Sprintf("the weights alone need %s per GPU, more than a %s's %s; %s, or a quantised checkpoint",
			gib(r.WeightsPerGPU), c.GPU.Name, gib(c.GPU.Memory), tpHint(r.MinGPUs))
	case r.HeadroomSpare < 0:
		maxUtil := math.Floor(float64(c.GPU.Memory-o.CUDAContext)/float64(c.GPU.Memory)*100) / 100
		return DoesNotFit, fmt.Sprintf("the %s outside the budget ((1 - %.2f) x %s) cannot hold the CUDA context and NCCL (%s): vLLM refuses at start-up (\"Free memory on device ... is less than desired GPU memory utilization\"); use --gpu-memory-utilization %.2f or lower",
			gib(r.Headroom), c.GPUMemoryUtilization, gib(c.GPU.Memory), gib(o.CUDAContext), maxUtil)
	case r.KVRoom <= 0:
		return DoesNotFit, fmt.Sprintf("weights %s + overheads %s per GPU exceed the %s budget (%.2f x %s): no room for the KV cache (\"No available memory for the cache blocks\"); raise --gpu-memory-utilization, lower --max-num-seqs or --max-num-batched-tokens, or %s",
			gib(r.WeightsPerGPU+r.RoPECache), gib(r.Overhead), gib(r.Budget), c.GPUMemoryUtilization, gib(c.GPU.Memory), tpHint(r.MinGPUs))
	case !c.EnforceEager && r.GraphMemory > r.HeadroomSpare:
		return DoesNotFit, fmt.Sprintf("CUDA graphs (%s for %d sizes) are captured after the KV cache is sized, from the %s the headroom has left after the CUDA context: the capture runs out of memory; use --enforce-eager, or a --gpu-memory-utilization that leaves %s outside the budget",
			gib(r.GraphMemory), len(r.GraphSizes), gib(r.HeadroomSpare), gib(o.CUDAContext+r.GraphMemory))
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

// CheckpointBytes is the size of the checkpoint's weights as stored (what a
// download moves): the shape at 16 bits per parameter, quantised layers at
// their format's size, or Params or Bytes16 when no shape is known.
func (m Model) CheckpointBytes() int64 {
	if m.hasShape() {
		return weightBytes(m, 1, 2).total()
	}
	if m.Params > 0 {
		return 2 * m.Params
	}
	return m.Bytes16
}
