package fit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
)

// Main is `gcp-t4 plan serve`: args are the flags after "serve". Exit
// status: 0 when the model fits (tight included), 1 when it does not, 2 for
// bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	cfg, fs, err := parseArgs(args, stdout, stderr)
	var done cli.ExitStatus
	if errors.As(err, &done) {
		return int(done)
	}
	if err != nil {
		return cli.Misuse(fs, stderr, "%v", err)
	}
	r, err := Compute(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 plan serve: %v\n", err)
		return 2
	}
	logger.DebugContext(ctx, "fit computed", "model", cfg.Model.Name, "tp", cfg.TP, "verdict", string(r.Verdict))
	layouts, err := Layouts(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 plan serve: %v\n", err)
		return 1
	}
	if err := Print(stdout, r, layouts...); err != nil {
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
	cfg, _, err := parseArgs(args, stderr, stderr)
	return cfg, err
}

// usage is `gcp-t4 plan serve -h`.
var usage = cli.Usage{
	Synopsis: []string{"gcp-t4 plan serve (-model ID | -config FILE | -model-size SIZE | -params N) [-tp N] [flags]"},
	About: []string{"Sizes a model served with vLLM over GPUs (T4 by default): the weights, activation peak, CUDA graphs " +
		"and KV cache per GPU as vLLM budgets them, whether it fits, and the decode speed and time to first token " +
		"over the path between the GPUs. Exits 0 when it fits, 1 when it does not. No cloud account: nothing is " +
		"called. docs/runbook-mistral-tp2.md"},
}

