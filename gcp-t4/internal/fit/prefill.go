package fit

import "time"

// PrefillEstimate is the time to first token for one prompt alone: vLLM
// v0.11's V1 scheduler prefills in chunks of at most
// max_num_batched_tokens (chunked prefill is on by default behind the
// OpenAI server), and each chunk costs, one after another:
//
//   - compute: 2 FLOPs per linear weight per token, plus causal attention
//     (4 x heads per GPU x head_dim FLOPs per token and key), at the
//     GPU's assumed realistic fp16 rate, or the time to read the weights
//     once if that is longer;
//   - network: per decoder layer two all-reduces of the chunk's hidden
//     states (chunk x hidden_size x 2 bytes: 20 MiB for 2048 tokens of
//     Mistral-Nemo) and the embedding's one, priced at the link's bus
//     bandwidth, plus each collective's ring latency.
//
// The first token is sampled from the last chunk's logits. A decode step
// scheduled beside a full chunk waits for the chunk: ChunkStep is that
// stall. Queueing, tokenisation and sampling are not counted.
type PrefillEstimate struct {
	PromptTokens, ChunkTokens, Chunks int
	// FLOPs is per GPU, all chunks; FLOPS the rate used (assumed
	// realistic), PeakFLOPS the bound's.
	FLOPs, FLOPS, PeakFLOPS float64
	// Bytes is the all-reduce payload per GPU, all chunks, at NCCL's bus
	// bandwidth definition.
	Bytes int64
	// Compute, Network and TTFT are at the realistic figures; TTFTBound at
	// the peaks.
	Compute, Network, TTFT, TTFTBound time.Duration
	// ChunkStep is one full chunk at the realistic figures.
	ChunkStep time.Duration
}

// linearParamsPerGPU counts one GPU's linear-layer weights (what a
// token's GEMMs multiply by): q/k/v, o, gate/up and down of every layer.
func linearParamsPerGPU(m Model, tp int) int64 {
	t := int64(tp)
	h, hd := int64(m.Hidden), int64(m.HeadDim)
	qOut := int64(m.Heads) * hd / t
	kvOut := 2 * int64(kvHeadsPerGPU(m, tp)) * hd
	inter := int64(m.Intermediate) / t
	return int64(m.Layers) * (h*(qOut+kvOut) + qOut*h + h*2*inter + inter*h)
}

// chunkCost is one chunk of c tokens after p tokens of the same prompt.
func chunkCost(r Result, link Link, c, p int64, flops, bandwidth, busbw float64) (compute, network time.Duration, bytes int64, fl float64) {
	cfg := r.Config
	m := cfg.Model
	headsPerGPU := float64(m.Heads / cfg.TP)
	fl = 2*float64(linearParamsPerGPU(m, cfg.TP))*float64(c) +
		float64(m.Layers)*4*headsPerGPU*float64(m.HeadDim)*float64(c)*(float64(p)+float64(c+1)/2)
	compute = max(time.Duration(fl/flops*float64(time.Second)), seconds(r.WeightsPerGPU, bandwidth))
	if cfg.TP > 1 {
		bytes = collectivePayload(m, cfg.TP, r.DtypeBytes, c, 1)
		allReduces, allGathers := collectivesPerToken(m.Layers, cfg.TP)
		network = time.Duration(allReduces)*link.AllReduce(cfg.TP) + time.Duration(allGathers)*link.AllGather(cfg.TP) + wire(bytes, busbw)
	}
	return compute, network, bytes, fl
}

func estimatePrefill(r Result) *PrefillEstimate {
	c := r.Config
	m := c.Model
	if !m.hasShape() || c.Decode.PromptTokens < 1 || c.GPU.RealisticFP16FLOPS <= 0 || r.Decode == nil {
		return nil
	}
	link := r.Decode.Link
	e := &PrefillEstimate{PromptTokens: c.Decode.PromptTokens, ChunkTokens: c.MaxNumBatchedTokens,
		FLOPS: c.GPU.RealisticFP16FLOPS, PeakFLOPS: c.GPU.FP16FLOPS}
	var bound time.Duration
	for done := 0; done < e.PromptTokens; done += e.ChunkTokens {
		n := int64(min(e.ChunkTokens, e.PromptTokens-done))
		comp, net, bytes, fl := chunkCost(r, link, n, int64(done), e.FLOPS, r.Decode.Bandwidth, link.BusBandwidth)
		e.Chunks++
		e.Compute += comp
		e.Network += net
		e.Bytes += bytes
		e.FLOPs += fl
		bc, bn, _, _ := chunkCost(r, link, n, int64(done), e.PeakFLOPS, r.Decode.PeakBandwidth, link.PeakBusBandwidth)
		bound += bc + bn
	}
	full, fnet, _, _ := chunkCost(r, link, int64(e.ChunkTokens), 0, e.FLOPS, r.Decode.Bandwidth, link.BusBandwidth)
	e.ChunkStep = full + fnet
	e.TTFT, e.TTFTBound = e.Compute+e.Network, bound
	return e
}
