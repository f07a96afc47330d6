# caa-gcp-t4 entry points. `make demo` and `make test` are the whole set-up;
# `make help` lists every target. Each target builds what it needs first, so
# any one runs by itself on a fresh clone, and `make -j test` is safe: every
# cached tool is built by one target that the others depend on, and apt-get
# runs under one lock.
SHELL := /bin/bash
GO ?= go
# scripts/go-progress.sh runs the same go.
export GO
# The Go steps that compile for minutes on a fresh clone print what they
# compile, a count as they go, and a line after each silent minute.
PROGRESS := scripts/go-progress.sh
BIN := bin
# go.work's modules (install/ is the kustomize tree, a module so gcp-t4 can embed it).
MODULES := ./src/cloud-providers/... ./gcp-t4/... ./install/...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# Upstream CAA builds the provider with the Go its go.mod names; check that
# gcpt4 and the fork build and vet with it (fetched once via GOTOOLCHAIN).
UPSTREAM_GO ?= go1.25.13
# The upstream release the image and docs/upstream.md target, and the Go the
# image builds our go.work with; the Dockerfile's ARGs must match (tested).
UPSTREAM_RELEASE ?= v0.22.0
IMAGE_GO ?= go1.26.8

# containerd releases the `gcp-t4 remediate` tests run for real (CONTAINERD17,
# CONTAINERD2): set once, in versions.mk, which the Go tests read too.
include test/containerd/versions.mk
CONTAINERD_ENV := CONTAINERD17_VERSION=$(CONTAINERD17) CONTAINERD2_VERSIONS="$(CONTAINERD2)"

.PHONY: all help build test test-go test-short demo bench bench-pull bench-cache lint lint-setup fmt-check vet tidy-check staticcheck shellcheck generated-check unit upstream-go dropin-check imagestore-drift tools clean podvm podvm-binaries podvm-verify podvm-test containerd remediate-fuzz fuzz print-containerd-versions
.PHONY: delivery upstream-patch upstream-lint image
.PHONY: controlplane controlplane-test node-e2e kuberay helm-vet helm-check reaper-acceptance

# The test control plane (test/controlplane): kube-apiserver and etcd for the
# tests against a real API server, and the kustomize CLI (the engine
# `kubectl apply -k` embeds; its version matches gcp-t4's kustomize/api).
# Built from the module proxy, cached by version outside the repo.
KUBE_VERSION ?= v1.37.2
ETCD_VERSION ?= v3.6.7
KUSTOMIZE_VERSION ?= v5.8.2
TOOL_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/caa-gcp-t4
# apt-get from two targets at once (make -j) would fail on dpkg's lock.
APT_LOCK := mkdir -p $(TOOL_CACHE) && flock $(TOOL_CACHE)/.apt.lock
CONTROLPLANE_ENV := CONTROLPLANE_KUBE_APISERVER=$(TOOL_CACHE)/kube-apiserver-$(KUBE_VERSION)/kube-apiserver \
	CONTROLPLANE_ETCD=$(TOOL_CACHE)/etcd-$(ETCD_VERSION)/etcd KUSTOMIZE_BIN=$(TOOL_CACHE)/kustomize-$(KUSTOMIZE_VERSION)/kustomize

all: build

## help: this list (each target's `## ` comment)
help:
	@awk '/^## [a-zA-Z0-9_.-]+:/ { sub(/^## /, ""); n = index($$0, ":"); printf "  %-26s %s\n", substr($$0, 1, n - 1), substr($$0, n + 2); next } \
		/^## / { sub(/^## +/, ""); printf "  %-26s %s\n", "", $$0 }' $(firstword $(MAKEFILE_LIST))

## tools: check that Go 1.26 or newer is on PATH (the one prerequisite make does not install)
tools:
	@scripts/require-go.sh

## build: the binaries, one per place they run: gcp-t4 (operator CLI),
## gcp-t4-node (node sidecar), gpu-init (podVM), modelcar (a model image's
## process, which gcp-t4 cache model puts in the image); static, as they ship
build: tools
	@echo "build: $(BIN)/gcp-t4, $(BIN)/gcp-t4-node, $(BIN)/gpu-init and $(BIN)/modelcar, static, as they ship"
	cd gcp-t4 && CGO_ENABLED=0 ../$(PROGRESS) build "./cmd/gcp-t4 ./cmd/gcp-t4-node ./cmd/gpu-init" -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o ../$(BIN)/
	@# For the podVM whatever this machine is, and with no version in it: the
	@# model image's digest must depend on the model and this source only.
	cd gcp-t4 && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 ../$(PROGRESS) build ./cmd/modelcar -trimpath -ldflags "-s -w" -o ../$(BIN)/

