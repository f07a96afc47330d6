package fit

import (
	"fmt"
	"strings"
)

// Quantisation methods, named as --quantization takes them. The storage
// layouts below are the tensors vLLM allocates for one linear layer's
// partition in create_weights (vllm/model_executor/layers/quantization/
// awq.py and gptq.py, vLLM v0.11.0); the capability floors are their
// get_min_capability.
const (
	// None: weights at the activation dtype.
	None = ""
	// AWQ: 4-bit, zero point, group size G (AutoAWQ "gemm"): qweight
	// int32[in, out/8], qzeros int32[in/G, out/8], scales fp16[in/G, out].
	// Compute capability 7.5 and up (awq.py: 75).
	AWQ = "awq"
	// GPTQ: b-bit (4 here), group size G: qweight int32[in/(32/b), out],
	// g_idx int32[in], qzeros int32[in/G, out/(32/b)], scales fp16[in/G,
	// out]. Compute capability 6.0 and up (gptq.py: 60). On a T4 vLLM keeps
	// the plain gptq kernels: gptq_marlin needs 8.0.
	GPTQ = "gptq"
	// INT8: 8-bit GPTQ, the layout above with b = 8 (vLLM's gptq method
	// accepts 2, 3, 4 and 8 bits). A W8A8 compressed-tensors checkpoint
	// (int8 weights, one fp32 scale per output channel; capability 7.5)
	// is within 2 % of this size.
	INT8 = "int8"
	// FP8: vLLM's fp8 method needs compute capability 8.0 (fp8.py: 80:
	// weight-only FP8 through Marlin on Ampere, native on 8.9+).
	FP8 = "fp8"
)

// Quant is a checkpoint's weight format.
type Quant struct {
	Method    string
	Bits      int
	GroupSize int
}

// Methods lists --quantization's values.
var Methods = []string{"none", AWQ, GPTQ, INT8, FP8}

// ParseQuant reads --quantization (with --group-size for the grouped
// methods).
func ParseQuant(s string, groupSize int) (Quant, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return Quant{}, nil
	case AWQ:
		return quantFromConfig("awq", 4, groupSize)
	case GPTQ:
		return quantFromConfig("gptq", 4, groupSize)
	case INT8:
		return quantFromConfig("gptq", 8, groupSize)
	case FP8:
		return Quant{Method: FP8, Bits: 8}, nil
	}
	return Quant{}, fmt.Errorf("--quantization %q: use one of %s", s, strings.Join(Methods, ", "))
}

// quantFromConfig maps a checkpoint's quantization_config (quant_method,
// bits, group_size) to a Quant.
func quantFromConfig(method string, bits, groupSize int) (Quant, error) {
	switch strings.ToLower(method) {
	case "awq":
		if bits != 4 {
			return Quant{}, fmt.Errorf("awq with %d bits: vLLM's awq method supports 4 bits only", bits)
		}
		if groupSize <= 0 {
			return Quant{}, fmt.Errorf("awq needs a positive group_size, got %d", groupSize)
		}
		return Quant{Method: AWQ, Bits: 4, GroupSize: groupSize}, nil
	case "gptq":
		if bits != 4 && bits != 8 {
			return Quant{}, fmt.Errorf("gptq with %d bits: this calculator sizes 4- and 8-bit GPTQ", bits)
		}
		if groupSize <= 0 {
			return Quant{}, fmt.Errorf("gptq needs a positive group_size (act-order checkpoints with group_size -1 are not sized here), got %d", groupSize)
		}
		m := GPTQ
		if bits == 8 {
			m = INT8
		}
		return Quant{Method: m, Bits: bits, GroupSize: groupSize}, nil
	case "fp8":
		return Quant{Method: FP8, Bits: 8}, nil
	}
	return Quant{}, fmt.Errorf("quant_method %q is not one this calculator sizes (awq, gptq, fp8)", method)
}

// String names the format for the report.
func (q Quant) String() string {
	switch q.Method {
	case None:
		return "none"
	case FP8:
		return "fp8"
	}
	return fmt.Sprintf("%s (%d-bit, group size %d)", q.Method, q.Bits, q.GroupSize)
}

// MinCapability is the compute capability (x10) vLLM requires.
func (q Quant) MinCapability() int {
	switch q.Method {
	case AWQ:
		return 75
	case GPTQ, INT8:
		return 60
	case FP8:
		return 80
	}
	return 0
}

// linearBytes is the memory of one linear layer partition of in x out
// weights; act is the activation dtype's size (unquantised weights).
func (q Quant) linearBytes(in, out int64, act int) int64 {
	switch q.Method {
	case AWQ:
		g := int64(q.GroupSize)
		return in*(out/8)*4 + (in/g)*(out/8)*4 + (in/g)*out*2
	case GPTQ, INT8:
		g, pack := int64(q.GroupSize), int64(32/q.Bits)
		return (in/pack)*out*4 + in*4 + (in/g)*(out/pack)*4 + (in/g)*out*2
	case FP8:
		return in*out + 4
	}
	return in * out * int64(act)
}

// dequantTemp is the fp16 copy of a partition's weights a quantised
// matmul of tokens rows materialises: vLLM's awq apply_weights
// dequantises the whole weight when tokens >= 256
// (FP16_MATMUL_HEURISTIC_CONDITION), and the gptq kernel (gptq_gemm)
// allocates a dequantisation buffer of the full weight on every call.
func (q Quant) dequantTemp(in, out, tokens int64) int64 {
	switch q.Method {
	case AWQ:
		if tokens >= 256 {
			return in * out * 2
		}
	case GPTQ, INT8:
		return in * out * 2
	}
	return 0
}

// check refuses what vLLM refuses for this quantisation on gpu and dtype.
func (q Quant) check(gpu GPU, dtype string) error {
	if q.Method == None {
		return nil
	}
	if gpu.Capability < q.MinCapability() {
		hint := "awq, gptq or int8"
		return fmt.Errorf("quantization %s on %s: vLLM requires compute capability %d.%d and the %s is %d.%d (vLLM's %s get_min_capability); use %s",
			q.Method, gpu.Name, q.MinCapability()/10, q.MinCapability()%10, gpu.Name, gpu.Capability/10, gpu.Capability%10, q.Method, hint)
	}
	if q.Method != FP8 && dtype != "half" && dtype != "float16" {
		return fmt.Errorf("quantization %s computes in float16 only (get_supported_act_dtypes): use --dtype half", q.Method)
	}
	return nil
}
