package fit

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every catalogue entry is a config.json fixture with its source; the
// shape of an unquantised one must reproduce the parameter count its model
// card publishes (which is what sizes the weights), and a quantised one
// must have its base's shape.
func TestCatalogueParameterCounts(t *testing.T) {
	want := map[string]int64{
		// 32 x (4096x6144 + 4096x4096 + 3x4096x14336 + 2x4096) + 2x32768x4096 + 4096
		"mistralai/Mistral-7B-Instruct-v0.3": 7_248_023_552,
		// 36 x (4096x6144 + 4096x4096 + 3x4096x12288 + 2x4096) + 2x131072x4096 + 4096
		"mistralai/Ministral-8B-Instruct-2410": 8_019_808_256,
		// 40 x (5120x6144 + 4096x5120 + 3x5120x14336 + 2x5120) + 2x131072x5120 + 5120
		"mistralai/Mistral-Nemo-Instruct-2407": 12_247_782_400,
		// 40 x (5120x6144 + 4096x5120 + 3x5120x32768 + 2x5120) + 2x131072x5120 + 5120
		"mistralai/Mistral-Small-24B-Instruct-2501": 23_572_403_200,
	}
	names := ModelNames()
	if len(names) < 8 {
		t.Fatalf("catalogue has %d models (%v); the fixtures did not load", len(names), names)
	}
	bases := 0
	for _, name := range names {
		m, err := LookupModel(strings.ToUpper(name))
		if err != nil {
			t.Fatal(err)
		}
		if m.Name != name || !strings.HasPrefix(m.Source, "https://huggingface.co/"+name+"/") {
			t.Errorf("%s: name %q, source %q", name, m.Name, m.Source)
		}
		if m.Base == "" {
			bases++
			if m.PublishedParams != want[name] || m.Params != want[name] {
				t.Errorf("%s: shape gives %d parameters, fixture publishes %d, want %d", name, m.Params, m.PublishedParams, want[name])
			}
			continue
		}
		base, err := LookupModel(m.Base)
		if err != nil {
			t.Fatalf("%s: base %s: %v", name, m.Base, err)
		}
		if m.Quant.Method == None || m.Params != base.Params || m.Hidden != base.Hidden || m.Intermediate != base.Intermediate || m.MaxPositions != base.MaxPositions {
			t.Errorf("%s: quant %v, %d parameters; want a quantised copy of %s's %d", name, m.Quant, m.Params, m.Base, base.Params)
		}
	}
	if bases != len(want) {
		t.Errorf("%d unquantised entries, the test knows %d", bases, len(want))
	}
}

