package fit

import (
	"fmt"
	"time"
)

// Pipeline parallelism over the same podVMs, for comparison with the
// tensor-parallel layout the example runs. vLLM's own advice across nodes
// is tensor parallelism inside a node and pipeline parallelism between
// nodes; with one T4 per podVM that is pipeline_parallel_size 2 and
// tensor_parallel_size 1. The model follows vLLM v0.11.0's Llama/Mistral
// code, with these assumptions made explicit:
//
//   - Layers are split as get_pp_indices (vllm/distributed/utils.py)
//     splits them: evenly, the remainder going to the stages before the
//     last one (which holds the final norm and the LM head). The first
//     stage holds the embedding, the last the final norm and the LM head
//     (and, when the two are tied, the embedding as well); every stage
//     holds the RoPE cache, its layers' weights whole and its layers' KV
//     cache for every KV head.
//   - Between stages vLLM sends IntermediateTensors, the hidden state and
//     the residual (hidden_size x 2 values per token): one point-to-point
//     send per stage boundary per step, priced as one ring step of the
//     link plus its bytes at the link's bus bandwidth.
//   - A stage that is not the first keeps a buffer for the incoming
//     intermediate tensors of max_num_batched_tokens tokens, inside the
//     profiled peak; only the last stage runs the sampler.
//   - vLLM sizes every worker's KV cache to the smallest worker's block
//     count, so the capacity is the smallest stage's.
//   - One sequence: each token passes every stage in turn, so a step is
//     the sum of the stages' times plus the sends: the other GPUs wait
//     (the pipeline bubble).
//   - A batch: as one batch in flight, the same; vLLM's Ray executor
//     lets up to pipeline_parallel_size batches run at once, and with the
//     sequences split into that many micro-batches each stage works on
//     one while the next stage works on another. The estimate gives both;
//     how vLLM's scheduler divides the sequences is not modelled.
//   - Prefill: each chunk passes the stages in turn (each stage's compute
//     at the GPU's assumed rate, or its weights read once if longer), with
//     one send of the chunk's intermediate tensors per boundary.
//
// As for tensor parallelism, Ray's per-step dispatch of the scheduler's
// output and the return of the sampled tokens are not counted.

// Stage is one pipeline stage's share, per GPU (tensor parallel 1 inside
// the stage).
type Stage struct {
	// FirstLayer and Layers: the decoder layers [FirstLayer,
	// FirstLayer+Layers) the stage holds.
	FirstLayer, Layers int
	// Embedding and LMHead say which ends it holds.
	Embedding, LMHead bool
	// Weights is its weight memory (RoPE cache apart); EmbeddingBytes the
	// embedding's part of it, read one row per token.
	Weights, EmbeddingBytes int64
	// Activation is its profiling peak: the forward of
	// max_num_batched_tokens, the incoming intermediate tensors' buffer
	// on a stage after the first, the sampler on the last.
	Activation int64
	// KVRoom, KVBytesPerToken and KVTokens as in Result, for this stage.
	KVRoom, KVBytesPerToken, KVTokens int64
	// Memory is one decode step at batch 1 (weights and one sequence's KV
	// cache at the decode context) at the assumed bandwidth.
	Memory time.Duration
}

// Pipeline is the pipeline-parallel estimate at the settings of a Config
// whose TP is the number of stages, one GPU each.
type Pipeline struct {
	// Stages is pipeline_parallel_size; the Config's TP ranks become
	// stages.
	Stages int
	Stage  []Stage
	Link   Link
	// RoPECache is per GPU, as in Result.
	RoPECache int64
	// KVTokens is the smallest stage's capacity; Concurrency the
	// max_model_len sequences it holds at once.
	KVTokens    int64
	Concurrency float64
	// SendBytes is one token's intermediate tensors (hidden state and
	// residual) crossing one stage boundary; Send one such send at batch
	// 1 (a ring step of the link plus the bytes at its bus bandwidth).
	SendBytes int64
	Send      time.Duration
	// PerToken is one sequence's step: every stage and every send in
	// turn; TokensPerSecond its rate.
	PerToken        time.Duration
	TokensPerSecond float64
	// Batch is the sequences decoding together (as in DecodeEstimate).
	// BatchPerStep/BatchTokensPerSecond run them as one batch in flight;
	// Overlap* as MicroBatches micro-batches of MicroBatch sequences
	// (as many as there are stages, when there are sequences enough)
	// that keep the stages busy at once.
	Batch, MicroBatches, MicroBatch              int
	BatchPerStep, OverlapPerStep                 time.Duration
	BatchTokensPerSecond, OverlapTokensPerSecond float64
	// PrefillCompute (every stage in turn, all chunks) and PrefillNetwork
	// (the sends) make TTFT for the Config's prompt.
	PrefillCompute, PrefillNetwork, TTFT time.Duration
	// Fits is false when the smallest stage's KV cache is below
	// max_model_len or a stage has no room for it (vLLM refuses to start).
	Fits bool
}