## demo: the main job on the embedded GCE emulator, no cloud account; first run about 5 min, then about 3 s
##   (the first build compiles the binaries' ~900 dependencies once: docs/benchmarks.md)
demo: build
	$(BIN)/gcp-t4 demo

## test: everything CI runs, in two lanes at once: podvm-test (the podVM image built and booted
## under QEMU; its lines start "podvm-test |") beside test-go (fast checks first: formatting and
## vet, the unit tests, the harness and delivery checks, fuzzing, then the slow lint)
test: tools
	scripts/lanes.sh podvm-test "$(MAKE) --no-print-directory podvm-test" $(MAKE) --no-print-directory test-go

## test-go: make test's main lane, everything but podvm-test, fast checks first
test-go: tools fmt-check vet unit reaper-acceptance controlplane-test node-e2e delivery upstream-go kuberay helm-vet remediate-fuzz lint

## test-short: go test -short over go.work's modules, no real containerd, API server or CLI; first run about 8 min, then about 1 min
##   (the first run compiles the tests' ~1000 dependencies once: docs/benchmarks.md)
test-short: tools
	@echo "test-short: go test -short over go.work's modules, without real containerd, API server or CLI"
	$(PROGRESS) deps "$(MODULES)"
	$(PROGRESS) watch $(GO) test -short -count=1 $(MODULES)

## upstream-go: vet the fork module with the Go upstream CAA's go.mod names (UPSTREAM_GO)
upstream-go: tools
	@echo "upstream-go: go vet of the fork module with $(UPSTREAM_GO) (fetched once through GOTOOLCHAIN), which compiles every dependency again with that Go: minutes the first time"
	cd src/cloud-providers && GOWORK=off GOTOOLCHAIN=$(UPSTREAM_GO) $(GO) vet ./...

## unit: every Go test of go.work's modules, against real containerd, kube-apiserver + etcd and
## kustomize (built first, cached), except the reaper-acceptance scenarios
unit: tools containerd controlplane
	$(APT_LOCK) test/cache/deps.sh
	$(PROGRESS) deps "$(MODULES)"
	@# -timeout: go test's 10-minute default is per test binary, and the
	@# remediate package (every containerd release, started for real) took
	@# 284 s on an idle 2-core machine and ran past 600 s on a loaded one; a
	@# hang still ends the run, later.
	$(CONTROLPLANE_ENV) $(CONTAINERD_ENV) $(PROGRESS) watch $(GO) test -count=1 -timeout 30m -skip '$(REAPER_ACCEPTANCE)' $(MODULES)

## reaper-acceptance: the leak/no-wrong-delete scenarios (two clusters in one project, an adaptor
## SIGKILLed between insert and return, the same pod name in two namespaces, a completed Job pod,
## uninstall with live podVMs, the reaper racing sandbox churn), each printing live VMs deleted and
## orphans left
REAPER_ACCEPTANCE := TestReaperRacesSandboxes|TestScenario|TestUninstallGuard
reaper-acceptance: controlplane
	$(PROGRESS) deps "./gcp-t4/internal/gc ./gcp-t4/internal/uninstall"
	set -o pipefail; $(CONTROLPLANE_ENV) $(GO) test -count=1 -v -run '$(REAPER_ACCEPTANCE)' ./gcp-t4/internal/gc ./gcp-t4/internal/uninstall \
		| grep -E '^(--- |ok|FAIL|PASS)|^ +--- |scenario|reaper race'

## containerd: build containerd 1.7 and 2.x for the remediate tests (cached outside the repo)
containerd: tools
	$(APT_LOCK) test/containerd/deps.sh
	@echo "containerd: $(CONTAINERD17) $(CONTAINERD2), each built once from source for the remediate tests (2-3 min each on 2 cores) and cached by version outside the repository"
	i=0; for v in $(CONTAINERD17) $(CONTAINERD2); do i=$$((i + 1)); echo "containerd $$v ($$i of $(words $(CONTAINERD17) $(CONTAINERD2)))"; \
		test/containerd/build.sh $$v >/dev/null || exit 1; done

