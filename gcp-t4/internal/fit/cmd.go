package fit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Main is `gcp-t4 plan serve`: args are the flags after "serve". Exit
// status: 0 when the model fits (tight included), 1 when it does not, 2 for
// bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	cfg, err := ParseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 plan serve: %v\n", err)
		return 2
	}
	r, err := Compute(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 plan serve: %v\n", err)
		return 2
	}
	logger.DebugContext(ctx, "fit computed", "model", cfg.Model.Name, "tp", cfg.TP, "verdict", string(r.Verdict))
	if err := Print(stdout, r); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 plan serve: writing the report: %v\n", err)
		return 1
	}
	if r.Verdict == DoesNotFit {
		return 1
	}
	return 0
}

// ParseArgs turns the command line into a Config; usage goes to stderr.
func ParseArgs(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("gcp-t4 plan serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		model, modelSize, params, gpu, gpuMem string
		nonTorch, activation, graphs          string
		layers, kvHeads, headDim, heads       int
	)
	cfg := Config{}
	fs.StringVar(&model, "model", "", "a catalogued model by Hugging Face id ("+strings.Join(ModelNames(), ", ")+")")
	fs.StringVar(&modelSize, "model-size", "", "weights at 16 bits per parameter (an fp16/bf16 checkpoint's size), e.g. 20GB or 18.6GiB")
	fs.StringVar(&params, "params", "", "parameter count instead of --model-size, e.g. 12.25B")
	fs.IntVar(&layers, "layers", 0, "hidden layers (config.json num_hidden_layers); with --kv-heads and --head-dim gives KV tokens")
	fs.IntVar(&kvHeads, "kv-heads", 0, "KV heads (num_key_value_heads)")
	fs.IntVar(&headDim, "head-dim", 0, "head dimension (head_dim)")
	fs.IntVar(&heads, "heads", 0, "attention heads (num_attention_heads); checked to divide by --tp")
	fs.StringVar(&gpu, "gpu", "t4", "GPU kind (t4)")
	fs.StringVar(&gpuMem, "gpu-memory", "", "override the GPU's total as CUDA reports it, e.g. 15GiB")
	fs.IntVar(&cfg.TP, "tp", 1, "tensor-parallel size: GPUs the model is split over")
	fs.StringVar(&cfg.Dtype, "dtype", "half", "vLLM --dtype: half, float16, bfloat16, float32")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", 8192, "vLLM max_model_len: the longest sequence (prompt + output) in tokens")
	fs.Float64Var(&cfg.GPUMemoryUtilization, "gpu-memory-utilization", 0.90, "vLLM gpu_memory_utilization: fraction of GPU memory vLLM may use")
	fs.BoolVar(&cfg.EnforceEager, "enforce-eager", false, "vLLM enforce_eager: no CUDA graphs, so no graph memory")
	fs.StringVar(&nonTorch, "non-torch-memory", size(DefaultOverheads.NonTorch), "assumed memory outside PyTorch per GPU (NCCL, cuBLAS)")
	fs.StringVar(&activation, "activation-memory", size(DefaultOverheads.Activation), "assumed peak activation of vLLM's profiling pass per GPU")
	fs.StringVar(&graphs, "cuda-graph-memory", size(DefaultOverheads.CUDAGraphs), "assumed CUDA-graph memory per GPU (ignored with --enforce-eager)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q: all settings are flags (see -h)", fs.Arg(0))
	}

	given := 0
	for _, s := range []string{model, modelSize, params} {
		if s != "" {
			given++
		}
	}
	if given != 1 {
		return cfg, errors.New("give exactly one of --model, --model-size, --params")
	}
	var err error
	switch {
	case model != "":
		if cfg.Model, err = LookupModel(model); err != nil {
			return cfg, err
		}
		if layers+kvHeads+headDim+heads != 0 {
			return cfg, fmt.Errorf("--model %s brings its own architecture: drop --layers, --kv-heads, --head-dim and --heads", model)
		}
	case modelSize != "":
		if cfg.Model.Bytes16, err = ParseSize(modelSize); err != nil {
			return cfg, fmt.Errorf("--model-size: %w", err)
		}
		cfg.Model.Name = modelSize + " checkpoint"
	default:
		if cfg.Model.Params, err = ParseCount(params); err != nil {
			return cfg, fmt.Errorf("--params: %w", err)
		}
		cfg.Model.Name = params + " parameters"
	}
	if model == "" {
		if min(layers, kvHeads, headDim, heads) < 0 {
			return cfg, errors.New("--layers, --kv-heads, --head-dim and --heads must not be negative")
		}
		set := 0
		for _, v := range []int{layers, kvHeads, headDim} {
			if v > 0 {
				set++
			}
		}
		if set != 0 && set != 3 {
			return cfg, errors.New("give all of --layers, --kv-heads and --head-dim (to count KV tokens) or none")
		}
		cfg.Model.Layers, cfg.Model.KVHeads, cfg.Model.HeadDim, cfg.Model.Heads = layers, kvHeads, headDim, heads
	}

	if cfg.GPU, err = LookupGPU(gpu); err != nil {
		return cfg, err
	}
	if gpuMem != "" {
		if cfg.GPU.Memory, err = ParseSize(gpuMem); err != nil {
			return cfg, fmt.Errorf("--gpu-memory: %w", err)
		}
	}
	for _, o := range []struct {
		flag, v string
		dst     *int64
	}{
		{"--non-torch-memory", nonTorch, &cfg.Overheads.NonTorch},
		{"--activation-memory", activation, &cfg.Overheads.Activation},
		{"--cuda-graph-memory", graphs, &cfg.Overheads.CUDAGraphs},
	} {
		if *o.dst, err = ParseSize(o.v); err != nil {
			return cfg, fmt.Errorf("%s: %w", o.flag, err)
		}
	}
	return cfg, nil
}

