package kuberay

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/test/controlplane/doccmd"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
)

const (
	repoRoot = "../.."
	runbook  = repoRoot + "/docs/runbook-mistral-tp2.md"
)

// commands returns the runbook's shell commands, read as every test that
// runs a guide reads one (doccmd): the lines of its ```sh blocks,
// continuation lines joined, comments dropped.
func commands(t *testing.T) []string {
	t.Helper()
	blocks, err := doccmd.File(runbook)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, c := range doccmd.Commands(blocks) {
		cmds = append(cmds, c.Text)
	}
	if len(cmds) < 10 {
		t.Fatalf("found %d commands in %s; the parser or the runbook is broken", len(cmds), runbook)
	}
	return cmds
}

// flagValue returns the word after flag in fields ("" if absent).
func flagValue(fields []string, flag string) string {
	for i, f := range fields {
		if f == flag && i+1 < len(fields) {
			return strings.Trim(fields[i+1], `"'`)
		}
		if v, ok := strings.CutPrefix(f, flag+"="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// The runbook's commands name the example's files, namespace, resources,
// labels, model, model image and settings as they are.
func TestRunbookCommandsMatchTheExample(t *testing.T) {
	objs := example(t)
	check := ncclCheck(t)
	rs := only[*rayv1.RayService](t, objs)
	svc := only[*corev1.Service](t, objs)
	llm := theLLM(t, rs)
	ns := rs.Namespace
	head := rs.Spec.RayClusterSpec.HeadGroupSpec.Template
	names := map[string]bool{} // kind/name
	single := singlePodVM(t)
	singleSvc := only[*corev1.Service](t, single)
	for _, o := range append(append(slices.Clone(objs), check...), single...) {
		names[strings.ToLower(o.kind)+"/"+o.name] = true
	}
	applied := map[string]bool{}
	var planned bool
	var downloaded, packed, pinned string // hf download's --local-dir, cache model's -dir, the model pin

	pathRe := regexp.MustCompile(`\binstall/[A-Za-z0-9_./-]+`)
	refRe := regexp.MustCompile(`\b(svc|service|pod|rayservice)/([a-z0-9-]+)`)
	for _, c := range commands(t) {
		fields := strings.Fields(c)
		for _, p := range pathRe.FindAllString(c, -1) {
			if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
				t.Errorf("%q: %s does not exist", c, p)
			}
		}
		for _, m := range refRe.FindAllStringSubmatch(c, -1) {
			kind := map[string]string{"svc": "service"}[m[1]]
			if kind == "" {
				kind = m[1]
			}
			if !names[kind+"/"+m[2]] {
				t.Errorf("%q: no %s %s in the example", c, kind, m[2])
			}
		}
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "hf":
			// The checkpoint served, its shards only, into the directory
			// cache model reads.
			if fields[1] != "download" || fields[2] != modelSourceID || flagValue(fields, "--exclude") != "consolidated.safetensors" {
				t.Errorf("%q: want hf download %s --exclude consolidated.safetensors", c, modelSourceID)
			}
			downloaded = flagValue(fields, "--local-dir")
		case "export":
			if strings.Contains(c, "gcp-t4 cache model ") {
				packed = flagValue(fields, "-dir")
			}
		case "kustomize":
			if strings.Contains(c, modelImage+"=") {
				pinned = c
			}
		case "kubectl":
			if n := flagValue(fields, "-n"); n != "" && n != ns && !strings.Contains(c, "kuberay-operator") {
				t.Errorf("%q: namespace %s, the example's is %s", c, n, ns)
			}
			if k := flagValue(fields, "-k"); strings.HasPrefix(k, "install/") {
				applied[k] = true
			}
			if i := slices.Index(fields, "namespace"); i > 0 && fields[i-1] == "create" && fields[i+1] != ns {
				t.Errorf("%q: creates namespace %s, the example's is %s", c, fields[i+1], ns)
			}
			if slices.Contains(fields, "secret") {
				t.Errorf("%q: the example reads no Secret (the weights are the model image's)", c)
			}
			if i := slices.Index(fields, "rayservice"); i > 0 && i+1 < len(fields) && fields[i+1] != rs.Name {
				t.Errorf("%q: the RayService is %s", c, rs.Name)
			}
			if i := slices.Index(fields, "logs"); i > 0 && !names["pod/"+fields[i+1]] {
				t.Errorf("%q: no pod %s", c, fields[i+1])
			}
			if sel := flagValue(fields, "-l"); sel != "" {
				for _, kv := range strings.Split(sel, ",") {
					k, v, _ := strings.Cut(kv, "=")
					// ray.io/node-type is KubeRay's own pod label.
					if head.Labels[k] != v && k != "ray.io/node-type" {
						t.Errorf("%q: label %s=%s is not on the Ray pods", c, k, v)
					}
				}
			}
			for _, sv := range []*corev1.Service{svc, singleSvc} {
				if i := slices.Index(fields, "port-forward"); i > 0 && slices.Contains(fields, "svc/"+sv.Name) {
					port := strconv.Itoa(int(sv.Spec.Ports[0].Port))
					if !strings.HasSuffix(c, ":"+port+" &") && !strings.HasSuffix(c, ":"+port) {
						t.Errorf("%q: the Service listens on %s", c, port)
					}
				}
			}
		case "gcp-t4":
			if fields[1] != "plan" || len(fields) < 3 || fields[2] != "serve" {
				continue
			}
			planned = true
			ek := llm.EngineKwargs
			for flag, want := range map[string]string{
				// The bucket's copy of this checkpoint (TestServeConfig).
				"--model":                  modelSourceID,
				"--tp":                     strconv.Itoa(ek.TensorParallelSize),
				"--max-model-len":          strconv.Itoa(ek.MaxModelLen),
				"--gpu-memory-utilization": strconv.FormatFloat(ek.GPUMemoryUtilization, 'f', -1, 64),
				"--dtype":                  ek.Dtype,
				"--max-num-seqs":           strconv.Itoa(ek.MaxNumSeqs),
				"--max-num-batched-tokens": strconv.Itoa(ek.MaxNumBatchedTokens),
				"--gpu":                    "t4",
			} {
				if got := flagValue(fields, flag); got != want {
					t.Errorf("%q: %s %q, the example has %q", c, flag, got, want)
				}
			}
			if slices.Contains(fields, "--enforce-eager") != ek.EnforceEager {
				t.Errorf("%q: --enforce-eager must match enforce_eager: %v", c, ek.EnforceEager)
			}
		case "curl":
			if strings.Contains(c, `"model"`) && !strings.Contains(c, `"model": "`+llm.ModelLoadingConfig.ModelID+`"`) {
				t.Errorf("%q: the served model id is %s", c, llm.ModelLoadingConfig.ModelID)
			}
		}
	}
	for _, dir := range []string{"install/examples/mistral-tp2", "install/examples/mistral-tp2/nccl-check", "install/examples/mistral-tp2/single-podvm"} {
		if !applied[dir] {
			t.Errorf("the runbook never applies or deletes -k %s", dir)
		}
	}
	if !planned {
		t.Error("the runbook does not show the gcp-t4 plan serve command behind the settings")
	}
	if downloaded == "" || packed != downloaded {
		t.Errorf("cache model packs %q, hf download wrote %q: want the download made into the model image", packed, downloaded)
	}
	if pinned == "" {
		t.Errorf("no kustomize edit set image pins %s, the pods' model image", modelImage)
	}
}

// The prose states the model, its size and the image the manifests use.
func TestRunbookStatesModelAndImage(t *testing.T) {
	b, err := os.ReadFile(runbook)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{modelSourceID, "24.5 GB", image, "KubeRay | v1.6.2", "no NVIDIA Confidential Computing", "H100"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the runbook does not say %q", want)
		}
	}
}