## controlplane: build (or reuse) kube-apiserver, etcd and kustomize for the API-server tests; prints the env to export
controlplane: tools
	@echo "controlplane: kube-apiserver $(KUBE_VERSION), etcd $(ETCD_VERSION) and kustomize $(KUSTOMIZE_VERSION) for the tests against a real API server, each built once from source and cached by version outside the repository"
	@echo "controlplane: kube-apiserver (1 of 3)"
	test/controlplane/build.sh kube-apiserver $(KUBE_VERSION) >/dev/null
	@echo "controlplane: etcd (2 of 3)"
	test/controlplane/build.sh etcd $(ETCD_VERSION) >/dev/null
	@echo "controlplane: kustomize (3 of 3)"
	test/controlplane/build.sh kustomize $(KUSTOMIZE_VERSION) >/dev/null
	@echo "export $(CONTROLPLANE_ENV)"

## node-e2e: a real kubelet and containerd as a node of the test API server; a pod run, its log read, removed (docs/node-harness.md)
##   make node-e2e [UPSTREAM=/path/to/cloud-api-adaptor KATA=/path/to/kata-containers: also builds kata's shim and CAA + our series from them and drives a GPU peer pod to Running through the real agent-protocol-forwarder and a stand-in agent in each emulated podVM]
# kubelet is built from the same k8s.io/kubernetes as kube-apiserver; the
# containerd is one of CONTAINERD2; CAA_PIN is the CAA release the series
# targets (UPSTREAM_RELEASE), whose versions.yaml names kata's commit.
CNI_PLUGINS_VERSION ?= v1.9.1
NODE_CONTAINERD_VERSION ?= v2.4.2
CAA_PIN ?= 38d0fcf7c7b787cc7fb9831410a910b37bb3be09
# The script checks UPSTREAM and KATA before it builds anything.
node-e2e: tools
	KUBE_VERSION=$(KUBE_VERSION) ETCD_VERSION=$(ETCD_VERSION) CNI_PLUGINS_VERSION=$(CNI_PLUGINS_VERSION) \
		NODE_CONTAINERD_VERSION=$(NODE_CONTAINERD_VERSION) NODE_CONTAINERD17_VERSION=$(CONTAINERD17) APT_LOCK_FILE=$(TOOL_CACHE)/.apt.lock \
		CAA_PIN=$(CAA_PIN) UPSTREAM="$(UPSTREAM)" KATA="$(KATA)" test/node/e2e.sh

## print-containerd-versions: the containerd releases the tests run (from test/containerd/versions.mk)
print-containerd-versions:
	@echo "CONTAINERD17=$(CONTAINERD17)"
	@echo "CONTAINERD2=$(CONTAINERD2)"

## controlplane-test: vet and test the control-plane harness module itself
controlplane-test: controlplane
	cd test/controlplane && GOWORK=off ../../$(PROGRESS) deps ./... && GOWORK=off $(GO) vet ./... && GOWORK=off $(CONTROLPLANE_ENV) $(GO) test -count=1 ./...

## kuberay: install/examples/mistral-tp2 decoded strictly into KubeRay's Go types, checked against
## KubeRay's validation and the runbook, and server-side applied to a real kube-apiserver (own module)
kuberay: controlplane
	cd test/kuberay && GOWORK=off ../../$(PROGRESS) deps ./... && GOWORK=off $(GO) vet ./... && GOWORK=off $(CONTROLPLANE_ENV) $(GO) test -count=1 ./...

## helm-vet: compile and vet the Helm checks (they need upstream trees to run: helm-check)
helm-vet: tools
	cd test/helm && GOWORK=off ../../$(PROGRESS) deps ./... && GOWORK=off $(GO) vet ./...

## helm-check: upstream's peerpods chart (CAA v0.22.0) with install/helm/gcp-t4.yaml installed by
## Helm's library on a real kube-apiserver, the image's entrypoint started with the ConfigMap it
## writes, and kata-deploy 4.0.0's chart adopting install/components/runtimeclass
##   make helm-check UPSTREAM=/path/to/cloud-api-adaptor KATA=/path/to/kata-containers   (trees at v0.22.0 and 4.0.0)
helm-check: controlplane
	cd test/helm && GOWORK=off ../../$(PROGRESS) deps ./... && GOWORK=off $(GO) vet ./... && GOWORK=off $(CONTROLPLANE_ENV) CAA_UPSTREAM="$(abspath $(UPSTREAM))" KATA_UPSTREAM="$(abspath $(KATA))" $(GO) test -count=1 -v ./...

# Fuzzing is bounded by executions, never by time: a duration -fuzztime
# races the fuzz coordinator's own deadline under CPU contention
# (golang/go#75804: "context deadline exceeded" and no failing input) and
# makes what is explored depend on the machine's load. Minimization is
# bounded by executions too. FUZZ_EXECS is about what 20 s explored on the
# project's 2-core machine (docs/benchmarks.md).
FUZZ_EXECS ?= 200000
FUZZ_MINIMIZE ?= 1000x
# make fuzz explores 50 times longer, by hand (not part of make test).
FUZZ_LONG_EXECS ?= 10000000

