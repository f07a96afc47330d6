package fit

import (
	"strings"
	"testing"
)

// The catalogue's parameter counts, derived from the config.json shapes,
// must equal the counts the model cards publish: they size the weights.
func TestCatalogueParameterCounts(t *testing.T) {
	want := map[string]int64{
		"mistralai/Mistral-7B-Instruct-v0.3":        7_248_023_552,
		"mistralai/Ministral-8B-Instruct-2410":      8_019_808_256,
		"mistralai/Mistral-Nemo-Instruct-2407":      12_247_782_400,
		"mistralai/Mistral-Small-24B-Instruct-2501": 23_572_403_200,
	}
	if got := len(ModelNames()); got != len(want) {
		t.Fatalf("catalogue has %d models, test knows %d", got, len(want))
	}
	for name, params := range want {
		m, err := LookupModel(strings.ToLower(name))
		if err != nil {
			t.Fatal(err)
		}
		if m.Params != params || m.Name != name {
			t.Errorf("%s: %d parameters (name %q), want %d", name, m.Params, m.Name, params)
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

func nemo(t *testing.T) Model {
	t.Helper()
	m, err := LookupModel("mistralai/Mistral-Nemo-Instruct-2407")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// exampleConfig is install/examples/mistral-tp2's engine_kwargs (the
// test/kuberay module checks the manifest says the same).
func exampleConfig(t *testing.T) Config {
	return Config{
		Model: nemo(t), GPU: t4(t), TP: 2, Dtype: "half",
		MaxModelLen: 8192, GPUMemoryUtilization: 0.95, EnforceEager: true,
		Overheads: DefaultOverheads,
	}
}

func TestExampleModelFitsTwoT4s(t *testing.T) {
	r, err := Compute(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	const weights = 12_247_782_400 * 2 // 24.5 GB at fp16
	checks := []struct {
		name      string
		got, want int64
	}{
		{"weights", r.Weights, weights},
		{"weights per GPU", r.WeightsPerGPU, weights / 2},
		{"budget", r.Budget, 15_045_807_308},                            // 0.95 x 14.75 GiB
		{"overhead", r.Overhead, 3 * GiB / 2},                           // no CUDA graphs
		{"KV room", r.KVRoom, 15_045_807_308 - weights/2 - 3*GiB/2},     // ~1.11 GiB
		{"KV bytes per token", r.KVBytesPerToken, 2 * 40 * 4 * 128 * 2}, // 4 of 8 KV heads per GPU
		{"KV tokens", r.KVTokens, 14_480},                               // whole 16-token blocks
		{"fewest GPUs", int64(r.MinGPUs), 2},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if r.Verdict != Tight {
		t.Errorf("verdict %s (%s), want %s", r.Verdict, r.Reason, Tight)
	}
	if !strings.Contains(r.Reason, "14480 tokens") {
		t.Errorf("reason %q does not give the token capacity", r.Reason)
	}
}

// The example's two settings that make room (0.95, eager) are both needed.
func TestExampleModelNeedsItsSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		reason string
	}{
		{"utilization 0.90", func(c *Config) { c.GPUMemoryUtilization = 0.90 }, "fewer than max_model_len 8192"},
		{"CUDA graphs", func(c *Config) { c.EnforceEager = false }, "fewer than max_model_len 8192"},
		{"vLLM defaults", func(c *Config) { c.GPUMemoryUtilization, c.EnforceEager = 0.90, false }, "no room for the KV cache"},
		{"one T4", func(c *Config) { c.TP = 1 }, "the weights alone need 22.81 GiB per GPU"},
		{"32k context", func(c *Config) { c.MaxModelLen = 32768 }, "lower --max-model-len to at most 14480"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := exampleConfig(t)
			tc.change(&cfg)
			r, err := Compute(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != DoesNotFit || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("verdict %s: %s; want %s mentioning %q", r.Verdict, r.Reason, DoesNotFit, tc.reason)
			}
		})
	}
}

// Mistral-Small-24B: 47.1 GB at fp16 is 21.95 GiB per T4 at TP 2.
func TestTooBigModelDoesNotFit(t *testing.T) {
	m, err := LookupModel("mistralai/Mistral-Small-24B-Instruct-2501")
	if err != nil {
		t.Fatal(err)
	}
	cfg := exampleConfig(t)
	cfg.Model = m
	r, err := Compute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.WeightsPerGPU != 23_572_403_200 {
		t.Errorf("weights per GPU %d, want 23572403200", r.WeightsPerGPU)
	}
	if r.Verdict != DoesNotFit || r.KVTokens != 0 {
		t.Errorf("verdict %s with %d KV tokens, want %s with 0", r.Verdict, r.KVTokens, DoesNotFit)
	}
	// 47.1 GB over per-GPU budgets of 12.5 GiB needs 4; 4 divides 32 heads.
	if r.MinGPUs != 4 || !strings.Contains(r.Reason, "at least --tp 4") {
		t.Errorf("fewest GPUs %d, reason %q; want 4", r.MinGPUs, r.Reason)
	}
}

// The question: a generic 20 GB checkpoint on two T4s, vLLM defaults.
func TestGeneric20GBCheckpoint(t *testing.T) {
	r, err := Compute(Config{
		Model: Model{Name: "20GB", Bytes16: 20e9}, GPU: t4(t), TP: 2, Dtype: "half",
		MaxModelLen: 8192, GPUMemoryUtilization: 0.90, Overheads: DefaultOverheads,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.WeightsPerGPU != 10e9 || r.KVTokens != -1 {
		t.Errorf("weights per GPU %d, KV tokens %d; want 1e10 and -1 (architecture unknown)", r.WeightsPerGPU, r.KVTokens)
	}
	// 0.90 x 14.75 GiB - 10 GB - 2 GiB.
	if want := int64(14_253_922_713) - 10e9 - 2*GiB; r.KVRoom != want {
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
		{"no size", func(c *Config) { c.Model = Model{} }, "model size unknown"},
		{"kv heads 3 tp 2", func(c *Config) { c.Model.KVHeads, c.Model.Heads = 3, 0 }, "KV heads"},
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
