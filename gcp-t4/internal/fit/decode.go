package fit

import "time"

// DecodeEstimate is the decode estimate at assumed realistic figures,
// with the bound at the peak ones beside it: per step, every GPU reads
// its weights (less the embedding table, of which a step reads one row per
// sequence) and each sequence's KV cache at the assumed context, at the
// memory bandwidth; and the tensor-parallel group runs its collectives
// one after another, each costing its ring latency (steps x the link's
// step latency) plus its payload at the link's bus bandwidth (decode
// all-reduces carry hidden_size x 2 bytes per sequence, 10 KiB for
// Mistral-Nemo: latency-bound). Nothing overlaps, and nothing else is
// counted.
type DecodeEstimate struct {
	// Bandwidth is the memory bandwidth the estimate uses (assumed
	// realistic unless BandwidthGiven), PeakBandwidth the bound's.
	Bandwidth, PeakBandwidth float64
	BandwidthGiven           bool
	// WeightBytes and KVBytes are read per GPU per step (KVBytes for one
	// sequence at Context tokens).
	WeightBytes, KVBytes int64
	Context              int
	// AllReduces and AllGathers are the per-step collectives: per decoder
	// layer the all-reduces after o_proj and down_proj (RowParallelLinear,
	// llama.py), one all-reduce in VocabParallelEmbedding, and one
	// all-gather of the logits (logits_processor.py; V1 uses all-gather).
	// Zero at tp 1.
	AllReduces, AllGathers int
	Link                   Link
	// Latency is one step's collective latency, all collectives together.
	Latency time.Duration
	// Payload is one step's bus bytes at batch 1, all collectives together.
	Payload int64
	// Memory and Network are the two terms of one step at batch 1;
	// MemoryBound and NetworkBound the same at the peak figures.
	Memory, Network           time.Duration
	MemoryBound, NetworkBound time.Duration
	// PerToken = Memory + Network; TokensPerSecond for one sequence;
	// BoundTokensPerSecond at the peak figures.
	PerToken                              time.Duration
	TokensPerSecond, BoundTokensPerSecond float64
	// Batch is the sequences decoding together: max_num_seqs, or fewer when
	// the KV cache holds fewer at Context tokens each. The weights are read
	// once per step for all of them; KV reads and payloads add up.
	Batch                int
	BatchPerStep         time.Duration
	BatchTokensPerSecond float64
}

// Collectives is the per-step count.
func (d *DecodeEstimate) Collectives() int { return d.AllReduces + d.AllGathers }

// collectivesPerToken is the number of collectives one decode step runs
// across a tensor-parallel group, for a Llama/Mistral decoder of layers
// layers (see DecodeEstimate.AllReduces).
func collectivesPerToken(layers, tp int) (allReduces, allGathers int) {
	if tp <= 1 {
		return 0, 0
	}
	return 2*layers + 1, 1
}

// collectivePayload is the bytes tokens tokens of one step put on the
// wire, priced as NCCL's bus bandwidth defines it (nccl-tests
// PERFORMANCE.md): an all-reduce of S bytes over n ranks moves
// S x 2(n-1)/n, an all-gather of S bytes in total S x (n-1)/n. The
// all-reduces carry one hidden state per token; the all-gather the logits,
// padded vocabulary at the activation dtype, per sequence sampled.
func collectivePayload(m Model, tp, act int, tokens, sampled int64) int64 {
	if tp <= 1 || !m.hasShape() {
		return 0
	}
	n := int64(tp)
	hidden := tokens * int64(m.Hidden) * int64(act)
	logits := sampled * ceilDiv(int64(m.Vocab), vocabPadding) * vocabPadding * int64(act)
	allReduces := int64(2*m.Layers + 1)
	return allReduces*hidden*2*(n-1)/n + logits*(n-1)/n
}

func seconds(bytes int64, bandwidth float64) time.Duration {
	return time.Duration(float64(bytes) / bandwidth * float64(time.Second))
}

func estimateDecode(r Result) *DecodeEstimate {
	c := r.Config
	m := c.Model
	if !m.hasArch() || c.Decode.Context < 1 {
		return nil
	}
	link, err := linkFor(c.Decode.Path, c.Decode)
	if err != nil {
		return nil
	}
	d := &DecodeEstimate{
		Bandwidth: c.GPU.RealisticBandwidth, PeakBandwidth: c.GPU.Bandwidth, Context: c.Decode.Context,
		Link: link, Batch: c.MaxNumSeqs,
	}
	d.AllReduces, d.AllGathers = collectivesPerToken(m.Layers, c.TP)
	if r.KVTokens >= 0 {
		d.Batch = int(min(int64(d.Batch), max(1, r.KVTokens/int64(d.Context))))
	}
	if c.Decode.Bandwidth > 0 {
		d.Bandwidth, d.BandwidthGiven = c.Decode.Bandwidth, true
		d.PeakBandwidth = max(d.PeakBandwidth, d.Bandwidth)
	}
	if d.Bandwidth <= 0 || d.PeakBandwidth <= 0 {
		return nil
	}
	d.WeightBytes = r.WeightsPerGPU - r.EmbeddingPerGPU
	d.KVBytes = int64(d.Context) * r.KVBytesPerToken
	d.Memory = seconds(d.WeightBytes+d.KVBytes, d.Bandwidth)
	d.MemoryBound = seconds(d.WeightBytes+d.KVBytes, d.PeakBandwidth)
	d.Latency = time.Duration(d.AllReduces)*link.AllReduce(c.TP) + time.Duration(d.AllGathers)*link.AllGather(c.TP)
	d.Payload = collectivePayload(m, c.TP, r.DtypeBytes, 1, 1)
	network := func(batch int, bw float64) time.Duration {
		if d.Collectives() == 0 {
			return 0
		}
		return d.Latency + wire(int64(batch)*d.Payload, bw)
	}
	d.Network = network(1, link.BusBandwidth)
	d.NetworkBound = network(1, link.PeakBusBandwidth)
	d.PerToken = d.Memory + d.Network
	d.TokensPerSecond = float64(time.Second) / float64(d.PerToken)
	d.BoundTokensPerSecond = float64(time.Second) / float64(d.MemoryBound+d.NetworkBound)
	d.BatchPerStep = seconds(d.WeightBytes+int64(d.Batch)*d.KVBytes, d.Bandwidth) + network(d.Batch, link.BusBandwidth)
	d.BatchTokensPerSecond = float64(d.Batch) * float64(time.Second) / float64(d.BatchPerStep)
	return d
}
