package fit

import "time"

// DecodeEstimate is an upper bound on decode speed: per step, every GPU
// reads its weights (less the embedding table, of which a step reads one
// row per sequence) and each sequence's KV cache at the assumed context,
// at the GPU's memory bandwidth; and the tensor-parallel group runs its
// collectives one after another, each costing the measured or assumed
// small-message latency plus its payload at the measured or assumed bus
// bandwidth (decode all-reduces carry hidden_size x 2 bytes per sequence,
// 10 KiB for Mistral-Nemo: latency-bound). Nothing overlaps, and nothing
// else is counted.
type DecodeEstimate struct {
	// Bandwidth is the memory bandwidth used, bytes per second.
	Bandwidth float64
	// WeightBytes and KVBytes are read per GPU per step (KVBytes for one
	// sequence at Context tokens).
	WeightBytes, KVBytes int64
	Context              int
	// Collectives is the per-step count: per decoder layer the all-reduces
	// after o_proj and down_proj (RowParallelLinear, llama.py), one
	// all-reduce in VocabParallelEmbedding and one all-gather of the
	// logits (logits_processor.py; V1 uses all-gather). Zero at tp 1.
	Collectives int
	Latency     time.Duration
	Measured    bool
	// BusBandwidth (bytes per second, NCCL's busbw) prices the payloads;
	// Payload is one step's at batch 1, all collectives together.
	BusBandwidth         float64
	BusBandwidthMeasured bool
	Payload              int64
	// Memory and Network are the two terms of one step at batch 1.
	Memory, Network time.Duration
	// PerToken = Memory + Network; TokensPerSecond for one sequence.
	PerToken        time.Duration
	TokensPerSecond float64
	// Batch is the sequences decoding together: max_num_seqs, or fewer when
	// the KV cache holds fewer at Context tokens each. The weights are read
	// once per step for all of them; KV reads and payloads add up.
	Batch                int
	BatchPerStep         time.Duration
	BatchTokensPerSecond float64
}

// collectivesPerToken is the number of collectives one decode step runs
// across a tensor-parallel group, for a Llama/Mistral decoder of layers
// layers (see DecodeEstimate.Collectives).
func collectivesPerToken(layers, tp int) int {
	if tp <= 1 {
		return 0
	}
	return 2*layers + 2
}

// collectivePayload is the bytes one decode step of one sequence puts on
// the wire, priced as NCCL's bus bandwidth defines it (nccl-tests
// PERFORMANCE.md): an all-reduce of S bytes over n ranks moves
// S x 2(n-1)/n, an all-gather of S bytes in total S x (n-1)/n. The
// all-reduces carry one hidden state; the all-gather the logits, padded
// vocabulary at the activation dtype.
func collectivePayload(m Model, tp, act int) int64 {
	if tp <= 1 || !m.hasShape() {
		return 0
	}
	n := int64(tp)
	hidden := int64(m.Hidden) * int64(act)
	logits := ceilDiv(int64(m.Vocab), vocabPadding) * vocabPadding * int64(act)
	allReduces := int64(2*m.Layers + 1)
	return allReduces*hidden*2*(n-1)/n + logits*(n-1)/n
}

func estimateDecode(r Result) *DecodeEstimate {
	c := r.Config
	m := c.Model
	if !m.hasArch() || c.Decode.Context < 1 {
		return nil
	}
	d := &DecodeEstimate{
		Bandwidth: c.GPU.Bandwidth, Context: c.Decode.Context,
		Latency: c.Decode.NCCLLatency, Measured: c.Decode.Measured,
		BusBandwidth: c.Decode.BusBandwidth, BusBandwidthMeasured: c.Decode.BusBandwidthMeasured,
		Collectives: collectivesPerToken(m.Layers, c.TP),
		Batch:       c.MaxNumSeqs,
	}
	if r.KVTokens >= 0 {
		d.Batch = int(min(int64(d.Batch), max(1, r.KVTokens/int64(d.Context))))
	}
	if c.Decode.Bandwidth > 0 {
		d.Bandwidth = c.Decode.Bandwidth
	}
	if d.Bandwidth <= 0 {
		return nil
	}
	d.WeightBytes = r.WeightsPerGPU - r.EmbeddingPerGPU
	d.KVBytes = int64(d.Context) * r.KVBytesPerToken
	seconds := func(bytes int64) time.Duration {
		return time.Duration(float64(bytes) / d.Bandwidth * float64(time.Second))
	}
	d.Memory = seconds(d.WeightBytes + d.KVBytes)
	d.Payload = collectivePayload(m, c.TP, r.DtypeBytes)
	network := func(batch int) time.Duration {
		if d.Collectives == 0 {
			return 0
		}
		wire := float64(int64(batch)*d.Payload) / d.BusBandwidth * float64(time.Second)
		return time.Duration(d.Collectives)*d.Latency + time.Duration(wire)
	}
	d.Network = network(1)
	d.PerToken = d.Memory + d.Network
	d.TokensPerSecond = float64(time.Second) / float64(d.PerToken)
	d.BatchPerStep = seconds(d.WeightBytes+int64(d.Batch)*d.KVBytes) + network(d.Batch)
	d.BatchTokensPerSecond = float64(d.Batch) * float64(time.Second) / float64(d.BatchPerStep)
	return d
}