// parseArgs is ParseArgs with the flag set, for the usage of a later
// error; a cli.ExitStatus was reported already (-h, a flag error).
func parseArgs(args []string, stdout, stderr io.Writer) (Config, *flag.FlagSet, error) {
	fs := cli.NewFlagSet("gcp-t4 plan serve", usage)
	var (
		model, configFile, modelSize, params, gpu, gpuMem string
		quant, nonTorch, context, activation, graphs      string
		bandwidth, busBandwidth, graphPerSize, path       string
		groupSize                                         int
		layers, kvHeads, headDim, heads                   int
		latency                                           durationFlag
	)
	cfg := Config{Decode: DefaultDecode}
	fs.StringVar(&model, "model", "", "a catalogued checkpoint by Hugging Face id ("+strings.Join(ModelNames(), ", ")+")")
	fs.StringVar(&configFile, "config", "", "a model's config.json (as downloaded from Hugging Face): the shape and quantization_config are read from it")
	fs.StringVar(&modelSize, "model-size", "", "weights at 16 bits per parameter (an fp16/bf16 checkpoint's size), e.g. 20GB or 18.6GiB")
	fs.StringVar(&params, "params", "", "parameter count instead of --model-size, e.g. 12.25B")
	fs.IntVar(&layers, "layers", 0, "hidden layers (config.json num_hidden_layers); with --kv-heads and --head-dim gives KV tokens")
	fs.IntVar(&kvHeads, "kv-heads", 0, "KV heads (num_key_value_heads)")
	fs.IntVar(&headDim, "head-dim", 0, "head dimension (head_dim)")
	fs.IntVar(&heads, "heads", 0, "attention heads (num_attention_heads); checked to divide by --tp")
	fs.StringVar(&quant, "quantization", "", "weight format to size an unquantised --model or --config as: "+strings.Join(Methods, ", ")+" (a quantised checkpoint brings its own)")
	fs.IntVar(&groupSize, "group-size", 128, "quantisation group size for --quantization awq, gptq, int8")
	fs.StringVar(&gpu, "gpu", "t4", "GPU kind: "+strings.Join(GPUNames(), ", ")+" (the provider's GPU catalogue)")
	fs.StringVar(&gpuMem, "gpu-memory", "", "override the GPU's total as CUDA reports it, e.g. 15GiB")
	fs.IntVar(&cfg.TP, "tp", 1, "tensor-parallel size: GPUs the model is split over")
	fs.StringVar(&cfg.Dtype, "dtype", "half", "vLLM --dtype: half, float16, bfloat16, float32")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", 8192, "vLLM max_model_len: the longest sequence (prompt + output) in tokens")
	fs.Float64Var(&cfg.GPUMemoryUtilization, "gpu-memory-utilization", 0.90, "vLLM gpu_memory_utilization: fraction of GPU memory vLLM may use")
	fs.BoolVar(&cfg.EnforceEager, "enforce-eager", false, "vLLM enforce_eager: no CUDA graphs")
	fs.IntVar(&cfg.MaxNumBatchedTokens, "max-num-batched-tokens", 2048, "vLLM max_num_batched_tokens: tokens of vLLM's profiling forward pass (vLLM 0.11 default behind the OpenAI server on GPUs under 70 GiB)")
	fs.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", 256, "vLLM max_num_seqs: sequences per step, and rows of the profiling sampler run (vLLM 0.11 default 256)")
	fs.StringVar(&context, "cuda-context-memory", size(DefaultOverheads.CUDAContext), "assumed CUDA context and NCCL communicators per GPU, held outside vLLM's budget")
	fs.StringVar(&nonTorch, "non-torch-memory", size(DefaultOverheads.NonTorch), "assumed memory outside PyTorch that appears during vLLM's profiling (cuBLAS workspaces)")
	fs.StringVar(&activation, "activation-memory", "", "the activation peak vLLM's log reports (replaces the derived one)")
	fs.StringVar(&graphs, "cuda-graph-memory", "", "CUDA-graph memory per GPU from vLLM's \"Graph capturing finished\" line (default: the captured sizes x --cuda-graph-size-memory; ignored with --enforce-eager)")
	fs.StringVar(&graphPerSize, "cuda-graph-size-memory", size(DefaultOverheads.CUDAGraphPerSize), "assumed CUDA-graph memory per captured batch size")
	fs.StringVar(&path, "path", string(DefaultDecode.Path), "how the GPUs reach each other: vpc (one T4 per podVM, the two-podVM example) or host (all GPUs in one podVM)")
	fs.Var(&latency, "nccl-latency", "a measured 2-rank all-reduce of one hidden state, e.g. 350us: the p50 the NCCL check prints (default: the path's assumed ring-step latency)")
	fs.StringVar(&busBandwidth, "nccl-bandwidth", "", "measured NCCL bus bandwidth for large messages, e.g. 1.2GB/s: the 16 MiB busbw the NCCL check prints (default: the path's assumed figure)")
	fs.StringVar(&bandwidth, "memory-bandwidth", "", "the memory bandwidth decode reaches, e.g. 250GB/s: what test/device/gpu-check.sh measures (default: an assumed 75 % of the GPU's peak)")
	fs.IntVar(&cfg.Decode.Context, "decode-context", DefaultDecode.Context, "tokens of context the decode estimate reads from the KV cache per sequence")
	fs.IntVar(&cfg.Decode.PromptTokens, "prompt-tokens", DefaultDecode.PromptTokens, "prompt length the time to first token is estimated for")
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return cfg, fs, cli.ExitStatus(code)
	}
	if code, ok := cli.NoArgs(fs, stderr); !ok {
		return cfg, fs, cli.ExitStatus(code)
	}
	if latency.set {
		if latency.d <= 0 {
			return cfg, fs, fmt.Errorf("--nccl-latency %s: must be positive", latency.d)
		}
		cfg.Decode.NCCLLatency = latency.d
	}
	if cfg.Decode.Context < 1 {
		return cfg, fs, fmt.Errorf("--decode-context %d: must be at least 1 token", cfg.Decode.Context)
	}
	if cfg.Decode.PromptTokens < 1 {
		return cfg, fs, fmt.Errorf("--prompt-tokens %d: must be at least 1 token", cfg.Decode.PromptTokens)
	}
	cfg.Decode.Path = Path(path)
	if _, err := linkFor(cfg.Decode.Path, cfg.Decode); err != nil {
		return cfg, fs, fmt.Errorf("--path: %w", err)
	}

	given := 0
	for _, s := range []string{model, configFile, modelSize, params} {
		if s != "" {
			given++
		}
	}
	if given != 1 {
		return cfg, fs, errors.New("give exactly one of --model, --config, --model-size, --params")
	}
	var err error
	switch {
	case model != "":
		if cfg.Model, err = LookupModel(model); err != nil {
			return cfg, fs, err
		}
	case configFile != "":
		f, err := os.Open(configFile)
		if err != nil {
			return cfg, fs, fmt.Errorf("--config: %w", err)
		}
		cfg.Model, err = ParseConfigJSON(f, configFile)
		f.Close()
		if err != nil {
			return cfg, fs, fmt.Errorf("--config %w", err)
		}
	case modelSize != "":
		if cfg.Model.Bytes16, err = ParseSize(modelSize); err != nil {
			return cfg, fs, fmt.Errorf("--model-size: %w", err)
		}
		cfg.Model.Name = modelSize + " checkpoint"
	default:
		if cfg.Model.Params, err = ParseCount(params); err != nil {
			return cfg, fs, fmt.Errorf("--params: %w", err)
		}
		cfg.Model.Name = params + " parameters"
	}
	if model != "" || configFile != "" {
		if layers+kvHeads+headDim+heads != 0 {
			return cfg, fs, errors.New("--model and --config bring the architecture: drop --layers, --kv-heads, --head-dim and --heads")
		}
	} else {
		if min(layers, kvHeads, headDim, heads) < 0 {
			return cfg, fs, errors.New("--layers, --kv-heads, --head-dim and --heads must not be negative")
		}
		set := 0
		for _, v := range []int{layers, kvHeads, headDim} {
			if v > 0 {
				set++
			}
		}
		if set != 0 && set != 3 {
			return cfg, fs, errors.New("give all of --layers, --kv-heads and --head-dim (to count KV tokens) or none")
		}
		cfg.Model.Layers, cfg.Model.KVHeads, cfg.Model.HeadDim, cfg.Model.Heads = layers, kvHeads, headDim, heads
	}
	if quant != "" {
		q, err := ParseQuant(quant, groupSize)
		if err != nil {
			return cfg, fs, err
		}
		switch {
		case cfg.Model.Quant.Method != None && q != cfg.Model.Quant:
			return cfg, fs, fmt.Errorf("--quantization %s: %s is already quantised as %s; drop --quantization", quant, cfg.Model.Name, cfg.Model.Quant)
		case q.Method != None && model == "" && configFile == "":
			return cfg, fs, fmt.Errorf("--quantization %s needs the model's shape to size the packed weights: use --model or --config", quant)
		}
		cfg.Model.Quant = q
	}

	if cfg.GPU, err = LookupGPU(gpu); err != nil {
		return cfg, fs, err
	}
	if gpuMem != "" {
		if cfg.GPU.Memory, err = ParseSize(gpuMem); err != nil {
			return cfg, fs, fmt.Errorf("--gpu-memory: %w", err)
		}
	}
	if bandwidth != "" {
		if cfg.Decode.Bandwidth, err = parseRate("--memory-bandwidth", bandwidth); err != nil {
			return cfg, fs, err
		}
	}
	if busBandwidth != "" {
		if cfg.Decode.BusBandwidth, err = parseRate("--nccl-bandwidth", busBandwidth); err != nil {
			return cfg, fs, err
		}
	}
	for _, o := range []struct {
		flag, v string
		dst     *int64
	}{
		{"--cuda-context-memory", context, &cfg.Overheads.CUDAContext},
		{"--non-torch-memory", nonTorch, &cfg.Overheads.NonTorch},
		{"--activation-memory", activation, &cfg.Overheads.Activation},
		{"--cuda-graph-memory", graphs, &cfg.Overheads.CUDAGraphs},
		{"--cuda-graph-size-memory", graphPerSize, &cfg.Overheads.CUDAGraphPerSize},
	} {
		if o.v == "" {
			continue
		}
		if *o.dst, err = ParseSize(o.v); err != nil {
			return cfg, fs, fmt.Errorf("%s: %w", o.flag, err)
		}
	}
	return cfg, fs, nil
}