// Every serving setting the example makes is explained in the runbook with
// the value the manifests carry, so neither changes without the other.
func TestRunbookReflectsEverySetting(t *testing.T) {
	b, err := os.ReadFile(runbook)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	rs := only[*rayv1.RayService](t, example(t))
	llm := theLLM(t, rs)
	ek := llm.EngineKwargs
	pods := rayPods(t, rs)
	env := envMap(t, "head", pods[0].tpl.Spec.Containers[0])
	want := []string{
		// Only the Hugging Face shards go into the model image.
		"consolidated.safetensors", "--exclude consolidated.safetensors",
		// Where the images and the emptyDirs live, and the check.
		"/run/kata-containers/image/", "rootfs/local/", "df -h / " + modelPath + "/ /dev/shm",
		// The model image: made once, its sidecar, its link, its user,
		// what each rank reads, and its registry through Private Google Access.
		"gcp-t4 cache model", "model_source: " + modelPath, "`shareProcessNamespace: true`", "uid 1000 and gid 100",
		"`/modelcar -check`", "`HF_HUB_OFFLINE=1`", "`sharded_state`", "Private Google Access",
		// Ray's object store, Serve's admission limit, the metrics port and scrape config.
		`object-store-memory: "` + pods[0].rayStartParams["object-store-memory"] + `"`,
		"max_ongoing_requests: " + strconv.Itoa(*llm.DeploymentConfig.MaxOngoingRequests),
		"max_num_seqs: " + strconv.Itoa(ek.MaxNumSeqs), "log_engine_metrics: true", "port 8080",
		"install/examples/mistral-tp2/monitoring",
		// Probes tolerant of the peer-pod exec path.
		"`httpGet`", "exec probes", "2 s timeout",
		// NCCL sockets on a non-gVNIC interface.
		"NCCL_SOCKET_NTHREADS=" + env["NCCL_SOCKET_NTHREADS"], "NCCL_NSOCKS_PERTHREAD=" + env["NCCL_NSOCKS_PERTHREAD"],
		// The attention backend, how to switch, what to compare.
		"VLLM_ATTENTION_BACKEND=" + env["VLLM_ATTENTION_BACKEND"], "VLLM_ATTENTION_BACKEND=TRITON_ATTN",
		"time to first token and time per output token", "temperature: 0",
		// The NCCL check.
		"--rdzv-conf=timeout=3600", "200 all-reduces of 10 KiB", "NCCL-CHECK PASS", "NCCL-CHECK FAIL",
		"FlexAttention forward compiled by `torch.compile`", "--nccl-latency",
		// The calculator's headroom, graphs and decode estimate.
		"(1 − 0.95) × 14.75 GiB = 0.74 GiB", "captured *after* the KV cache is sized", "Decode estimate",
		"cos_sin_cache", "min(max_num_seqs × 2, 512)", "Prefill and time to first token", "--path host",
		// The first request, the worker's readiness, /dev/shm as kata mounts it.
		"RAY_CGRAPH_get_timeout=" + env["RAY_CGRAPH_get_timeout"], "setdefault", "local_raylet_healthz",
		"ray.io/node-type: head", "half the podVM's", "handleEphemeralStorage",
		// The NCCL check's versions and MTU steps.
		"cuda_compat=minor-version", "step=versions", "step=mtu", "don't fragment",
		// The one-podVM layout.
		"install/examples/mistral-tp2/single-podvm", "`t4-2`", "via P2P/", "via SHM/",
		// The weights from the model image, never Hugging Face per podVM.
		"no pod asks Hugging Face or Cloud Storage for anything",
		// The image cache: the pin, the check's verdict, the initdata, a
		// restarted podVM, the fallback, and the figures with the cache and the gap to the goal.
		"<!-- cache-path -->", "install/examples/mistral-tp2/image", "5 containers, 5 from the cache, 0 of a cached repository not served from it",
		"`gcp-t4 cache initdata -annotation", "io.katacontainers.config.hypervisor.cc_init_data", "`offline_fs_kbc`",
		"**A restarted podVM.**", "new disk made from the same image in its own zone", "**The fallback.**", "answers by digest only",
		"**The 3-minute goal is not met, and why.**", "<!-- startup-cache -->", "`CAA-GCP-T4-CACHE`", "`CAA-GCP-T4-INITDATA`",
	}
	// Compared with the prose's line breaks taken as spaces.
	flat := strings.Join(strings.Fields(doc), " ")
	for _, w := range want {
		if !strings.Contains(doc, w) && !strings.Contains(flat, w) {
			t.Errorf("the runbook does not say %q", w)
		}
	}
}