// units: decimal for GB/MB (how checkpoints are listed), binary for
// GiB/MiB (how GPU memory is reported).
var units = []struct {
	suffix string
	mult   float64
}{
	{"GiB", GiB}, {"MiB", 1 << 20}, {"TiB", 1 << 40},
	{"GB", 1e9}, {"MB", 1e6}, {"TB", 1e12},
}

// ParseSize reads a byte size with a unit: 20GB, 18.6GiB, 512MiB, 0.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
				return 0, fmt.Errorf("%q is not a size: want a non-negative number and a unit, e.g. 20GB or 14.75GiB", s)
			}
			return int64(math.Round(f * u.mult)), nil
		}
	}
	return 0, fmt.Errorf("%q has no unit: write GB or MB (decimal, as checkpoints are listed) or GiB or MiB (binary, as GPU memory is), e.g. 20GB", s)
}

// ParseCount reads a parameter count: 12247782400, 12.25B, 7M.
func ParseCount(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "B"):
		mult, t = 1e9, strings.TrimSuffix(t, "B")
	case strings.HasSuffix(t, "M"):
		mult, t = 1e6, strings.TrimSuffix(t, "M")
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a parameter count: want e.g. 12.25B, 7000M or 12247782400", s)
	}
	return int64(math.Round(f * mult)), nil
}

// size formats a byte count the way ParseSize reads it back.
func size(n int64) string {
	return strconv.FormatFloat(float64(n)/GiB, 'f', -1, 64) + "GiB"
}

// Print writes the report: inputs, the per-GPU arithmetic, the verdict.
func Print(w io.Writer, r Result) error {
	c := r.Config
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	p("model", "%s", c.Model.Name)
	if c.Model.Params > 0 {
		p("parameters", "%d (%.2fB)", c.Model.Params, float64(c.Model.Params)/1e9)
	}
	p("weights", "%s (%.1f GB) at %s, %d bytes per parameter", gib(r.Weights), float64(r.Weights)/1e9, c.Dtype, r.DtypeBytes)
	p("gpus", "%d x %s, %s each as CUDA reports it", c.TP, c.GPU.Name, gib(c.GPU.Memory))
	p("weights per GPU", "%s", gib(r.WeightsPerGPU))
	p("vLLM budget per GPU", "%s (gpu_memory_utilization %.2f)", gib(r.Budget), c.GPUMemoryUtilization)
	graphs := gib(c.Overheads.CUDAGraphs)
	if c.EnforceEager {
		graphs = "none (enforce_eager)"
	}
	p("assumed overheads", "%s per GPU: non-torch %s, activation peak %s, CUDA graphs %s",
		gib(r.Overhead), gib(c.Overheads.NonTorch), gib(c.Overheads.Activation), graphs)
	p("KV-cache room per GPU", "%s", gib(r.KVRoom))
	if r.KVBytesPerToken > 0 {
		p("KV cache per token", "%d KiB per GPU", r.KVBytesPerToken/1024)
		p("KV capacity", "%d tokens (max_model_len %d: %.2f sequences at once)", r.KVTokens, c.MaxModelLen, r.Concurrency)
	}
	if r.MinGPUs > 0 {
		p("fewest GPUs for weights", "%d", r.MinGPUs)
	}
	p("verdict", "%s: %s", r.Verdict, r.Reason)
	return tw.Flush()
}