// parseRate reads bytes per second: a size with an optional "/s".
func parseRate(flag, s string) (float64, error) {
	n, err := ParseSize(strings.TrimSuffix(strings.TrimSpace(s), "/s"))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s %q: want a positive rate in bytes per second, e.g. 1.2GB/s", flag, s)
	}
	return float64(n), nil
}

// durationFlag is a time.Duration flag that remembers being set.
type durationFlag struct {
	d   time.Duration
	set bool
}

func (f *durationFlag) String() string { return f.d.String() }

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not a duration: write e.g. 350us or 0.35ms", s)
	}
	f.d, f.set = d, true
	return nil
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

// Print writes the report: inputs, the per-GPU arithmetic with every
// assumption named, the decode and prefill estimates (at assumed
// realistic figures, the bound at the peaks beside them), the layouts
// compared, the verdict.
func Print(w io.Writer, r Result, layouts ...Layout) error {
	c := r.Config
	m := c.Model
	o := c.Overheads
	var rows [][2]string
	p := func(k, format string, a ...any) {
		rows = append(rows, [2]string{k, termout.Clean(fmt.Sprintf(format, a...))})
	}
	p("model", "%s", m.Name)
	if m.Source != "" {
		p("shape from", "%s", m.Source)
	}
	if m.Note != "" {
		p("note", "%s", m.Note)
	}
	if m.Params > 0 {
		p("parameters", "%d (%.2fB)", m.Params, float64(m.Params)/1e9)
	}
	if m.Quant.Method != None {
		p("weights", "%s (%.1f GB) as %s, activations %s", gib(r.Weights), float64(r.Weights)/1e9, m.Quant, c.Dtype)
	} else {
		p("weights", "%s (%.1f GB) at %s, %d bytes per parameter", gib(r.Weights), float64(r.Weights)/1e9, c.Dtype, r.DtypeBytes)
	}
	p("gpus", "%d x %s, %s each as CUDA reports it, compute capability %d.%d", c.TP, c.GPU.Name, gib(c.GPU.Memory), c.GPU.Capability/10, c.GPU.Capability%10)
	p("weights per GPU", "%s", gib(r.WeightsPerGPU))
	if r.RoPECache > 0 {
		p("RoPE cache per GPU", "%s: cos_sin_cache of max_position_embeddings %d x head_dim %d x %d bytes, counted as weights by vLLM",
			gib(r.RoPECache), m.MaxPositions, m.HeadDim, r.DtypeBytes)
	}
	p("vLLM budget per GPU", "%s (gpu_memory_utilization %.2f)", gib(r.Budget), c.GPUMemoryUtilization)
	p("headroom per GPU", "%s outside the budget: CUDA context and NCCL %s (assumed, --cuda-context-memory), %s left",
		gib(r.Headroom), gib(o.CUDAContext), gib(r.HeadroomSpare))
	switch {
	case r.ActivationDerived:
		p("activation peak", "%s: forward of max_num_batched_tokens %d (%s), sampler over %d sequences (%s, %d bytes per logit assumed)",
			gib(r.Activation), c.MaxNumBatchedTokens, gib(r.ForwardPeak), min(c.MaxNumSeqs, c.MaxNumBatchedTokens), gib(r.SamplerPeak), samplerBytesPerLogit)
	case o.Activation > 0:
		p("activation peak", "%s (--activation-memory)", gib(r.Activation))
	default:
		p("activation peak", "%s (assumed: the shape is unknown; --activation-memory from vLLM's log replaces it)", gib(r.Activation))
	}
	p("non-torch memory", "%s (assumed, --non-torch-memory)", gib(o.NonTorch))
	switch {
	case c.EnforceEager:
		p("CUDA graphs", "none (enforce_eager, which also turns torch.compile off)")
	case r.GraphMemoryDerived:
		p("CUDA graphs", "%s: %d sizes (%s; min(max_num_seqs x 2, 512) = %d) x %s (assumed, --cuda-graph-size-memory), captured after the KV cache is sized, from the %s headroom left",
			gib(r.GraphMemory), len(r.GraphSizes), sizesList(r.GraphSizes), min(c.MaxNumSeqs*2, 512), mib(o.CUDAGraphPerSize), gib(r.HeadroomSpare))
	default:
		p("CUDA graphs", "%s for %d sizes (--cuda-graph-memory), captured after the KV cache is sized, from the %s headroom left",
			gib(r.GraphMemory), len(r.GraphSizes), gib(r.HeadroomSpare))
	}
	p("KV-cache room per GPU", "%s", gib(r.KVRoom))
	if r.KVBytesPerToken > 0 {
		p("KV cache per token", "%d KiB per GPU", r.KVBytesPerToken/1024)
		p("KV capacity", "%d tokens (max_model_len %d: %.2f sequences at once)", r.KVTokens, c.MaxModelLen, r.Concurrency)
	}
	if d := r.Decode; d != nil {
		printDecode(p, r, d)
	}
	if e := r.Prefill; e != nil {
		printPrefill(p, r, e)
	}
	for _, l := range layouts {
		printLayout(p, l)
	}
	for _, l := range layouts {
		if l.Pipeline != nil {
			printPipeline(p, l)
		}
	}
	if r.MinGPUs > 0 {
		p("fewest GPUs for weights", "%d", r.MinGPUs)
	}
	p("verdict", "%s: %s", r.Verdict, r.Reason)
	_, err := io.WriteString(w, strings.Join(termout.Pairs(rows, "", termout.Width), "\n")+"\n")
	return err
}