// A downloaded config.json carries many more keys than the calculator
// reads; they are ignored, and missing ones are named.
func TestParseConfigJSON(t *testing.T) {
	full := `{"architectures":["MistralForCausalLM"],"attention_dropout":0.0,"bos_token_id":1,"eos_token_id":2,
	"head_dim":128,"hidden_act":"silu","hidden_size":5120,"initializer_range":0.02,"intermediate_size":14336,
	"max_position_embeddings":1024000,"model_type":"mistral","num_attention_heads":32,"num_hidden_layers":40,
	"num_key_value_heads":8,"rms_norm_eps":1e-05,"rope_theta":1000000.0,"sliding_window":null,
	"tie_word_embeddings":false,"torch_dtype":"bfloat16","transformers_version":"4.43.0.dev0","use_cache":true,"vocab_size":131072}`
	m, err := ParseConfigJSON(strings.NewReader(full), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if m.Params != 12_247_782_400 || m.HeadDim != 128 || m.CheckpointDtype != "bfloat16" || m.MaxPositions != 1_024_000 {
		t.Errorf("parsed %+v", m)
	}
	// No head_dim: hidden_size / num_attention_heads (Mistral-7B-v0.3's config).
	noHD := `{"hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"vocab_size":32768}`
	if m, err := ParseConfigJSON(strings.NewReader(noHD), "x"); err != nil || m.HeadDim != 128 {
		t.Errorf("head_dim %d, %v; want 128", m.HeadDim, err)
	}
	for doc, want := range map[string]string{
		`{"hidden_size":4096}`: "lacks intermediate_size, num_attention_heads, num_hidden_layers, num_key_value_heads, vocab_size",
		`not json`:             "not a config.json",
		`{"architectures":["MixtralForCausalLM"],"hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"vocab_size":32000}`:                                                    "mixture of experts",
		`{"hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"vocab_size":32768,"quantization_config":{"quant_method":"awq","bits":4,"group_size":128,"zero_point":false}}`: "without zero_point",
		`{"hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"vocab_size":32768,"quantization_config":{"quant_method":"awq","bits":3,"group_size":128}}`:                    "4 bits only",
		`{"hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"vocab_size":32768,"quantization_config":{"quant_method":"bitsandbytes"}}`:                                     `quant_method "bitsandbytes"`,
	} {
		if _, err := ParseConfigJSON(strings.NewReader(doc), "x"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.60s: error %v, want %q", doc, err, want)
		}
	}
}

func t4(t *testing.T) GPU {
	t.Helper()
	g, err := LookupGPU("T4")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func model(t *testing.T, id string) Model {
	t.Helper()
	m, err := LookupModel(id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const nemoID = "mistralai/Mistral-Nemo-Instruct-2407"

// exampleConfig is install/examples/mistral-tp2's engine_kwargs (the
// test/kuberay module checks the manifest says the same).
func exampleConfig(t *testing.T) Config {
	return Config{
		Model: model(t, nemoID), GPU: t4(t), TP: 2, Dtype: "half",
		MaxModelLen: 8192, GPUMemoryUtilization: 0.95, EnforceEager: true,
		MaxNumBatchedTokens: 2048, MaxNumSeqs: 8,
		Overheads: DefaultOverheads, Decode: DefaultDecode,
	}
}

type check struct {
	name      string
	got, want int64
}

func checkAll(t *testing.T, cs []check) {
	t.Helper()
	for _, c := range cs {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// Mistral-Nemo over two T4s at the example's settings, by hand from
// config.json (hidden 5120, 40 layers, 32 heads, 8 KV heads, head_dim 128,
// intermediate 14336, vocab 131072, untied, max_position_embeddings
// 1,024,000):
//
//	per GPU, per layer at 2 bytes: qkv 5120 x (2048 + 1024) = 31,457,280;
//	o 2048 x 5120 = 20,971,520; gate_up 5120 x 14336 = 146,800,640;
//	down 7168 x 5120 = 73,400,320: 272,629,760 x 40 = 10,905,190,400.
//	norms (replicated) 81 x 5120 x 2 = 829,440; embedding and LM head
//	65536 x 5120 x 2 = 671,088,640 each. Total 12,248,197,120.
//	RoPE cos_sin_cache (vLLM rotary_embedding/base.py, counted as
//	weights, not sharded): 1,024,000 x 128 x 2 = 262,144,000.
//	budget floor(0.95 x 14.75 GiB = 15,837,691,904) = 15,045,807,308;
//	headroom 791,884,596, less the 0.5 GiB context: 255,013,684.
//	activation (eager profile run, gpu_model_runner.py profile_run): MLP
//	block 2048 x 2 x (residual 5120 + input 5120 + gate_up 14336 + act
//	7168 + down 5120 + the all-reduce's output 5120) = 171,966,464;
//	sampler: the hidden states 2048 x 5120 x 2 = 20,971,520 plus 8 x
//	131072 x 32 = 33,554,432: 54,525,952.
//	KV room 15,045,807,308 - 12,248,197,120 - 262,144,000 - (0.25 GiB +
//	171,966,464) = 2,095,064,268; per token 2 x 40 x 4 x 128 x 2 = 81,920
//	bytes; whole 16-token blocks of 1,310,720: 1598 -> 25,568 tokens.
func TestExampleModelFitsTwoT4s(t *testing.T) {
	r, err := Compute(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, []check{
		{"weights", r.Weights, 12_247_782_400 * 2},
		{"weights per GPU", r.WeightsPerGPU, 12_248_197_120},
		{"RoPE cache", r.RoPECache, 262_144_000},
		{"embedding per GPU", r.EmbeddingPerGPU, 671_088_640},
		{"budget", r.Budget, 15_045_807_308},
		{"headroom", r.Headroom, 791_884_596},
		{"headroom spare", r.HeadroomSpare, 255_013_684},
		{"forward peak", r.ForwardPeak, 171_966_464},
		{"sampler peak", r.SamplerPeak, 54_525_952},
		{"activation", r.Activation, 171_966_464},
		{"KV room", r.KVRoom, 2_095_064_268},
		{"KV bytes per token", r.KVBytesPerToken, 81_920},
		{"KV tokens", r.KVTokens, 25_568},
		{"fewest GPUs", int64(r.MinGPUs), 2},
	})
	if r.Verdict != Fits || !strings.Contains(r.Reason, "25568 tokens: 3.12 sequences") {
		t.Errorf("verdict %s (%s), want %s with 25568 tokens", r.Verdict, r.Reason, Fits)
	}
	// The bound: at most 26,000 tokens once the RoPE cache counts.
	if r.KVTokens > 26_000 {
		t.Errorf("KV tokens %d above 26,000", r.KVTokens)
	}
}

// vLLM v0.11.0's capture list (vllm/config/__init__.py
// _set_cudagraph_sizes, scheduler.py: [min(max_num_seqs x 2, 512)]
// expanded to 1, 2, 4 and multiples of 8, none above
// max_num_batched_tokens).
func TestCUDAGraphSizesAsVLLMCaptures(t *testing.T) {
	for _, tc := range []struct {
		seqs, tokens int
		want         []int
	}{
		{8, 2048, []int{1, 2, 4, 8, 16}},
		{1, 2048, []int{1, 2}},
		{2, 2048, []int{1, 2, 4}},
		{20, 2048, []int{1, 2, 4, 8, 16, 24, 32, 40}},
		{8, 8, []int{1, 2, 4, 8}},
	} {
		if got := cudaGraphSizes(tc.seqs, tc.tokens); !slices.Equal(got, tc.want) {
			t.Errorf("max_num_seqs %d, max_num_batched_tokens %d: %v, want %v", tc.seqs, tc.tokens, got, tc.want)
		}
	}
	// vLLM's default 256 sequences: 512 -> 1, 2, 4 and 64 multiples of 8.
	if got := cudaGraphSizes(256, 2048); len(got) != 67 || got[66] != 512 {
		t.Errorf("256 sequences: %d sizes up to %d, want 67 up to 512", len(got), got[len(got)-1])
	}
	// None with enforce_eager; 5 x 8 MiB (assumed per size) otherwise.
	cfg := exampleConfig(t)
	if r, _ := Compute(cfg); r.GraphSizes != nil || r.GraphMemory != 0 {
		t.Errorf("eager: sizes %v, memory %d; want none", r.GraphSizes, r.GraphMemory)
	}
	cfg.EnforceEager = false
	if r, _ := Compute(cfg); r.GraphMemory != 5*8<<20 || !r.GraphMemoryDerived {
		t.Errorf("graphs: %d bytes (derived %v), want 5 x 8 MiB", r.GraphMemory, r.GraphMemoryDerived)
	}
	cfg.Overheads.CUDAGraphs = GiB
	if r, _ := Compute(cfg); r.GraphMemory != GiB || r.GraphMemoryDerived {
		t.Errorf("--cuda-graph-memory 1GiB: %d bytes (derived %v)", r.GraphMemory, r.GraphMemoryDerived)
	}
}

// The decode estimate for the same settings, at the assumed realistic
// figures and at the peaks:
//
//	weights read per token per GPU 12,248,197,120 - 671,088,640 (the
//	embedding: one row) = 11,577,108,480; KV at 1024 tokens 83,886,080:
//	11,660,994,560 bytes / 240e9 B/s (assumed) = 48.5875 ms; / 320e9
//	(peak) = 36.4406 ms.
//	collectives: 81 all-reduces (2 x 40 + the embedding's) of 2 ring steps
//	and 1 all-gather of 1 step at tp 2; a step on the VPC path is 40 us +
//	3 hops x 70 us = 250 us (assumed): 81 x 500 + 250 = 40.75 ms.
//	payload per token 81 x 10,240 x 2(2-1)/2 + 131072 x 2 x (2-1)/2 =
//	960,512 bytes at 1 GB/s = 0.9605 ms: network 41.7105 ms, 90.2980 ms
//	per token, 11.074 tokens/s; bound 36.4406 + 40.75 + 0.4803 = 77.671 ms,
//	12.875 tokens/s.
//	8 sequences: (11,577,108,480 + 8 x 83,886,080) / 240e9 = 51.0342 ms +
//	40.75 ms + 8 x 0.960512 ms = 99.468 ms per step: 80.43 tokens/s.
func TestExampleDecodeEstimate(t *testing.T) {
	r, err := Compute(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	d := r.Decode
	if d == nil {
		t.Fatal("no decode estimate")
	}
	checkAll(t, []check{
		{"weight bytes", d.WeightBytes, 11_577_108_480},
		{"KV bytes", d.KVBytes, 83_886_080},
		{"all-reduces", int64(d.AllReduces), 81},
		{"all-gathers", int64(d.AllGathers), 1},
		{"payload", d.Payload, 960_512},
		{"batch", int64(d.Batch), 8},
	})
	near := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %.4f, want %.4f", name, got, want)
		}
	}
	near("memory ms", ms(d.Memory), 48.5875, 0.001)
	near("memory bound ms", ms(d.MemoryBound), 36.4406, 0.001)
	near("latency ms", ms(d.Latency), 40.75, 0.0001)
	near("network ms", ms(d.Network), 41.7105, 0.001)
	near("per token ms", ms(d.PerToken), 90.2980, 0.001)
	near("tokens/s", d.TokensPerSecond, 11.074, 0.001)
	near("bound tokens/s", d.BoundTokensPerSecond, 1000/77.6709, 0.001)
	near("batch step ms", ms(d.BatchPerStep), 51.0342+40.75+8*0.960512, 0.001)
	near("batch tokens/s", d.BatchTokensPerSecond, 8/(51.0342+40.75+8*0.960512)*1000, 0.01)

	// A measured 2-rank all-reduce replaces the assumed step: 350 us is
	// 175 us a step, 81 x 350 + 175 = 28.525 ms.
	cfg := exampleConfig(t)
	cfg.Decode.NCCLLatency = 350 * time.Microsecond
	r, _ = Compute(cfg)
	near("network at 350us", ms(r.Decode.Network), 28.525+0.960512, 0.001)
	if !r.Decode.Link.StepMeasured {
		t.Error("a given --nccl-latency is not marked measured")
	}
	// A measured memory bandwidth replaces the assumed one; the bound
	// stays at the peak.
	cfg = exampleConfig(t)
	cfg.Decode.Bandwidth = 200e9
	r, _ = Compute(cfg)
	near("memory at 200 GB/s", ms(r.Decode.Memory), 58.305, 0.001)
	near("bound at 320 GB/s", ms(r.Decode.MemoryBound), 36.4406, 0.001)
	// One GPU: no collectives at all.
	cfg.Model = model(t, "casperhansen/mistral-nemo-instruct-2407-awq")
	cfg.TP = 1
	r, _ = Compute(cfg)
	if r.Decode.Collectives() != 0 || r.Decode.Network != 0 || r.Decode.Payload != 0 {
		t.Errorf("tp 1: %d collectives, %s, %d bytes; want none", r.Decode.Collectives(), r.Decode.Network, r.Decode.Payload)
	}
}

// Collective latency grows with the ring and with the hops: a 4-rank ring
// needs 6 steps per all-reduce where 2 ranks need 2, so over the VPC path
// tensor parallelism 4 is slower than 2 even though each GPU reads half
// the weights; inside one VM (no hops) the network term nearly vanishes.
func TestRingSizeAndHops(t *testing.T) {
	cfg := exampleConfig(t)
	tp2, _ := Compute(cfg)
	cfg.TP = 4
	tp4, err := Compute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := tp4.Decode.Link
	if l.AllReduce(2) != 500*time.Microsecond || l.AllReduce(4) != 1500*time.Microsecond || l.AllGather(4) != 750*time.Microsecond {
		t.Errorf("ring latencies %s, %s, %s; want 500us, 1.5ms, 750us", l.AllReduce(2), l.AllReduce(4), l.AllGather(4))
	}
	if tp4.Decode.TokensPerSecond >= tp2.Decode.TokensPerSecond || tp4.Decode.BoundTokensPerSecond >= tp2.Decode.BoundTokensPerSecond {
		t.Errorf("over the VPC path tp 4 decodes %.1f (bound %.1f) tokens/s, tp 2 %.1f (bound %.1f): tp 4 must be no faster",
			tp4.Decode.TokensPerSecond, tp4.Decode.BoundTokensPerSecond, tp2.Decode.TokensPerSecond, tp2.Decode.BoundTokensPerSecond)
	}
	// 81 x 1.5 ms + 0.75 ms = 122.25 ms of latency at tp 4.
	if tp4.Decode.Latency != 122250*time.Microsecond {
		t.Errorf("tp 4 latency %s, want 122.25ms", tp4.Decode.Latency)
	}
	// One podVM: 8 us a step (assumed), 81 x 16 + 8 = 1.304 ms.
	cfg = exampleConfig(t)
	cfg.Decode.Path = PathHost
	host, _ := Compute(cfg)
	if host.Decode.Latency != 1304*time.Microsecond || host.Decode.Link.Hops != 0 {
		t.Errorf("host path latency %s, %d hops; want 1.304ms and none", host.Decode.Latency, host.Decode.Link.Hops)
	}
	if host.Decode.TokensPerSecond <= tp2.Decode.TokensPerSecond {
		t.Errorf("one podVM %.1f tokens/s, two %.1f: the host path must be faster", host.Decode.TokensPerSecond, tp2.Decode.TokensPerSecond)
	}
	cfg.Decode.Path = "ib"
	if r, _ := Compute(cfg); r.Decode != nil {
		t.Error("an unknown path gave an estimate")
	}
}

// Prefill of one 2048-token chunk on the example:
//
//	linear weights per GPU 40 x (5120 x 3072 + 2048 x 5120 + 5120 x 14336 +
//	7168 x 5120) = 5,452,595,200; 2 x that x 2048 = 22,333,829,939,200
//	FLOPs, plus attention 40 x 4 x 16 heads x 128 x 2048 x 1024.5 =
//	687,530,311,680: 23,021,360,250,880 at 25 TFLOPS (assumed) = 0.92085 s.
//	network: 81 all-reduces of 2048 x 5120 x 2 = 20,971,520 bytes (x
//	2(2-1)/2) and the logits row (131,072 bytes at 1/2): 1,698,824,192
//	bytes at 1 GB/s = 1.69882 s, plus 40.75 ms of ring latency: 1.73957 s.
//	time to first token 2.66043 s.
func TestExamplePrefill(t *testing.T) {
	r, err := Compute(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	e := r.Prefill
	if e == nil {
		t.Fatal("no prefill estimate")
	}
	if got := linearParamsPerGPU(r.Config.Model, 2); got != 5_452_595_200 {
		t.Errorf("linear weights per GPU %d, want 5452595200", got)
	}
	checkAll(t, []check{
		{"chunks", int64(e.Chunks), 1},
		{"FLOPs", int64(e.FLOPs), 23_021_360_250_880},
		{"bytes", e.Bytes, 1_698_824_192},
	})
	if math.Abs(e.Compute.Seconds()-0.920854) > 1e-5 || math.Abs(e.Network.Seconds()-1.739574) > 1e-5 ||
		math.Abs(e.TTFT.Seconds()-2.660428) > 1e-5 || e.ChunkStep != e.TTFT {
		t.Errorf("compute %s, network %s, TTFT %s, chunk step %s; want 0.920854s, 1.739574s, 2.660428s and the TTFT",
			e.Compute, e.Network, e.TTFT, e.ChunkStep)
	}
	if e.TTFTBound >= e.TTFT {
		t.Errorf("bound %s not below the estimate %s", e.TTFTBound, e.TTFT)
	}
	// A 5000-token prompt is three chunks (2048, 2048, 904), each later
	// one attending to the earlier ones.
	cfg := exampleConfig(t)
	cfg.Decode.PromptTokens = 5000
	long, _ := Compute(cfg)
	if long.Prefill.Chunks != 3 || long.Prefill.TTFT < 2*e.TTFT {
		t.Errorf("5000 tokens: %d chunks, %s; want 3 and more than twice %s", long.Prefill.Chunks, long.Prefill.TTFT, e.TTFT)
	}
}

// The two layouts at the same price class: the one-podVM one decodes
// faster and reaches its first token sooner, needs half the N1 vCPUs, and
// both take two T4s of quota.
func TestLayoutsCompared(t *testing.T) {
	ls, err := Layouts(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Path != PathVPC || ls[1].Path != PathHost || ls[1].Profile != "t4-2" {
		t.Fatalf("layouts %+v", ls)
	}
	split, one := ls[0], ls[1]
	// Provider price table (gcpt4/catalog/prices.json): n1-standard-8 + 2 T4 is
	// the t4-2 profile's $1.08/h; each single-T4 podVM of the example is
	// n1-standard-8 + 1 T4.
	if !one.PriceKnown || math.Abs(one.Hourly-1.08) > 0.005 || !split.PriceKnown || split.Hourly <= one.Hourly {
		t.Errorf("prices: one podVM %.2f (%v), two %.2f (%v)", one.Hourly, one.PriceKnown, split.Hourly, split.PriceKnown)
	}
	if split.QuotaGPUs != 2 || one.QuotaGPUs != 2 || split.QuotaN1VCPUs != 16 || one.QuotaN1VCPUs != 8 {
		t.Errorf("quota: %d/%d GPUs, %d/%d vCPUs", split.QuotaGPUs, one.QuotaGPUs, split.QuotaN1VCPUs, one.QuotaN1VCPUs)
	}
	sd, od := split.Result.Decode, one.Result.Decode
	if od.TokensPerSecond <= sd.TokensPerSecond || one.Result.Prefill.TTFT >= split.Result.Prefill.TTFT {
		t.Errorf("one podVM %.1f tokens/s, TTFT %s; two %.1f, %s", od.TokensPerSecond, one.Result.Prefill.TTFT, sd.TokensPerSecond, split.Result.Prefill.TTFT)
	}
	if split.Result.KVTokens != one.Result.KVTokens {
		t.Errorf("KV tokens differ by layout: %d, %d", split.Result.KVTokens, one.Result.KVTokens)
	}
	for _, l := range ls {
		if len(l.Needs) < 3 {
			t.Errorf("%s: needs %v", l.Name, l.Needs)
		}
	}
	// A measured VPC figure is not carried to the host path.
	cfg := exampleConfig(t)
	cfg.Decode.NCCLLatency = 350 * time.Microsecond
	ls, _ = Layouts(cfg)
	if !ls[0].Result.Decode.Link.StepMeasured || ls[1].Result.Decode.Link.StepMeasured {
		t.Error("the NCCL check's latency must apply to the two-podVM layout only")
	}
	// No multi-T4 profile of 3 or 8 GPUs: no comparison.
	cfg.TP = 8
	if ls, err := Layouts(cfg); err != nil || ls != nil {
		t.Errorf("tp 8: %v, %v", ls, err)
	}
}

// The example's choices, each checked against its alternative.
func TestExampleSettingsAgainstAlternatives(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(*Config)
		verdict Verdict
		reason  string
	}{
		// 14,253,922,713 - 12,248,197,120 - 262,144,000 - 440,401,920 =
		// 1,303,179,673: 994 blocks, 15,904 tokens; headroom 1,583,769,191
		// - 0.5 GiB = 1,046,898,279 holds the 5 sizes' 40 MiB of graphs.
		{"0.90 with CUDA graphs", func(c *Config) { c.GPUMemoryUtilization, c.EnforceEager = 0.90, false }, Tight, "15904 tokens: 1.94 sequences"},
		// 255,013,684 spare holds 5 x 8 MiB: vLLM 0.11 captures 1, 2, 4,
		// 8, 16 for 8 sequences, not its full list.
		{"0.95 with CUDA graphs", func(c *Config) { c.EnforceEager = false }, Fits, "25568 tokens"},
		// 256 sequences: 67 sizes x 8 MiB = 562,036,736 > 255,013,684.
		{"0.95 with CUDA graphs, 256 sequences", func(c *Config) { c.EnforceEager, c.MaxNumSeqs = false, 256 }, DoesNotFit, "(0.52 GiB for 67 sizes) are captured after the KV cache is sized"},
		// headroom 15,837,691,904 - 15,521,938,065 = 315,753,839 < 0.5 GiB;
		// floor((15,837,691,904 - 536,870,912) / 15,837,691,904, 2) = 0.96.
		{"0.98", func(c *Config) { c.GPUMemoryUtilization = 0.98 }, DoesNotFit, "--gpu-memory-utilization 0.96 or lower"},
		// vLLM's defaults: 256 sequences make the sampler 20,971,520 + 256 x
		// 131072 x 32 = 1,094,713,344: 14,253,922,713 - 12,510,341,120 -
		// 268,435,456 - 1,094,713,344 = 380,432,793, 290 blocks, 4640
		// tokens < 8192.
		{"vLLM defaults", func(c *Config) { c.GPUMemoryUtilization, c.EnforceEager, c.MaxNumSeqs = 0.90, false, 256 }, DoesNotFit, "lower --max-model-len to at most 4640"},
		{"one T4", func(c *Config) { c.TP = 1 }, DoesNotFit, "the weights alone need 22.81 GiB per GPU"},
		{"32k context", func(c *Config) { c.MaxModelLen = 32768 }, DoesNotFit, "lower --max-model-len to at most 25568"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := exampleConfig(t)
			tc.change(&cfg)
			r, err := Compute(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.verdict || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("verdict %s: %s; want %s mentioning %q", r.Verdict, r.Reason, tc.verdict, tc.reason)
			}
		})
	}
}

// The activation peak follows max_num_batched_tokens: the forward is
// linear in it, and the sampler in max_num_seqs.
func TestActivationFollowsBatchedTokens(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.MaxNumBatchedTokens = 8192
	r, err := Compute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 4 x 171,966,464.
	if r.ForwardPeak != 687_865_856 || r.Activation != 687_865_856 {
		t.Errorf("forward %d, activation %d at 8192 tokens; want 687865856", r.ForwardPeak, r.Activation)
	}
	// --activation-memory from vLLM's log replaces the derivation.
	cfg.Overheads.Activation = GiB
	r, _ = Compute(cfg)
	if r.Activation != GiB || r.ActivationDerived {
		t.Errorf("activation %d derived %v; want the given 1 GiB", r.Activation, r.ActivationDerived)
	}
}

// AWQ, by hand from awq.py's create_weights (qweight int32[in, out/8],
// qzeros int32[in/128, out/8], scales fp16[in/128, out]) for Mistral-Nemo
// at tp 1:
//
//	qkv 5120x6144: 15,728,640 + 122,880 + 491,520 = 16,343,040
//	o 4096x5120: 10,485,760 + 81,920 + 327,680 = 10,895,360
//	gate_up 5120x28672: 73,400,320 + 573,440 + 2,293,760 = 76,267,520
//	down 14336x5120: 36,700,160 + 286,720 + 1,146,880 = 38,133,760
//	141,639,680 x 40 = 5,665,587,200; + norms 829,440 + embedding and LM
//	head (fp16) 2 x 1,342,177,280 = 8,350,771,200 (7.78 GiB): one T4.
//	activation: MLP 4096 x (10240 + 28672 + 14336 + 5120) = 239,075,328
//	plus gate_up dequantised for 2048 >= 256 tokens 5120 x 28672 x 2 =
//	293,601,280: 532,676,608 (no all-reduce at tp 1). KV room
//	14,253,922,713 - 8,350,771,200 - 262,144,000 (RoPE cache) -
//	(268,435,456 + 532,676,608) = 4,839,895,449; 163,840 bytes per token,
//	2,621,440 per block: 1846 blocks, 29,536 tokens.
func TestAWQNemoFitsOneT4(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.Model = model(t, "casperhansen/mistral-nemo-instruct-2407-awq")
	cfg.TP, cfg.GPUMemoryUtilization, cfg.EnforceEager = 1, 0.90, false
	r, err := Compute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, []check{
		{"weights", r.Weights, 8_350_771_200},
		{"weights per GPU", r.WeightsPerGPU, 8_350_771_200},
		{"forward peak", r.ForwardPeak, 532_676_608},
		{"KV room", r.KVRoom, 4_839_895_449},
		{"KV tokens", r.KVTokens, 29_536},
	})
	if r.Verdict != Fits {
		t.Errorf("verdict %s: %s", r.Verdict, r.Reason)
	}
	// --quantization awq on the base model sizes the same.
	base := exampleConfig(t)
	base.Model.Quant, _ = ParseQuant("awq", 128)
	base.TP, base.GPUMemoryUtilization, base.EnforceEager = 1, 0.90, false
	if rb, _ := Compute(base); rb.Weights != r.Weights || rb.KVTokens != r.KVTokens {
		t.Errorf("--quantization awq on %s: %d bytes, %d tokens; the AWQ checkpoint %d, %d", nemoID, rb.Weights, rb.KVTokens, r.Weights, r.KVTokens)
	}
}

// Mistral-Small-24B in AWQ: the same arithmetic gives 22,229,811,200
// linear parameters x (0.5 + 2/128 + 4/(8 x 128)) = 11,549,081,600 bytes
// + 2 x 1,342,177,280 + 829,440 = 14,234,265,600 (13.26 GiB). A vLLM
// start-up log published for this very checkpoint (stelterlab/Mistral-
// Small-24B-Instruct-2501-AWQ on one A100) reports "13.31 GiB weights",
// which includes the rotary cache and buffers: within 0.5 %.
func TestAWQSmall24BAgainstAMeasurement(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.Model = model(t, "stelterlab/Mistral-Small-24B-Instruct-2501-AWQ")
	r, err := Compute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Weights != 14_234_265_600 {
		t.Errorf("weights %d, want 14234265600", r.Weights)
	}
	// vLLM's figure includes the RoPE cache: 32768 x 128 x 2 = 8,388,608.
	if r.RoPECache != 8_388_608 {
		t.Errorf("RoPE cache %d, want 8388608", r.RoPECache)
	}
	if got := float64(r.Weights+r.RoPECache) / GiB; math.Abs(got-13.31)/13.31 > 0.005 {
		t.Errorf("weights and RoPE cache %.3f GiB, more than 0.5%% from the measured 13.31 GiB", got)
	}
	// Split over two T4s it fits with room to spare, where the fp16
	// checkpoint (47.1 GB) does not.
	if r.Verdict != Fits || r.WeightsPerGPU != 7_117_547_520 {
		t.Errorf("tp 2: %s, %d bytes per GPU: %s", r.Verdict, r.WeightsPerGPU, r.Reason)
	}
}

// 8-bit GPTQ (gptq.py: pack factor 32/8 = 4; qweight int32[in/4, out],
// g_idx int32[in], qzeros int32[in/128, out/4], scales fp16[in/128, out])
// for Mistral-Nemo at tp 1:
//
//	qkv 5120x6144: 31,457,280 + 20,480 + 245,760 + 491,520 = 32,215,040
//	o 4096x5120: 20,971,520 + 16,384 + 163,840 + 327,680 = 21,479,424
//	gate_up 5120x28672: 146,800,640 + 20,480 + 1,146,880 + 2,293,760 = 150,261,760
//	down 14336x5120: 73,400,320 + 57,344 + 573,440 + 1,146,880 = 75,177,984
//	279,134,208 x 40 = 11,165,368,320 + 2,684,354,560 + 829,440 = 13,850,552,320.
//
// 4-bit GPTQ (pack factor 8): qkv 15,728,640 + 20,480 + 122,880 + 491,520
// = 16,363,520; o 10,485,760 + 16,384 + 81,920 + 327,680 = 10,911,744;
// gate_up 73,400,320 + 20,480 + 573,440 + 2,293,760 = 76,288,000; down
// 36,700,160 + 57,344 + 286,720 + 1,146,880 = 38,191,104: 141,754,368 x 40
// = 5,670,174,720 + 2,685,184,000 = 8,355,358,720.
func TestGPTQSizes(t *testing.T) {
	for id, want := range map[string]int64{
		"shuyuej/Mistral-Nemo-Instruct-2407-GPTQ-INT8": 13_850_552_320,
		"shuyuej/Mistral-Nemo-Instruct-2407-GPTQ":      8_355_358_720,
	} {
		cfg := exampleConfig(t)
		cfg.Model = model(t, id)
		r, err := Compute(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Weights != want {
			t.Errorf("%s: weights %d, want %d", id, r.Weights, want)
		}
	}
}

// Mistral-Small-24B at fp16: 47.1 GB is 21.95 GiB per T4 at tp 2.
func TestTooBigModelDoesNotFit(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.Model = model(t, "mistralai/Mistral-Small-24B-Instruct-2501")
	r, err := Compute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 40 x (31,457,280 + 20,971,520 + 5120 x 32768 x 2 + 16384 x 5120 x 2)
	// + 829,440 + 2 x 671,088,640 = 23,572,817,920.
	if r.WeightsPerGPU != 23_572_817_920 {
		t.Errorf("weights per GPU %d, want 23572817920", r.WeightsPerGPU)
	}
	if r.Verdict != DoesNotFit || r.KVTokens != 0 {
		t.Errorf("verdict %s with %d KV tokens, want %s with 0", r.Verdict, r.KVTokens, DoesNotFit)
	}
	// 47.1 GB over per-GPU budgets of 13.6 GiB needs 4; 4 divides 32 heads.
	if r.MinGPUs != 4 || !strings.Contains(r.Reason, "at least --tp 4") {
		t.Errorf("fewest GPUs %d, reason %q; want 4", r.MinGPUs, r.Reason)
	}
}

// The question: a generic 20 GB checkpoint on two T4s, vLLM defaults.
func TestGeneric20GBCheckpoint(t *testing.T) {
	r, err := Compute(Config{
		Model: Model{Name: "20GB", Bytes16: 20e9}, GPU: t4(t), TP: 2, Dtype: "half",
		MaxModelLen: 8192, GPUMemoryUtilization: 0.90, MaxNumBatchedTokens: 2048, MaxNumSeqs: 256,
		Overheads: DefaultOverheads, Decode: DefaultDecode,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.WeightsPerGPU != 10e9 || r.KVTokens != -1 || r.Decode != nil {
		t.Errorf("weights per GPU %d, KV tokens %d, decode %v; want 1e10, -1 and none (architecture unknown)", r.WeightsPerGPU, r.KVTokens, r.Decode)
	}
	// 0.90 x 14.75 GiB - 10 GB - 0.25 GiB - 1 GiB (assumed activation).
	if want := int64(14_253_922_713) - 10e9 - GiB/4 - GiB; r.KVRoom != want {
		t.Errorf("KV room %d, want %d", r.KVRoom, want)
	}
	if r.Verdict != Fits || !strings.Contains(r.Reason, "not checked") {
		t.Errorf("verdict %s: %s; want %s saying tokens were not checked", r.Verdict, r.Reason, Fits)
	}
}

func TestFloat32DoublesWeights(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.Model = Model{Name: "x", Bytes16: 10e9, Layers: 32, KVHeads: 8, HeadDim: 128}
	cfg.Dtype = "float32"
	r, err := Compute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Weights != 20e9 || r.KVBytesPerToken != 2*32*4*128*4 {
		t.Errorf("weights %d, KV/token %d; want 2e10 and %d", r.Weights, r.KVBytesPerToken, 2*32*4*128*4)
	}
}

// More GPUs than KV heads: vLLM replicates, one head per GPU.
func TestKVHeadsReplicatedBeyondTheirCount(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.Model = Model{Name: "x", Params: 1e9, Layers: 10, KVHeads: 2, HeadDim: 64, Heads: 8}
	cfg.TP = 4
	r, err := Compute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.KVBytesPerToken != 2*10*1*64*2 {
		t.Errorf("KV/token %d, want %d", r.KVBytesPerToken, 2*10*1*64*2)
	}
}

func TestComputeRejectsWhatVLLMRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"bf16 on T4", func(c *Config) { c.Dtype = "bfloat16" }, "use --dtype half"},
		{"auto dtype", func(c *Config) { c.Dtype = "auto" }, `dtype "auto"`},
		{"tp 3", func(c *Config) { c.TP = 3 }, "does not divide the model's 32 attention heads"},
		{"tp 0", func(c *Config) { c.TP = 0 }, "at least 1"},
		{"utilization 0", func(c *Config) { c.GPUMemoryUtilization = 0 }, "gpu-memory-utilization"},
		{"utilization 1.2", func(c *Config) { c.GPUMemoryUtilization = 1.2 }, "gpu-memory-utilization"},
		{"max-model-len 0", func(c *Config) { c.MaxModelLen = 0 }, "max-model-len"},
		{"max-num-seqs 0", func(c *Config) { c.MaxNumSeqs = 0 }, "max-num-seqs"},
		{"no size", func(c *Config) { c.Model = Model{} }, "model size unknown"},
		{"kv heads 3 tp 2", func(c *Config) { c.Model.KVHeads, c.Model.Heads = 3, 0 }, "KV heads"},
		// fp8.py get_min_capability is 80; a T4 is 75.
		{"fp8 on T4", func(c *Config) { c.Model.Quant, _ = ParseQuant("fp8", 0) }, "requires compute capability 8.0 and the T4 is 7.5"},
		// awq.py get_supported_act_dtypes: half only.
		{"awq in float32", func(c *Config) { c.Model.Quant, _ = ParseQuant("awq", 128); c.Dtype = "float32" }, "float16 only"},
		{"awq without shape", func(c *Config) {
			c.Model = Model{Name: "x", Bytes16: 1e9, Quant: Quant{Method: AWQ, Bits: 4, GroupSize: 128}}
		}, "needs the model's shape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := exampleConfig(t)
			tc.change(&cfg)
			if _, err := Compute(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestOverheadsFillingTheBudget(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.Overheads.Activation = 20 * GiB
	r, err := Compute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != DoesNotFit || r.MinGPUs != 0 || !strings.Contains(r.Reason, "no tensor-parallel size helps") {
		t.Errorf("verdict %s, fewest GPUs %d: %s", r.Verdict, r.MinGPUs, r.Reason)
	}
}

// The fixtures are files a person can compare with the model pages: one
// per catalogue entry, each naming the config.json it came from.
func TestFixturesNameTheirSource(t *testing.T) {
	entries, err := os.ReadDir("models")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(ModelNames()) {
		t.Errorf("%d fixture files, %d catalogue entries", len(entries), len(ModelNames()))
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("models", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		id := strings.Replace(strings.TrimSuffix(e.Name(), ".json"), "--", "/", 1)
		if !strings.Contains(string(b), `"_source": "https://huggingface.co/`+id+`/blob/main/config.json"`) {
			t.Errorf("%s does not name %s's config.json as its source", e.Name(), id)
		}
	}
}
