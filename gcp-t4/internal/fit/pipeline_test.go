package fit

import (
	"math"
	"slices"
	"testing"
	"time"
)

func examplePipeline(t *testing.T, cfg Config) *Pipeline {
	t.Helper()
	p, err := ComputePipeline(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		t.Fatal("no pipeline estimate")
	}
	return p
}

// Layers split as vLLM's get_pp_indices splits them: evenly, a remainder
// going one layer each to the stages before the last, from the one next
// to it backwards.
func TestPipelineLayerSplit(t *testing.T) {
	for _, tc := range []struct {
		layers, stages int
		want           []int
	}{
		{40, 2, []int{20, 20}},
		{41, 2, []int{21, 20}},
		{42, 4, []int{10, 11, 11, 10}},
		{43, 4, []int{11, 11, 11, 10}},
	} {
		if got := ppLayers(tc.layers, tc.stages); !slices.Equal(got, tc.want) {
			t.Errorf("%d layers over %d stages: %v, want %v", tc.layers, tc.stages, got, tc.want)
		}
	}
}

// Mistral-Nemo with pipeline_parallel_size 2 at the example's settings,
// by hand from config.json:
//
//	a layer at tp 1: qkv 5120 x 6144 + o 4096 x 5120 + gate/up 5120 x
//	28672 + down 14336 x 5120 = 272,629,760 weights, 545,259,520 bytes;
//	20 layers 10,905,190,400 bytes, their 40 norms 409,600.
//	stage 0: + embedding 131072 x 5120 x 2 = 1,342,177,280:
//	12,247,777,280 bytes.
//	stage 1: + final norm 10,240 + LM head 1,342,177,280: 12,247,787,520.
//	Together the whole model (2 x 12,247,782,400), each about what a
//	tensor-parallel GPU holds: the embedding whole on one stage instead of
//	half on each GPU.
//
//	KV cache per token per stage: 2 x 20 layers x 8 KV heads x 128 x 2 =
//	81,920 bytes (80 KiB, as at tp 2: half the layers, all the heads).
//	activation peak at tp 1: the MLP block, 2048 x 2 x (2 x 5120 + 2 x
//	14336 + 14336 + 5120) = 239,075,328; stage 1 adds the incoming
//	tensors' buffer, 2 x 2048 x 5120 x 2 = 41,943,040.
//	KV room, stage 1: 15,045,807,308 - 12,247,787,520 - 262,144,000 (RoPE)
//	- 268,435,456 - 281,018,368 = 1,986,421,964: 1515 blocks, 24,240
//	tokens; stage 0: 2,028,375,244, 24,752 tokens. The engine: 24,240.
func TestPipelineStagesOfTheExample(t *testing.T) {
	p := examplePipeline(t, exampleConfig(t))
	if p.Stages != 2 || len(p.Stage) != 2 {
		t.Fatalf("%d stages: %+v", p.Stages, p.Stage)
	}
	s0, s1 := p.Stage[0], p.Stage[1]
	checkAll(t, []check{
		{"stage 0 first layer", int64(s0.FirstLayer), 0},
		{"stage 0 layers", int64(s0.Layers), 20},
		{"stage 1 first layer", int64(s1.FirstLayer), 20},
		{"stage 1 layers", int64(s1.Layers), 20},
		{"stage 0 weights", s0.Weights, 12_247_777_280},
		{"stage 1 weights", s1.Weights, 12_247_787_520},
		{"stage 0 embedding", s0.EmbeddingBytes, 1_342_177_280},
		{"stage 1 embedding", s1.EmbeddingBytes, 0},
		{"KV bytes per token", s0.KVBytesPerToken, 81_920},
		{"stage 0 activation", s0.Activation, 239_075_328},
		{"stage 1 activation", s1.Activation, 239_075_328 + 41_943_040},
		{"stage 0 KV room", s0.KVRoom, 2_028_375_244},
		{"stage 1 KV room", s1.KVRoom, 1_986_421_964},
		{"stage 0 KV tokens", s0.KVTokens, 24_752},
		{"stage 1 KV tokens", s1.KVTokens, 24_240},
		{"engine KV tokens", p.KVTokens, 24_240},
		{"RoPE cache per GPU", p.RoPECache, 262_144_000},
	})
	if !s0.Embedding || s0.LMHead || s1.Embedding || !s1.LMHead || !p.Fits {
		t.Errorf("ends: stage 0 %+v, stage 1 %+v, fits %v", s0, s1, p.Fits)
	}
	whole, err := Compute(func() Config { c := exampleConfig(t); c.TP = 1; return c }())
	if err != nil {
		t.Fatal(err)
	}
	if s0.Weights+s1.Weights != whole.Weights {
		t.Errorf("stages hold %d bytes, the model is %d", s0.Weights+s1.Weights, whole.Weights)
	}
	tp, _ := Compute(exampleConfig(t))
	if p.KVTokens >= tp.KVTokens {
		t.Errorf("pipeline KV %d tokens, tensor parallel %d: the stages' larger activations must leave less", p.KVTokens, tp.KVTokens)
	}

	// A tied LM head is the embedding: vLLM gives the last stage its own
	// copy, so the stages together hold one embedding more than the model.
	cfg := exampleConfig(t)
	cfg.Model.Tied = true
	tied := examplePipeline(t, cfg)
	cfg.TP = 1
	one, _ := Compute(cfg)
	emb := int64(1_342_177_280)
	if tied.Stage[0].Weights+tied.Stage[1].Weights != one.Weights+emb || tied.Stage[1].Weights != s1.Weights {
		t.Errorf("tied: stages %d + %d, model %d; want the model plus one embedding, the last stage as untied", tied.Stage[0].Weights, tied.Stage[1].Weights, one.Weights)
	}
}