func printDecode(p func(string, string, ...any), r Result, d *DecodeEstimate) {
	c := r.Config
	p("decode", "about %.1f tokens/s for one sequence (%.1f ms per token), %.1f tokens/s over %d sequences; bound %.1f tokens/s at the peak figures",
		d.TokensPerSecond, ms(d.PerToken), d.BatchTokensPerSecond, d.Batch, d.BoundTokensPerSecond)
	bw := "assumed realistic, --memory-bandwidth"
	if d.BandwidthGiven {
		bw = "--memory-bandwidth"
	}
	p("  memory", "%.1f ms: %s of weights and %s of KV cache (%d tokens of context) per GPU at %.0f GB/s (%s); %.1f ms at the %.0f GB/s peak",
		ms(d.Memory), gib(d.WeightBytes), gib(d.KVBytes), d.Context, d.Bandwidth/1e9, bw, ms(d.MemoryBound), d.PeakBandwidth/1e9)
	if d.Collectives() == 0 {
		p("  network", "none (one GPU)")
	} else {
		l := d.Link
		step := fmt.Sprintf("assumed: %s NCCL + %d hops x %s", fmtLatency(ncclStepSoftware), l.Hops, fmtLatency(vpcHopLatency))
		if l.Path == PathHost {
			step = "assumed"
		}
		if l.StepMeasured {
			step = "half the measured --nccl-latency"
		}
		busbw := "assumed; the NCCL check's 16 MiB busbw, --nccl-bandwidth"
		if l.BusMeasured {
			busbw = "--nccl-bandwidth"
		}
		p("  network", "%.1f ms: %d all-reduces x %s and %d all-gather x %s (ring of %d: %d and %d steps of %s, %s), plus %d KiB at %.2f GB/s bus bandwidth (%s; peak %.2f GB/s)",
			ms(d.Network), d.AllReduces, fmtLatency(l.AllReduce(c.TP)), d.AllGathers, fmtLatency(l.AllGather(c.TP)), c.TP, 2*(c.TP-1), c.TP-1,
			fmtLatency(l.Step), step, d.Payload/1024, l.BusBandwidth/1e9, busbw, l.PeakBusBandwidth/1e9)
		p("  path", "%s (--path %s)", l.describe(), l.Path)
	}
	p("  not counted", "sampling, kernel launch gaps, Ray's per-step dispatch to the other workers")
}

