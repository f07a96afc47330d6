package fit

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	rc := Main(t.Context(), args, &out, &errb, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return rc, out.String(), errb.String()
}

// containsFlat says whether out says want, whatever the wrapping and the
// key column's padding: the report wraps its values to 100 columns.
func containsFlat(out, want string) bool {
	return strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " "))
}

// TestReportFitsTheWidth: every line of the report fits 100 columns, a
// value's later lines are indented to its column, and a URL too wide for
// that column starts below its key, whole.
func TestReportFitsTheWidth(t *testing.T) {
	rc, out, stderr := runMain(t, "--model", "mistralai/Mistral-Nemo-Instruct-2407", "--gpu", "t4", "--tp", "2",
		"--max-model-len", "8192", "--gpu-memory-utilization", "0.95", "--enforce-eager", "--dtype", "half",
		"--max-num-batched-tokens", "2048", "--max-num-seqs", "8")
	if rc != 0 {
		t.Fatalf("exit %d, stderr %s", rc, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	col := strings.Index(lines[0], "mistralai/")
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("a line of %d columns: %s", n, l)
		}
		if strings.HasPrefix(l, " ") && len(l)-len(strings.TrimLeft(l, " ")) > 2 && len(l)-len(strings.TrimLeft(l, " ")) != col &&
			!strings.HasPrefix(l, "    https://") {
			t.Errorf("a line that is neither a key nor a value's continuation at column %d: %q", col, l)
		}
	}
	if !strings.Contains(out, "\nshape from\n    https://huggingface.co/mistralai/Mistral-Nemo-Instruct-2407/blob/main/config.json\n") {
		t.Errorf("the model's source is not whole on its own line:\n%s", out)
	}
	if !strings.Contains(out, "\nlayout 2 podVMs          2 x (n1-standard-8 + 1 T4), $1.46/h on demand") {
		t.Errorf("the values are not in one column:\n%s", out)
	}
}