## remediate-fuzz: replay FuzzApply's seed corpus, then fuzz it for FUZZ_EXECS executions
remediate-fuzz: tools
	$(PROGRESS) deps ./gcp-t4/internal/tomledit/
	$(GO) test -count=1 -run '^FuzzApply$$' ./gcp-t4/internal/tomledit/
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime=$(FUZZ_EXECS)x -fuzzminimizetime=$(FUZZ_MINIMIZE) ./gcp-t4/internal/tomledit/

## fuzz: a longer exploration of the TOML edit (FUZZ_LONG_EXECS executions); a failing input lands in testdata/fuzz
fuzz: tools
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime=$(FUZZ_LONG_EXECS)x -fuzzminimizetime=$(FUZZ_MINIMIZE) ./gcp-t4/internal/tomledit/

# staticcheck from the module proxy at a pinned version (2026.2.2 supports
# Go 1.26), installed into the tool cache by version.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(TOOL_CACHE)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
# Modules with Go code of their own outside go.work (the others pin tools).
TEST_MODULES := test/controlplane test/kuberay test/node test/upstream

## lint: gofmt, go vet, every go.mod tidy, staticcheck, shellcheck, generated code current
lint: tools lint-setup fmt-check vet tidy-check staticcheck shellcheck generated-check

## lint-setup: shellcheck and protoc (apt-get), staticcheck and the protoc plugins (cached by version)
lint-setup: tools
	$(APT_LOCK) env STATICCHECK_VERSION=$(STATICCHECK_VERSION) scripts/lint/setup.sh

## tidy-check: every go.mod and go.sum is what go mod tidy writes
tidy-check: tools
	scripts/lint/tidy.sh

## staticcheck: staticcheck (STATICCHECK_VERSION) on go.work's modules and the test modules
staticcheck: lint-setup
	@echo "staticcheck: type-checks every dependency from source into its own cache (not Go's build cache): minutes on a fresh clone, then seconds"
	@echo "staticcheck: go.work's modules (1 of $(words x $(TEST_MODULES)))"
	$(STATICCHECK) $(MODULES)
	i=1; for d in $(TEST_MODULES); do i=$$((i + 1)); echo "staticcheck: $$d ($$i of $(words x $(TEST_MODULES)))"; \
		(cd $$d && GOWORK=off $(STATICCHECK) ./...) || exit 1; done

## shellcheck: every shell script
shellcheck: lint-setup
	scripts/lint/shellcheck.sh

## generated-check: gcp-t4/internal/hypervisor's Go code is what its .proto and the pinned generators give
generated-check: lint-setup
	scripts/lint/check-generated.sh