func printPrefill(p func(string, string, ...any), r Result, e *PrefillEstimate) {
	p("prefill", "time to first token about %.2f s for a %d-token prompt (%d chunk(s) of max_num_batched_tokens %d); bound %.2f s at the peak figures",
		sec(e.TTFT), e.PromptTokens, e.Chunks, e.ChunkTokens, sec(e.TTFTBound))
	p("  compute", "%.2f s: %.1f TFLOP per GPU at %.0f TFLOPS (assumed realistic fp16; peak %.0f)",
		sec(e.Compute), e.FLOPs/1e12, e.FLOPS/1e12, e.PeakFLOPS/1e12)
	if e.Bytes > 0 {
		perChunk := int64(min(e.ChunkTokens, e.PromptTokens)) * int64(r.Config.Model.Hidden) * int64(r.DtypeBytes)
		p("  network", "%.2f s: %s of bus traffic (%d all-reduces of %d MiB a chunk) at %.2f GB/s, plus ring latency",
			sec(e.Network), gib(e.Bytes), 2*r.Config.Model.Layers+1, perChunk>>20, r.Decode.Link.BusBandwidth/1e9)
	} else {
		p("  network", "none (one GPU)")
	}
	p("  decode stall", "a decode step scheduled beside a full %d-token chunk waits %.2f s", e.ChunkTokens, sec(e.ChunkStep))
}

