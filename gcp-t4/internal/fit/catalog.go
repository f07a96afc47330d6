package fit

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// models/ holds the catalogue: per checkpoint, the fields of its Hugging
// Face config.json the calculation needs, under the name of the checkpoint
// ("org--name.json"), with "_source" (the config.json it was taken from),
// "_parameters" (the count the model card publishes, which the shape must
// reproduce: TestCatalogueParameterCounts) and, for a quantised
// checkpoint, "_base" (the model it was quantised from). Reading a
// downloaded config.json with --config goes through the same parser.
//
//go:embed models/*.json
var modelFiles embed.FS

// hfConfig is the part of a Hugging Face config.json used here. Unknown
// keys are ignored: a real config.json has many more.
type hfConfig struct {
	Source     string `json:"_source"`
	Parameters int64  `json:"_parameters"`
	Base       string `json:"_base"`
	Note       string `json:"_note"`

	Architectures     []string `json:"architectures"`
	HiddenSize        int      `json:"hidden_size"`
	IntermediateSize  int      `json:"intermediate_size"`
	NumAttentionHeads int      `json:"num_attention_heads"`
	NumHiddenLayers   int      `json:"num_hidden_layers"`
	NumKeyValueHeads  int      `json:"num_key_value_heads"`
	// HeadDim is absent from older configs (Mistral-7B-v0.3); transformers
	// then uses hidden_size / num_attention_heads.
	HeadDim           int  `json:"head_dim"`
	VocabSize         int  `json:"vocab_size"`
	TieWordEmbeddings bool `json:"tie_word_embeddings"`
	// MaxPositionEmbeddings sizes vLLM's RoPE cos_sin_cache.
	MaxPositionEmbeddings int    `json:"max_position_embeddings"`
	TorchDtype            string `json:"torch_dtype"`
	QuantizationConfig    *struct {
		QuantMethod string `json:"quant_method"`
		Bits        int    `json:"bits"`
		GroupSize   int    `json:"group_size"`
		Version     string `json:"version"`
		ZeroPoint   *bool  `json:"zero_point"`
	} `json:"quantization_config"`
}

// ParseConfigJSON reads a model's config.json (as Hugging Face serves it)
// into a Model named name. It accepts what vLLM's Llama/Mistral path
// serves: a dense decoder with a gated MLP.
func ParseConfigJSON(r io.Reader, name string) (Model, error) {
	var c hfConfig
	if err := json.NewDecoder(r).Decode(&c); err != nil {
		return Model{}, fmt.Errorf("%s: not a config.json: %w", name, err)
	}
	var missing []string
	for _, f := range []struct {
		key string
		v   int
	}{
		{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_attention_heads", c.NumAttentionHeads}, {"num_hidden_layers", c.NumHiddenLayers},
		{"num_key_value_heads", c.NumKeyValueHeads}, {"vocab_size", c.VocabSize},
	} {
		if f.v <= 0 {
			missing = append(missing, f.key)
		}
	}
	if len(missing) > 0 {
		return Model{}, fmt.Errorf("%s: config.json lacks %s (or they are not positive): this calculator sizes dense decoders (Llama/Mistral shape)",
			name, strings.Join(missing, ", "))
	}
	for _, a := range c.Architectures {
		if strings.Contains(a, "Moe") || strings.Contains(a, "Mixtral") {
			return Model{}, fmt.Errorf("%s: architecture %s is a mixture of experts; this calculator sizes dense decoders only", name, a)
		}
	}
	m := Model{
		Name: name, Source: c.Source, Note: c.Note, Base: c.Base, PublishedParams: c.Parameters,
		Hidden: c.HiddenSize, Intermediate: c.IntermediateSize, Heads: c.NumAttentionHeads,
		Layers: c.NumHiddenLayers, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim,
		Vocab: c.VocabSize, Tied: c.TieWordEmbeddings, CheckpointDtype: c.TorchDtype,
		MaxPositions: c.MaxPositionEmbeddings,
	}
	if m.HeadDim == 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return Model{}, fmt.Errorf("%s: no head_dim, and hidden_size %d does not divide by num_attention_heads %d", name, c.HiddenSize, c.NumAttentionHeads)
		}
		m.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if q := c.QuantizationConfig; q != nil {
		qt, err := quantFromConfig(q.QuantMethod, q.Bits, q.GroupSize)
		if err != nil {
			return Model{}, fmt.Errorf("%s: quantization_config: %w", name, err)
		}
		if qt.Method == AWQ && q.ZeroPoint != nil && !*q.ZeroPoint {
			return Model{}, fmt.Errorf("%s: quantization_config: AWQ without zero_point is not supported by vLLM's awq method", name)
		}
		m.Quant = qt
	}
	m.Params = m.shapeParams()
	return m, nil
}