// Decode over the two podVMs at the assumed link (a 250 us ring step,
// 1 GB/s):
//
//	stage 0 reads 10,905,600,000 + 1024 x 81,920 = 10,989,486,080 bytes at
//	240 GB/s: 45.7895 ms; stage 1 12,331,673,600: 51.3820 ms; one send of
//	20,480 bytes: 250 us + 20.48 us. One sequence: 97.4418 ms, 10.26
//	tokens/s, against tensor parallelism's 90.2980 ms.
//	8 sequences as one batch: 48.2362 + 53.8287 + 0.25 + 0.16384 =
//	102.4787 ms, 78.06 tokens/s. As two micro-batches of 4: the cycle
//	46.8381 + 52.4305 + 0.3319 = 99.6005 ms, the busier stage's two turns
//	104.8610 ms: 76.29 tokens/s (each micro-batch reads the weights again).
//	Crossover: tensor parallelism's 90.2980 ms less 163 steps of 250 us is
//	49.5480 ms, the pipeline's 97.4418 less one step 97.1918 ms; 47.6438
//	ms over 162 steps: 294.1 us a step.
func TestPipelineDecodeAgainstTensorParallel(t *testing.T) {
	cfg := exampleConfig(t)
	p := examplePipeline(t, cfg)
	tp, _ := Compute(cfg)
	near := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %.4f, want %.4f", name, got, want)
		}
	}
	near("stage 0 ms", ms(p.Stage[0].Memory), 45.7895, 0.001)
	near("stage 1 ms", ms(p.Stage[1].Memory), 51.3820, 0.001)
	near("send ms", ms(p.Send), 0.27048, 0.00001)
	near("per token ms", ms(p.PerToken), 97.4418, 0.001)
	near("tokens/s", p.TokensPerSecond, 10.2625, 0.001)
	near("batch ms", ms(p.BatchPerStep), 102.4787, 0.001)
	near("batch tokens/s", p.BatchTokensPerSecond, 78.064, 0.01)
	near("overlap ms", ms(p.OverlapPerStep), 104.8610, 0.001)
	near("overlap tokens/s", p.OverlapTokensPerSecond, 76.292, 0.01)
	if p.Batch != 8 || p.MicroBatches != 2 || p.MicroBatch != 4 {
		t.Errorf("batch %d as %d x %d, want 8 as 2 x 4", p.Batch, p.MicroBatches, p.MicroBatch)
	}
	x := p.CrossoverStep(tp.Decode, 2)
	near("crossover us", float64(x)/float64(time.Microsecond), 294.1, 0.1)

	// Where the network is fast, a lone sequence is slower through the
	// pipeline: its stages run one after the other, while tensor
	// parallelism splits every layer across both GPUs.
	for _, lat := range []time.Duration{20 * time.Microsecond, 2 * (x - 5*time.Microsecond)} {
		c := exampleConfig(t)
		c.Decode.NCCLLatency = lat
		r, _ := Compute(c)
		pp := examplePipeline(t, c)
		if pp.PerToken <= r.Decode.PerToken {
			t.Errorf("2-rank all-reduce %s: pipeline %s per token, tensor parallel %s; want the pipeline slower", lat, pp.PerToken, r.Decode.PerToken)
		}
	}
	// Past the crossover the 163 ring steps a token cost tensor
	// parallelism outweigh the pipeline's bubble.
	for _, lat := range []time.Duration{2 * (x + 5*time.Microsecond), 2 * time.Millisecond} {
		c := exampleConfig(t)
		c.Decode.NCCLLatency = lat
		r, _ := Compute(c)
		pp := examplePipeline(t, c)
		if pp.PerToken >= r.Decode.PerToken {
			t.Errorf("2-rank all-reduce %s: pipeline %s per token, tensor parallel %s; want the pipeline faster", lat, pp.PerToken, r.Decode.PerToken)
		}
	}
	// Inside one VM there is no network to save: the pipeline only loses.
	c := exampleConfig(t)
	c.Decode.Path = PathHost
	host, _ := Compute(c)
	if pp := examplePipeline(t, c); pp.CrossoverStep(host.Decode, 2) <= host.Decode.Link.Step || pp.PerToken <= host.Decode.PerToken {
		t.Errorf("host path: pipeline %s against %s per token", pp.PerToken, host.Decode.PerToken)
	}
	// One GPU: nothing to compare.
	c = exampleConfig(t)
	c.TP = 1
	if pp, err := ComputePipeline(c); pp != nil || err != nil {
		t.Errorf("tp 1: %+v, %v", pp, err)
	}
}