func printLayout(p func(string, string, ...any), l Layout) {
	shape := fmt.Sprintf("%d x (%s + %d T4)", l.VMs, l.MachineType, l.GPUsPerVM)
	if l.Profile != "" {
		shape = fmt.Sprintf("%s + %d T4 (profile %s)", l.MachineType, l.GPUsPerVM, l.Profile)
	}
	price := "price unknown"
	if l.PriceKnown {
		price = fmt.Sprintf("$%.2f/h on demand (price table of %s)", l.Hourly, l.PriceAsOf)
	}
	r := l.Result
	est := "no estimate (shape unknown)"
	if d, e := r.Decode, r.Prefill; d != nil && e != nil {
		est = fmt.Sprintf("decode about %.1f tokens/s (%.1f over %d), TTFT about %.2f s for %d tokens",
			d.TokensPerSecond, d.BatchTokensPerSecond, d.Batch, sec(e.TTFT), e.PromptTokens)
	}
	p("layout "+l.Name, "%s, %s: %s; quota %d T4 (NVIDIA_T4_GPUS, GPUS_ALL_REGIONS), %d N1 vCPUs; --path %s",
		shape, price, est, l.QuotaGPUs, l.QuotaN1VCPUs, l.Path)
	for _, n := range l.Needs {
		p("  needs", "%s", n)
	}
}

