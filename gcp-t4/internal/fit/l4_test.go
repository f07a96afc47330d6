package fit

import (
	"strings"
	"testing"
)

// plan serve knows the L4 from the provider's GPU catalogue: its memory,
// compute capability 8.9 and bfloat16, with no GPU row of its own here.
func TestPlanServeOnL4(t *testing.T) {
	g, err := LookupGPU("L4")
	if err != nil {
		t.Fatal(err)
	}
	if g.Accelerator != "nvidia-l4" || g.Capability != 89 || !g.BF16() || g.Memory != 22*GiB {
		t.Fatalf("L4 = %+v", g)
	}
	if t4, _ := LookupGPU("t4"); t4.BF16() {
		t.Fatal("the T4 has no bfloat16")
	}
	// The example's model in its checkpoint's bfloat16 on two L4s: the T4
	// refuses that dtype, the L4 takes it.
	args := []string{"--model", "mistralai/Mistral-Nemo-Instruct-2407", "--tp", "2", "--max-model-len", "8192",
		"--gpu-memory-utilization", "0.95", "--enforce-eager", "--dtype", "bfloat16", "--max-num-batched-tokens", "2048", "--max-num-seqs", "8"}
	rc, _, stderr := runMain(t, append([]string{"--gpu", "t4"}, args...)...)
	if rc == 0 || !strings.Contains(stderr, "has no bf16") {
		t.Fatalf("bfloat16 on the T4: exit %d, %s", rc, stderr)
	}
	rc, out, stderr := runMain(t, append([]string{"--gpu", "l4"}, args...)...)
	if rc != 0 {
		t.Fatalf("exit %d, stderr %s", rc, stderr)
	}
	for _, want := range []string{"2 x L4, 22.00 GiB each as CUDA reports it, compute capability 8.9", "at bfloat16", "at 225 GB/s", "300 GB/s peak"} {
		if !containsFlat(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// An unknown GPU names the catalogue's.
	if rc, _, stderr := runMain(t, append([]string{"--gpu", "a100"}, args...)...); rc == 0 || !strings.Contains(stderr, "known: t4, l4") {
		t.Errorf("--gpu a100: exit %d, %s", rc, stderr)
	}
}