// ppLayers splits layers over stages as vLLM's get_pp_indices does
// without VLLM_PP_LAYER_PARTITION: evenly, and a remainder of r layers
// one each to the r stages before the last.
func ppLayers(layers, stages int) []int {
	out := make([]int, stages)
	for i := range out {
		out[i] = layers / stages
	}
	for i := 2; i <= layers%stages+1; i++ {
		out[stages-i]++
	}
	return out
}

// ComputePipeline estimates cfg's model with pipeline parallelism over
// cfg.TP GPUs (one stage each, tensor parallel 1 inside a stage), at
// cfg's engine and decode settings. It needs the model's shape; nil
// without it, or when cfg cannot be computed at all.
func ComputePipeline(cfg Config) (*Pipeline, error) {
	m := cfg.Model
	n := cfg.TP
	if !m.hasShape() || n < 2 || m.Layers < n {
		return nil, nil
	}
	one := cfg
	one.TP = 1
	// The activation vLLM logs under tensor parallelism is not a stage's;
	// each stage's peak is derived from the shape.
	one.Overheads.Activation = 0
	r, err := Compute(one)
	if err != nil {
		return nil, err
	}
	if r.Decode == nil || r.Prefill == nil {
		return nil, nil
	}
	link, err := linkFor(cfg.Decode.Path, cfg.Decode)
	if err != nil {
		return nil, nil
	}
	b := int64(r.DtypeBytes)
	h := int64(m.Hidden)
	w := weightBytes(m, 1, r.DtypeBytes)
	perLayer := w.layers / int64(m.Layers)
	forward, sampler := activationPeaks(m, 1, r.DtypeBytes, cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs)
	p := &Pipeline{Stages: n, Link: link, RoPECache: r.RoPECache, KVTokens: -1}
	first := 0
	for i, layers := range ppLayers(m.Layers, n) {
		s := Stage{FirstLayer: first, Layers: layers, Embedding: i == 0, LMHead: i == n-1}
		first += layers
		s.Weights = int64(layers)*perLayer + 2*int64(layers)*h*b
		if s.Embedding || (s.LMHead && m.Tied) {
			s.Weights += w.embedding
			s.EmbeddingBytes = w.embedding
		}
		if s.LMHead {
			// The final norm, and the LM head unless it is the
			// embedding itself (read whole every step either way).
			s.Weights += h*b + w.lmHead
			if m.Tied {
				s.EmbeddingBytes = 0
			}
		}
		s.Activation = forward
		if i > 0 {
			s.Activation += 2 * int64(cfg.MaxNumBatchedTokens) * h * b
		}
		if s.LMHead {
			s.Activation = max(s.Activation, sampler)
		}
		s.KVRoom = r.Budget - s.Weights - r.RoPECache - cfg.Overheads.NonTorch - s.Activation
		s.KVBytesPerToken = 2 * int64(layers) * int64(m.KVHeads) * int64(m.HeadDim) * b
		s.KVTokens = max(0, s.KVRoom/(s.KVBytesPerToken*blockTokens)*blockTokens)
		s.Memory = seconds(s.Weights-s.EmbeddingBytes+int64(cfg.Decode.Context)*s.KVBytesPerToken, r.Decode.Bandwidth)
		if p.KVTokens < 0 || s.KVTokens < p.KVTokens {
			p.KVTokens = s.KVTokens
		}
		p.Stage = append(p.Stage, s)
	}
	p.Concurrency = float64(p.KVTokens) / float64(cfg.MaxModelLen)
	p.Fits = p.KVTokens >= int64(cfg.MaxModelLen)

	p.SendBytes = 2 * h * b
	boundaries := time.Duration(n - 1)
	send := func(tokens int64) time.Duration { return link.Step + wire(tokens*p.SendBytes, link.BusBandwidth) }
	p.Send = send(1)
	// step is one pass of batch sequences through every stage in turn.
	step := func(batch int) (total, slowest time.Duration) {
		for _, s := range p.Stage {
			t := seconds(s.Weights-s.EmbeddingBytes+int64(batch)*int64(cfg.Decode.Context)*s.KVBytesPerToken, r.Decode.Bandwidth)
			total += t
			slowest = max(slowest, t)
		}
		return total + boundaries*send(int64(batch)), slowest
	}
	p.PerToken, _ = step(1)
	p.TokensPerSecond = float64(time.Second) / float64(p.PerToken)
	p.Batch = cfg.MaxNumSeqs
	if p.KVTokens > 0 {
		p.Batch = int(min(int64(p.Batch), max(1, p.KVTokens/int64(cfg.Decode.Context))))
	}
	p.BatchPerStep, _ = step(p.Batch)
	p.BatchTokensPerSecond = float64(p.Batch) * float64(time.Second) / float64(p.BatchPerStep)
	// Micro-batches: each of n micro-batches must pass every stage before
	// its next token (its cycle), and each stage must serve all n in
	// turn; the longer of the two is the period in which every sequence
	// advances one token.
	p.MicroBatches = min(n, p.Batch)
	p.MicroBatch = p.Batch / p.MicroBatches
	cycle, slowest := step(p.MicroBatch)
	p.OverlapPerStep = max(cycle, time.Duration(p.MicroBatches)*slowest)
	p.OverlapTokensPerSecond = float64(p.MicroBatches*p.MicroBatch) * float64(time.Second) / float64(p.OverlapPerStep)

	e := r.Prefill
	for done := 0; done < e.PromptTokens; done += e.ChunkTokens {
		c := int64(min(e.ChunkTokens, e.PromptTokens-done))
		for _, s := range p.Stage {
			p.PrefillCompute += stageChunk(m, s, c, int64(done), e.FLOPS, r.Decode.Bandwidth)
		}
		p.PrefillNetwork += boundaries * send(c)
	}
	p.TTFT = p.PrefillCompute + p.PrefillNetwork
	return p, nil
}