// printPipeline sets the layout's tensor-parallel figures beside the
// same podVMs with pipeline parallelism.
func printPipeline(p func(string, string, ...any), l Layout) {
	r, pp := l.Result, l.Pipeline
	d, e := r.Decode, r.Prefill
	if d == nil || e == nil {
		return
	}
	c := r.Config
	n := pp.Stages
	p(fmt.Sprintf("tp %d against pp %d", c.TP, n), "same %s (--path %s) and engine settings, with pipeline_parallel_size %d and tensor_parallel_size 1 (vLLM's advice across nodes: tensor parallelism inside a node, pipeline parallelism between nodes)",
		l.Name, l.Path, n)
	stages := make([]string, len(pp.Stage))
	times := make([]string, len(pp.Stage))
	for i, s := range pp.Stage {
		stages[i] = s.describe()
		times[i] = fmt.Sprintf("%.1f", ms(s.Memory))
	}
	p("  weights per GPU", "TP %s each; PP %s", gib(r.WeightsPerGPU), strings.Join(stages, ", "))
	p("  KV capacity", "TP %d tokens (%.2f sequences of %d); PP %d tokens (%.2f), the smallest stage's: vLLM sizes every stage's cache to it, and a stage's MLP activations at full width (and, after the first, its buffer for the incoming tensors) take more of the budget",
		r.KVTokens, r.Concurrency, c.MaxModelLen, pp.KVTokens, pp.Concurrency)
	if !pp.Fits {
		p("  PP does not fit", "the smallest stage holds %d tokens, fewer than max_model_len %d: vLLM would refuse to start", pp.KVTokens, c.MaxModelLen)
	}
	waiting := "the others wait"
	if n == 2 {
		waiting = "the other waits"
	}
	p("  decode, one sequence", "TP %.1f tokens/s (%.1f ms: %.1f memory, %.1f network); PP %.1f tokens/s (%.1f ms: the stages in turn, %s ms, and %s of %.2f ms): while one stage works %s (the pipeline bubble)",
		d.TokensPerSecond, ms(d.PerToken), ms(d.Memory), ms(d.Network), pp.TokensPerSecond, ms(pp.PerToken), strings.Join(times, " + "), count(n-1, "send"), ms(pp.Send), waiting)
	p(fmt.Sprintf("  decode, %d sequences", pp.Batch), "TP %.1f tokens/s; PP %.1f as one batch in flight, %.1f as %d micro-batches of %d on the stages at once (each reads the stage's weights again; vLLM's Ray executor allows pipeline_parallel_size batches in flight, how its scheduler divides the sequences is not modelled)",
		d.BatchTokensPerSecond, pp.BatchTokensPerSecond, pp.OverlapTokensPerSecond, pp.MicroBatches, pp.MicroBatch)
	p("  time to first token", "TP %.2f s; PP %.2f s for %d tokens: the stages' compute in turn (%.2f s) and one send of the chunk's hidden state and residual per boundary (%.2f s) instead of %d all-reduces of the chunk",
		sec(e.TTFT), sec(pp.TTFT), e.PromptTokens, sec(pp.PrefillCompute), sec(pp.PrefillNetwork), d.AllReduces)
	p("  network per token", "TP %d all-reduces and %d all-gather: %d ring steps of %s and %d KiB of bus traffic; PP one send of %d KiB (hidden state and residual) per stage boundary: %s of %s",
		d.AllReduces, d.AllGathers, d.AllReduces*2*(c.TP-1)+d.AllGathers*(c.TP-1), fmtLatency(d.Link.Step), d.Payload/1024, pp.SendBytes/1024, count(n-1, "step"), fmtLatency(pp.Link.Step))
	step := "assumed; the NCCL check measures it, --nccl-latency"
	if pp.Link.StepMeasured {
		step = "half the measured --nccl-latency"
	}
	switch x := pp.CrossoverStep(d, c.TP); {
	case x > 0:
		p("  network sensitivity", "PP decodes one sequence faster than TP once a ring step exceeds %s (now %s, %s)", fmtLatency(x.Round(time.Microsecond)), fmtLatency(pp.Link.Step), step)
	case x == 0:
		p("  network sensitivity", "PP decodes one sequence faster than TP at any ring-step latency")
	}
	p("  losing one podVM", "the same for both: the engine stops, since every TP all-reduce needs %s and every PP token passes %s; requests in flight fail and the running sequences' KV cache is lost",
		every(c.TP, "rank"), every(n, "stage"))
	p("  serving again", "the same for both: a new podVM's start-up (insert, boot, image pull, the whole checkpoint downloaded again: gcp-t4 plan -f prints each phase), then the engine loads on every podVM")
}

// count writes "one send" or "3 sends".
func count(n int, noun string) string {
	if n == 1 {
		return "one " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// every writes "both ranks" or "all 4 ranks".
func every(n int, noun string) string {
	if n == 2 {
		return "both " + noun + "s"
	}
	return fmt.Sprintf("all %d %ss", n, noun)
}

func sizesList(s []int) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(v)
	}
	if len(parts) > 6 {
		return strings.Join(parts[:4], ", ") + ", ..., " + parts[len(parts)-1]
	}
	return strings.Join(parts, ", ")
}

func sec(d time.Duration) float64 { return d.Seconds() }

func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtLatency writes a latency the way --nccl-latency reads it back.
func fmtLatency(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', -1, 64) + "us"
}