// Time to first token for 2048 tokens: each stage's 20 layers are the
// same FLOPs as a tensor-parallel GPU's half of all 40 (23.0214 TFLOP,
// 0.920854 s at 25 TFLOPS), but one after the other: 1.841709 s; one
// send of 2048 x 20,480 = 41,943,040 bytes, 41.943 ms + 250 us, instead
// of tensor parallelism's 81 all-reduces (1.739574 s): 1.883902 s against
// 2.660428 s.
func TestPipelinePrefill(t *testing.T) {
	cfg := exampleConfig(t)
	p := examplePipeline(t, cfg)
	if math.Abs(p.PrefillCompute.Seconds()-1.841709) > 1e-5 || math.Abs(p.PrefillNetwork.Seconds()-0.042193) > 1e-5 ||
		math.Abs(p.TTFT.Seconds()-1.883902) > 1e-5 {
		t.Errorf("compute %s, network %s, TTFT %s; want 1.841709s, 0.042193s, 1.883902s", p.PrefillCompute, p.PrefillNetwork, p.TTFT)
	}
	tp, _ := Compute(cfg)
	if p.TTFT >= tp.Prefill.TTFT {
		t.Errorf("pipeline TTFT %s, tensor parallel %s: over the VPC path the pipeline must be sooner", p.TTFT, tp.Prefill.TTFT)
	}
}

// The comparison sits on the two-podVM layout only, and needs the shape.
func TestPipelineOnTheSplitLayout(t *testing.T) {
	ls, err := Layouts(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if ls[0].Pipeline == nil || ls[1].Pipeline != nil {
		t.Errorf("pipeline on %s: %v, on %s: %v; want the two-podVM layout only", ls[0].Name, ls[0].Pipeline != nil, ls[1].Name, ls[1].Pipeline != nil)
	}
	cfg := exampleConfig(t)
	cfg.TP = 4
	ls, err = Layouts(cfg)
	if err != nil || ls[0].Pipeline == nil || ls[0].Pipeline.Stages != 4 {
		t.Fatalf("tp 4: %v", err)
	}
	// Four stages, three sends: still one step per boundary, against the
	// 4-rank ring's 6 steps per all-reduce.
	if got := ls[0].Pipeline.CrossoverStep(ls[0].Result.Decode, 4); got <= 0 || got >= 294*time.Microsecond {
		t.Errorf("tp 4 crossover %s, want below tp 2's 294us", got)
	}
	cfg = exampleConfig(t)
	cfg.Model = Model{Name: "20GB", Bytes16: 20e9, Layers: 40, KVHeads: 8, HeadDim: 128}
	if p, err := ComputePipeline(cfg); p != nil || err != nil {
		t.Errorf("no shape: %+v, %v", p, err)
	}
}