// stageChunk is one stage's compute for a prefill chunk of c tokens after
// p tokens, as chunkCost prices a whole GPU's: the linear layers' and
// causal attention's FLOPs at the assumed rate, or the stage's weights
// read once if that is longer.
func stageChunk(m Model, s Stage, c, p int64, flops, bandwidth float64) time.Duration {
	perLayer := linearParamsPerGPU(m, 1) / int64(m.Layers)
	fl := 2*float64(int64(s.Layers)*perLayer)*float64(c) +
		float64(s.Layers)*4*float64(m.Heads)*float64(m.HeadDim)*float64(c)*(float64(p)+float64(c+1)/2)
	return max(time.Duration(fl/flops*float64(time.Second)), seconds(s.Weights, bandwidth))
}

// CrossoverStep is the link's ring-step latency above which the pipeline
// decodes one sequence faster than tp does: tensor parallelism pays its
// per-token collectives' steps, the pipeline one step per boundary and
// its stages in turn. Zero when the pipeline is faster at any latency,
// negative when tp has no network to lose.
func (p *Pipeline) CrossoverStep(tp *DecodeEstimate, tpSize int) time.Duration {
	if tp == nil || tp.Collectives() == 0 {
		return -1
	}
	tpSteps := tp.AllReduces*2*(tpSize-1) + tp.AllGathers*(tpSize-1)
	ppSteps := p.Stages - 1
	// Per token with the steps taken out: what each pays apart from them.
	tpRest := tp.PerToken - time.Duration(tpSteps)*tp.Link.Step
	ppRest := p.PerToken - time.Duration(ppSteps)*p.Link.Step
	if ppRest <= tpRest {
		return 0
	}
	return (ppRest - tpRest) / time.Duration(tpSteps-ppSteps)
}

// describe names a stage's share for the report.
func (s Stage) describe() string {
	ends := ""
	switch {
	case s.Embedding && s.LMHead:
		ends = ", the embedding, final norm and LM head"
	case s.Embedding:
		ends = " and the embedding"
	case s.LMHead:
		ends = ", final norm and LM head"
	}
	return fmt.Sprintf("%s (layers %d-%d%s)", gib(s.Weights), s.FirstLayer, s.FirstLayer+s.Layers-1, ends)
}