## fmt-check: gofmt -l is empty
fmt-check: tools
	@out=$$(gofmt -l src gcp-t4 install test 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## vet: go vet on go.work's modules
vet: tools
	$(PROGRESS) deps "$(MODULES)"
	$(GO) vet $(MODULES)

## podvm: build the production podVM image (cached by a hash of its inputs); refused
## at once without kata-agent, agent-protocol-forwarder, process-user-data and
## confidential-data-hub in podvm/binaries (make podvm-binaries); docs/podvm-build-guide.md
podvm: tools
	podvm/scripts/build.sh

## podvm-test-image: a TEST podVM image (any slot empty or a stand-in), marked as
## such in the image; gce-pack.sh refuses it
.PHONY: podvm-test-image
podvm-test-image: tools
	PODVM_IMAGE_KIND=test podvm/scripts/build.sh

## podvm-binaries: the guest binaries for the pin (podvm/guest-artefacts.pins) into
## podvm/binaries, verified: kata-agent and guest-components pulled, the forwarder
## and process-user-data built from upstream CAA's source (CAA_SRC=, KATA_SRC= name checkouts)
podvm-binaries: tools
	podvm/scripts/podvm-binaries.sh

## podvm-verify: build the podVM twice from scratch and compare (slow: not part of make test)
podvm-verify: tools
	podvm/scripts/verify.sh

## podvm-test: shellcheck + systemd-analyze verify, build (cached), boot under QEMU
podvm-test: tools
	$(APT_LOCK) test/cache/deps.sh
	test/podvm/run.sh

## bench: benchmarks recorded in docs/benchmarks.md
bench: tools containerd controlplane
	$(PROGRESS) deps "$(MODULES)"
	$(CONTROLPLANE_ENV) $(CONTAINERD_ENV) $(GO) test -run '^$$' -bench . -benchmem $(MODULES)

## bench-pull: as root, skopeo pulls a random-layer image from a real registry through tc-shaped
## links (rate, RTT) and tar unpacks it; JSON per case (not part of make test; docs/benchmarks.md)
##   make bench-pull [PULL_BENCH_MIB=128] [PULL_BENCH_CASES="name:mbit:rtt_ms ..."]
bench-pull:
	$(APT_LOCK) test/startup/pull-bench.sh

## bench-cache: as root, builds gcp-t4 and podvm-cache-mirror, and skopeo pulls one random-layer image by
## digest through the cache mirror (a `gcp-t4 cache build` layout) and from a real registry behind a
## Cloud-NAT-shaped link, then an uncached one through the mirror's fallback; MB/s and ratios
## (not part of make test; docs/benchmarks.md)
##   make bench-cache [PULL_BENCH_MIB=128] [PULL_BENCH_PULLS=3] [PULL_BENCH_NAT=mbit:rtt_ms]
bench-cache: tools
	$(APT_LOCK) test/startup/pull-bench.sh cache

## dropin-check: copy gcpt4 into an upstream CAA checkout and build and test it there
##   make dropin-check UPSTREAM=/path/to/cloud-api-adaptor [UPSTREAM_REF=v0.22.0]
dropin-check: tools
	test/dropin/check.sh "$(UPSTREAM)" $(UPSTREAM_REF)

## imagestore-drift: the pre-unpacked store's format (gcp-t4/internal/imagestore) against image-rs's
## own structures and path rules in a fetched guest-components, at the commit the store is for
##   make imagestore-drift GUEST_COMPONENTS=/path/to/guest-components
imagestore-drift: tools
	@test -n "$(GUEST_COMPONENTS)" || { echo "imagestore-drift: give GUEST_COMPONENTS=DIR, a guest-components git clone with its history (the commit in gcp-t4/internal/imagestore/format.go must be in it)" >&2; exit 2; }
	cd gcp-t4 && $(GO) test -count=1 -run 'TestImageRsAtThePin$$' -v ./internal/imagestore/drift/ -args -tree "$(abspath $(GUEST_COMPONENTS))"

## upstream-lint: golangci-lint as upstream's CI pins it (GOLANGCI_LINT_VERSION), with the
## tree's own .golangci.yaml and -tags gcp_t4, on gcpt4 copied into an upstream checkout
##   make upstream-lint UPSTREAM=/path/to/cloud-api-adaptor [UPSTREAM_REF=v0.22.0]
GOLANGCI_LINT_VERSION ?= v2.9.0
upstream-lint: tools
	GOLANGCI_LINT_VERSION=$(GOLANGCI_LINT_VERSION) test/dropin/lint.sh "$(UPSTREAM)" $(UPSTREAM_REF)

## delivery: the patch script on a synthetic upstream tree (incl. refusal), the
## provider API check, and the Dockerfile parsed with BuildKit's parser
delivery: tools
	cd test/upstream && GOWORK=off ../../$(PROGRESS) deps ./... && GOWORK=off $(GO) vet ./... && GOWORK=off $(GO) test -count=1 ./...

## upstream-patch: the gcp-t4 contribution series (git format-patch) for review
##   make upstream-patch UPSTREAM=/path/to/cloud-api-adaptor [UPSTREAM_REF=HEAD] [PATCH_OUT=bin/upstream-patches]
PATCH_OUT ?= $(BIN)/upstream-patches
upstream-patch: tools
	scripts/upstream-patch/patch.sh -r "$(or $(UPSTREAM_REF),HEAD)" -o "$(PATCH_OUT)" "$(UPSTREAM)"

## image: CAA at UPSTREAM_RELEASE with gcp-t4 plus the gcp-t4 binary (needs Docker with BuildKit)
IMAGE ?= caa-gcp-t4:$(VERSION)
image: tools
	scripts/upstream-patch/image.sh "$(IMAGE)" --build-arg UPSTREAM_RELEASE=$(UPSTREAM_RELEASE) \
		--build-arg UPSTREAM_GO_VERSION=$(UPSTREAM_GO:go%=%) --build-arg GO_VERSION=$(IMAGE_GO:go%=%) \
		--build-arg VERSION=$(VERSION) --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown)

## clean: remove bin/ (the tool cache outside the repo stays)
clean:
	rm -rf $(BIN)
