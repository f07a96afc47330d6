package fit

import (
	"fmt"
	"slices"
	"strings"
)

// arch is a dense, bias-free decoder (the Mistral family's shape): enough to
// count parameters and size the KV cache. Values are the checkpoints'
// config.json.
type arch struct {
	hidden, layers, heads, kvHeads, headDim, intermediate, vocab int
	// tied: the LM head shares the embedding matrix.
	tied bool
}

// params counts weights: per layer the q/k/v/o projections, the gated MLP
// (gate, up, down) and two RMSNorms; plus the embedding, the LM head unless
// tied, and the final norm. Matches the counts the model cards publish.
func (a arch) params() int64 {
	h, l := int64(a.hidden), int64(a.layers)
	q := h * int64(a.heads*a.headDim)
	kv := 2 * h * int64(a.kvHeads*a.headDim)
	o := int64(a.heads*a.headDim) * h
	mlp := 3 * h * int64(a.intermediate)
	perLayer := q + kv + o + mlp + 2*h
	emb := int64(a.vocab) * h
	lmHead := emb
	if a.tied {
		lmHead = 0
	}
	return l*perLayer + emb + lmHead + h
}

func (a arch) model(name string) Model {
	return Model{Name: name, Params: a.params(), Layers: a.layers, KVHeads: a.kvHeads, HeadDim: a.headDim, Heads: a.heads}
}

// models are the Mistral checkpoints this project's examples and tests talk
// about, by their Hugging Face ids.
var models = map[string]arch{
	// 7.25B parameters, 14.5 GB at 16 bits: needs two T4s at fp16.
	"mistralai/Mistral-7B-Instruct-v0.3": {hidden: 4096, layers: 32, heads: 32, kvHeads: 8, headDim: 128, intermediate: 14336, vocab: 32768},
	// 8.02B, 16.0 GB.
	"mistralai/Ministral-8B-Instruct-2410": {hidden: 4096, layers: 36, heads: 32, kvHeads: 8, headDim: 128, intermediate: 12288, vocab: 131072},
	// 12.25B, 24.5 GB: the install/examples/mistral-tp2 model.
	"mistralai/Mistral-Nemo-Instruct-2407": {hidden: 5120, layers: 40, heads: 32, kvHeads: 8, headDim: 128, intermediate: 14336, vocab: 131072},
	// 23.57B, 47.1 GB: more than two T4s hold.
	"mistralai/Mistral-Small-24B-Instruct-2501": {hidden: 5120, layers: 40, heads: 32, kvHeads: 8, headDim: 128, intermediate: 32768, vocab: 131072},
}

// LookupModel returns a known model by its Hugging Face id (case-insensitive).
func LookupModel(name string) (Model, error) {
	for id, a := range models {
		if strings.EqualFold(id, name) {
			return a.model(id), nil
		}
	}
	return Model{}, fmt.Errorf("model %q is not in the catalogue (%s): give --model-size or --params, and --layers, --kv-heads, --head-dim, instead",
		name, strings.Join(ModelNames(), ", "))
}

// ModelNames lists the catalogue, sorted.
func ModelNames() []string {
	names := make([]string, 0, len(models))
	for id := range models {
		names = append(names, id)
	}
	slices.Sort(names)
	return names
}

// gpus: memory is the total CUDA reports, which vLLM's utilization applies
// to. A T4 has 16 GiB of GDDR6; with ECC on, as on Compute Engine, PyTorch
// reports 14.75 GiB total capacity (nvidia-smi: 15360 MiB, less the
// driver's reservation).
var gpus = map[string]GPU{
	"t4": {Name: "T4", Memory: 14.75 * GiB, BF16: false},
}

// LookupGPU returns a known GPU by name (case-insensitive).
func LookupGPU(name string) (GPU, error) {
	if g, ok := gpus[strings.ToLower(name)]; ok {
		return g, nil
	}
	return GPU{}, fmt.Errorf("gpu %q is unknown (known: t4): pass --gpu t4, or --gpu-memory with the total CUDA reports", name)
}