var catalogue = sync.OnceValues(func() (map[string]Model, error) {
	entries, err := modelFiles.ReadDir("models")
	if err != nil {
		return nil, err
	}
	out := map[string]Model{}
	for _, e := range entries {
		id := strings.Replace(strings.TrimSuffix(e.Name(), ".json"), "--", "/", 1)
		b, err := modelFiles.ReadFile(path.Join("models", e.Name()))
		if err != nil {
			return nil, err
		}
		m, err := ParseConfigJSON(bytes.NewReader(b), id)
		if err != nil {
			return nil, err
		}
		if m.Source == "" {
			return nil, fmt.Errorf("catalogue entry %s has no _source", id)
		}
		out[id] = m
	}
	return out, nil
})

// LookupModel returns a catalogued checkpoint by its Hugging Face id
// (case-insensitive).
func LookupModel(name string) (Model, error) {
	cat, err := catalogue()
	if err != nil {
		return Model{}, fmt.Errorf("reading the built-in catalogue: %w", err)
	}
	for id, m := range cat {
		if strings.EqualFold(id, name) {
			return m, nil
		}
	}
	return Model{}, fmt.Errorf("model %q is not in the catalogue (%s): download its config.json and pass --config, or give --model-size or --params with --layers, --kv-heads and --head-dim",
		name, strings.Join(ModelNames(), ", "))
}

// ModelNames lists the catalogue, sorted.
func ModelNames() []string {
	cat, err := catalogue()
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(cat))
	for id := range cat {
		names = append(names, id)
	}
	slices.Sort(names)
	return names
}

// GPU is one accelerator as CUDA reports it.
type GPU struct {
	Name string
	// Accelerator is Compute Engine's accelerator type.
	Accelerator string
	// Memory is the total CUDA reports (torch.cuda.mem_get_info), which vLLM
	// multiplies by gpu_memory_utilization; less than the marketing size
	// (ECC and the driver's reservation).
	Memory int64
	// Capability is the CUDA compute capability times ten (7.5 -> 75), the
	// number vLLM's quantisation methods compare with get_min_capability.
	Capability int
	// DTypes are the types it computes in, as vLLM's --dtype names them.
	DTypes []string
	// Bandwidth is the peak memory bandwidth in bytes per second (the
	// data sheet's), RealisticBandwidth what decode's memory-bound
	// kernels are assumed to reach.
	Bandwidth, RealisticBandwidth float64
	// FP16FLOPS is the peak fp16 tensor-core rate (FLOP/s, the data
	// sheet's), RealisticFP16FLOPS what prefill's GEMMs are assumed to
	// sustain.
	FP16FLOPS, RealisticFP16FLOPS float64
}

// BF16 reports whether the GPU computes in bfloat16 (compute capability
// 8.0 and up; vLLM refuses bfloat16 below).
func (g GPU) BF16() bool { return slices.Contains(g.DTypes, "bfloat16") }

// gpuOf is the provider's catalogue row (src/cloud-providers/gcpt4/catalog,
// gpufamilies.go) in this calculation's units: the GPU facts live there,
// once, for the provider's selection and for plan serve alike.
func gpuOf(f catalog.GPUFamily) GPU {
	s := f.Serving
	return GPU{Name: strings.ToUpper(f.Name), Accelerator: f.Accelerator, Memory: int64(s.CUDAMemoryGiB * GiB), Capability: s.Capability,
		DTypes: s.DTypes, Bandwidth: s.PeakBandwidthGBps * 1e9, RealisticBandwidth: s.SustainedBandwidthGBps * 1e9,
		FP16FLOPS: s.PeakFP16TFLOPS * 1e12, RealisticFP16FLOPS: s.SustainedFP16TFLOPS * 1e12}
}

// GPUNames are the catalogue's GPUs plan serve sizes for.
func GPUNames() []string {
	var names []string
	for _, f := range catalog.GPUFamilies() {
		if f.Serving != nil {
			names = append(names, f.Name)
		}
	}
	return names
}

// LookupGPU returns a known GPU by name (case-insensitive).
func LookupGPU(name string) (GPU, error) {
	if f, ok := catalog.LookupGPUFamily(strings.ToLower(name)); ok && f.Serving != nil {
		return gpuOf(f), nil
	}
	known := GPUNames()
	return GPU{}, fmt.Errorf("gpu %q is unknown (known: %s): pass --gpu %s, or --gpu-memory with the total CUDA reports", name, strings.Join(known, ", "), known[0])
}