// The command the example's comment and the runbook give: it prints the
// headroom, the KV capacity and a tokens/s estimate with its assumptions
// (the numbers are TestExampleModelFitsTwoT4s's and
// TestExampleDecodeEstimate's).
func TestMainExampleCommand(t *testing.T) {
	rc, out, stderr := runMain(t, "--model", "mistralai/Mistral-Nemo-Instruct-2407", "--gpu", "t4", "--tp", "2",
		"--max-model-len", "8192", "--gpu-memory-utilization", "0.95", "--enforce-eager", "--dtype", "half",
		"--max-num-batched-tokens", "2048", "--max-num-seqs", "8")
	if rc != 0 {
		t.Fatalf("exit %d, stderr %s", rc, stderr)
	}
	for _, want := range []string{
		"shape from               https://huggingface.co/mistralai/Mistral-Nemo-Instruct-2407/blob/main/config.json",
		"parameters               12247782400 (12.25B)",
		"weights                  22.81 GiB (24.5 GB) at half",
		"weights per GPU          11.41 GiB",
		"vLLM budget per GPU      14.01 GiB (gpu_memory_utilization 0.95)",
		"headroom per GPU         0.74 GiB outside the budget: CUDA context and NCCL 0.50 GiB (assumed, --cuda-context-memory), 0.24 GiB left",
		"RoPE cache per GPU       0.24 GiB: cos_sin_cache of max_position_embeddings 1024000 x head_dim 128 x 2 bytes, counted as weights by vLLM",
		"activation peak          0.16 GiB: forward of max_num_batched_tokens 2048 (0.16 GiB), sampler over 8 sequences (0.05 GiB",
		"non-torch memory         0.25 GiB (assumed",
		"CUDA graphs              none (enforce_eager, which also turns torch.compile off)",
		"KV-cache room per GPU    1.95 GiB",
		"KV cache per token       80 KiB per GPU",
		"KV capacity              25568 tokens (max_model_len 8192: 3.12 sequences at once)",
		"decode                   about 11.1 tokens/s for one sequence (90.3 ms per token), 80.4 tokens/s over 8 sequences; bound 12.9 tokens/s at the peak figures",
		"  memory                 48.6 ms: 10.78 GiB of weights and 0.08 GiB of KV cache (1024 tokens of context) per GPU at 240 GB/s (assumed realistic, --memory-bandwidth); 36.4 ms at the 320 GB/s peak",
		"  network                41.7 ms: 81 all-reduces x 500us and 1 all-gather x 250us (ring of 2: 2 and 1 steps of 250us, assumed: 40us NCCL + 3 hops x 70us), plus 938 KiB at 1.00 GB/s bus bandwidth (assumed;",
		"prefill                  time to first token about 2.66 s for a 2048-token prompt",
		"  network                1.74 s: 1.58 GiB of bus traffic (81 all-reduces of 20 MiB a chunk) at 1.00 GB/s",
		"layout 2 podVMs          2 x (n1-standard-8 + 1 T4), $1.46/h on demand",
		"layout 1 podVM           n1-standard-8 + 2 T4 (profile t4-2), $1.08/h on demand",
		"decode about 20.0 tokens/s (149.2 over 8), TTFT about 1.21 s for 2048 tokens; quota 2 T4 (NVIDIA_T4_GPUS, GPUS_ALL_REGIONS), 8 N1 vCPUs; --path host",
		"verdict                  FITS: the KV cache holds 25568 tokens",
		// The same two podVMs with pipeline parallelism (pipeline_test.go's figures).
		"tp 2 against pp 2        same 2 podVMs (--path vpc) and engine settings, with pipeline_parallel_size 2 and tensor_parallel_size 1",
		"  weights per GPU        TP 11.41 GiB each; PP 11.41 GiB (layers 0-19 and the embedding), 11.41 GiB (layers 20-39, final norm and LM head)",
		"  KV capacity            TP 25568 tokens (3.12 sequences of 8192); PP 24240 tokens (2.96), the smallest stage's",
		"  decode, one sequence   TP 11.1 tokens/s (90.3 ms: 48.6 memory, 41.7 network); PP 10.3 tokens/s (97.4 ms: the stages in turn, 45.8 + 51.4 ms, and one send of 0.27 ms)",
		"  decode, 8 sequences    TP 80.4 tokens/s; PP 78.1 as one batch in flight, 76.3 as 2 micro-batches of 4",
		"  time to first token    TP 2.66 s; PP 1.88 s for 2048 tokens",
		"  network sensitivity    PP decodes one sequence faster than TP once a ring step exceeds 294us (now 250us, assumed;",
		"  losing one podVM       the same for both: the engine stops",
		"  serving again          the same for both: a new podVM's start-up",
	} {
		if !containsFlat(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// The NCCL check's numbers feed the estimate: a 350 us 2-rank all-reduce
// is 175 us a step, 81 x 350 + 175 = 28.525 ms, plus 938 KiB at 2 GB/s
// (960,512 / 2e9 = 0.48 ms) = 29.0 ms.
func TestMainMeasuredNetwork(t *testing.T) {
	rc, out, stderr := runMain(t, "--model", "mistralai/Mistral-Nemo-Instruct-2407", "--tp", "2",
		"--gpu-memory-utilization", "0.95", "--enforce-eager", "--max-num-seqs", "8",
		"--nccl-latency", "350us", "--nccl-bandwidth", "2GB/s", "--memory-bandwidth", "250GB/s")
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr)
	}
	for _, want := range []string{
		"  network                29.0 ms: 81 all-reduces x 350us and 1 all-gather x 175us (ring of 2: 2 and 1 steps of 175us, half the measured --nccl-latency), plus 938 KiB at 2.00 GB/s bus bandwidth (--nccl-bandwidth; peak 2.00 GB/s)",
		"at 250 GB/s (--memory-bandwidth); 36.4 ms at the 320 GB/s peak",
		"once a ring step exceeds 285us (now 175us, half the measured --nccl-latency)",
	} {
		if !containsFlat(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// --path host: the one-podVM estimate on its own.
	rc, out, _ = runMain(t, "--model", "mistralai/Mistral-Nemo-Instruct-2407", "--tp", "2", "--path", "host",
		"--gpu-memory-utilization", "0.95", "--enforce-eager", "--max-num-seqs", "8")
	if rc != 0 || !containsFlat(out, "(ring of 2: 2 and 1 steps of 8us, assumed)") || !containsFlat(out, "one podVM: NCCL P2P over PCIe, or SHM through host memory (--path host)") {
		t.Errorf("--path host: exit %d:\n%s", rc, out)
	}
}

// A quantised catalogue entry, and a config.json read from disk.
func TestMainQuantisedAndConfigFile(t *testing.T) {
	rc, out, stderr := runMain(t, "--model", "casperhansen/mistral-nemo-instruct-2407-awq", "--tp", "1", "--max-num-seqs", "8")
	if rc != 0 || !strings.Contains(out, "weights                  7.78 GiB (8.4 GB) as awq (4-bit, group size 128), activations half") ||
		!strings.Contains(out, "network                none (one GPU)") {
		t.Errorf("exit %d, stderr %s:\n%s", rc, stderr, out)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	b, err := os.ReadFile("models/mistralai--Mistral-Nemo-Instruct-2407.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rc, out, stderr = runMain(t, "--config", path, "--tp", "1", "--quantization", "awq", "--max-num-seqs", "8")
	if rc != 0 || !strings.Contains(out, "weights                  7.78 GiB (8.4 GB) as awq") {
		t.Errorf("--config with --quantization awq: exit %d, stderr %s:\n%s", rc, stderr, out)
	}
}

// The form: a size, no architecture.
func TestMainModelSize(t *testing.T) {
	rc, out, stderr := runMain(t, "--model-size", "20GB", "--gpu", "t4", "--tp", "2")
	if rc != 0 {
		t.Fatalf("exit %d, stderr %s", rc, stderr)
	}
	for _, want := range []string{"weights per GPU          9.31 GiB", "activation peak          1.00 GiB (assumed: the shape is unknown", "KV-cache room per GPU    2.71 GiB", "verdict                  FITS:"} {
		if !containsFlat(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestMainDoesNotFitExitsOne(t *testing.T) {
	rc, out, _ := runMain(t, "--params", "23.57B", "--layers", "40", "--kv-heads", "8", "--head-dim", "128", "--tp", "2")
	if rc != 1 || !strings.Contains(out, "verdict                  DOES NOT FIT") {
		t.Fatalf("exit %d, want 1 with DOES NOT FIT:\n%s", rc, out)
	}
}

func TestMainBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tp", "2"}, "exactly one of --model, --config, --model-size, --params"},
		{[]string{"--model-size", "20", "--tp", "2"}, `"20" has no unit`},
		{[]string{"--model-size", "20GB", "--params", "7B"}, "exactly one"},
		{[]string{"--model", "mistral-large"}, `model "mistral-large" is not in the catalogue`},
		{[]string{"--model-size", "20GB", "--gpu", "a100"}, `gpu "a100" is unknown`},
		{[]string{"--model-size", "20GB", "--layers", "40"}, "give all of --layers, --kv-heads and --head-dim"},
		{[]string{"--model-size", "20GB", "--dtype", "bfloat16"}, "use --dtype half"},
		{[]string{"--model-size", "20GB", "--gpu-memory", "lots"}, "--gpu-memory"},
		{[]string{"--params", "many"}, "--params"},
		{[]string{"--model-size", "20GB", "extra"}, `unexpected argument "extra"`},
		{[]string{"--model", "mistralai/Mistral-7B-Instruct-v0.3", "--layers", "3"}, "bring the architecture"},
		{[]string{"--model-size", "20GB", "--heads", "-4"}, "must not be negative"},
		{[]string{"--model", "mistralai/Mistral-Nemo-Instruct-2407", "--tp", "2", "--quantization", "fp8"}, "requires compute capability 8.0 and the T4 is 7.5"},
		{[]string{"--model", "mistralai/Mistral-Nemo-Instruct-2407", "--quantization", "nf4"}, `--quantization "nf4": use one of none, awq, gptq, int8, fp8`},
		{[]string{"--model", "casperhansen/mistral-nemo-instruct-2407-awq", "--quantization", "gptq"}, "is already quantised as awq"},
		{[]string{"--model-size", "20GB", "--quantization", "awq"}, "needs the model's shape"},
		{[]string{"--model-size", "20GB", "--nccl-latency", "fast"}, `"fast" is not a duration`},
		{[]string{"--model-size", "20GB", "--nccl-latency", "-1ms"}, "must be positive"},
		{[]string{"--model-size", "20GB", "--nccl-bandwidth", "1Gbps"}, "--nccl-bandwidth"},
		{[]string{"--model-size", "20GB", "--memory-bandwidth", "0GB/s"}, "--memory-bandwidth"},
		{[]string{"--config", "does-not-exist.json"}, "--config"},
		{[]string{"--model-size", "20GB", "--path", "ib"}, `--path: path "ib": use vpc`},
		{[]string{"--model-size", "20GB", "--prompt-tokens", "0"}, "--prompt-tokens 0"},
	} {
		rc, _, stderr := runMain(t, tc.args...)
		if rc != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, rc, stderr, tc.want)
		}
	}
}

func TestMainGPUMemoryOverride(t *testing.T) {
	// ECC off: 16 GiB, and nothing else changes.
	rc, out, _ := runMain(t, "--model-size", "20GB", "--tp", "2", "--gpu-memory", "16GiB")
	if rc != 0 || !strings.Contains(out, "2 x T4, 16.00 GiB each") {
		t.Fatalf("exit %d:\n%s", rc, out)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"20GB": 20e9, "18.6GiB": 19971597926, "512MiB": 512 << 20, "0": 0, " 1.5 GB": 1.5e9, "1TB": 1e12,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "20", "-1GB", "GB", "1e999GB", "NaNGB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	// The defaults print in a form ParseSize reads back.
	if got, err := ParseSize(size(DefaultOverheads.CUDAContext)); err != nil || got != DefaultOverheads.CUDAContext {
		t.Errorf("round trip of %d: %d, %v", DefaultOverheads.CUDAContext, got, err)
	}
}

func TestParseCount(t *testing.T) {
	for in, want := range map[string]int64{"12.25B": 12_250_000_000, "7000M": 7e9, "12247782400": 12_247_782_400} {
		if got, err := ParseCount(in); err != nil || got != want {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-3B", "B", "x"} {
		if _, err := ParseCount(in); err == nil {
			t.Errorf("ParseCount(%q) accepted", in)
		}
	}
}

// The runbook shows `gcp-t4 plan serve` and its output; both must be what
// the command prints today. A line ending in "..." is compared up to there.
func TestRunbookShowsCurrentOutput(t *testing.T) {
	blocks, err := doccmd.File("../../../docs/runbook-mistral-tp2.md")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(blocks, func(b doccmd.Block) bool {
		return len(b.Commands) > 0 && strings.HasPrefix(b.Commands[0].Text, "gcp-t4 plan serve ")
	})
	if i < 0 {
		t.Fatal("the runbook has no sh block starting with gcp-t4 plan serve")
	}
	cmd := blocks[i].Commands[0].Text
	if i+1 == len(blocks) || blocks[i+1].Lang != "text" {
		t.Fatal("no text block with the output after the command")
	}
	shown := blocks[i+1].Text
	rc, out, stderr := runMain(t, strings.Fields(cmd)[3:]...)
	if rc != 0 {
		t.Fatalf("%s: exit %d: %s", cmd, rc, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(shown), "\n") {
		if p, ok := strings.CutSuffix(line, "..."); ok {
			line = p
		}
		if !strings.Contains(out, line) {
			t.Errorf("the runbook shows %q; the command prints:\n%s", line, out)
		}
	}
}

// The runbook's prose quotes `plan serve` for tp 4 over the VPC path and
// for the one-podVM layout; those figures are the command's.
func TestRunbookProseMatchesTheCommand(t *testing.T) {
	b, err := os.ReadFile("../../../docs/runbook-mistral-tp2.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	args := []string{"--model", "mistralai/Mistral-Nemo-Instruct-2407", "--max-model-len", "8192", "--gpu-memory-utilization", "0.95",
		"--enforce-eager", "--max-num-batched-tokens", "2048", "--max-num-seqs", "8"}
	var r2, r4 Result
	for tp, dst := range map[string]*Result{"2": &r2, "4": &r4} {
		cfg, err := ParseArgs(append(slices.Clone(args), "--tp", tp), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if *dst, err = Compute(cfg); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := ParseArgs(append(slices.Clone(args), "--tp", "2", "--path", "host"), io.Discard)
	host, _ := Compute(cfg)
	cfg, _ = ParseArgs(append(slices.Clone(args), "--tp", "2"), io.Discard)
	pp, err := ComputePipeline(cfg)
	if err != nil || pp == nil {
		t.Fatalf("pipeline: %v", err)
	}
	crossover := pp.CrossoverStep(r2.Decode, 2)
	for _, want := range []string{
		fmt.Sprintf("(about %.1f against %.1f tokens/s)", r4.Decode.TokensPerSecond, r2.Decode.TokensPerSecond),
		fmt.Sprintf("decode about %.0f against %.0f tokens/s for one sequence", host.Decode.TokensPerSecond, r2.Decode.TokensPerSecond),
		fmt.Sprintf("time to first token about %.1f against %.1f s for 2048 tokens", host.Prefill.TTFT.Seconds(), r2.Prefill.TTFT.Seconds()),
		fmt.Sprintf("a 2048-token prompt's first token takes about %.1f s on two podVMs", r2.Prefill.TTFT.Seconds()),
		fmt.Sprintf("%d tokens", r2.KVTokens) + "", // the output block
		fmt.Sprintf("decodes at about %.1f against %.1f tokens/s", pp.TokensPerSecond, r2.Decode.TokensPerSecond),
		fmt.Sprintf("once a step exceeds about %d µs", crossover.Round(time.Microsecond)/time.Microsecond),
		fmt.Sprintf("(about %.1f against %.1f s for 2048 tokens", pp.TTFT.Seconds(), r2.Prefill.TTFT.Seconds()),
		fmt.Sprintf("(%s tokens: a stage's", thousands(pp.KVTokens)),
	} {
		if !strings.Contains(doc, want) && !strings.Contains(doc, strings.ReplaceAll(want, "25568 tokens", "25,568 tokens")) {
			t.Errorf("the runbook does not say %q", want)
		}
	}
}

// thousands writes 24240 as 24,240, as the runbook's prose does.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
