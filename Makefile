# caa-gcp-t4 entry points. `make demo` and `make test` are the whole set-up.
SHELL := /bin/bash
GO ?= go
BIN := bin
MODULES := ./src/cloud-providers/... ./gcp-t4/...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# Upstream CAA builds the provider with the Go its go.mod names; check that
# gcpt4 and the fork build and vet with it (fetched once via GOTOOLCHAIN).
UPSTREAM_GO ?= go1.25.13

.PHONY: all build test demo bench lint fmt-check vet unit upstream-go dropin-check tools clean

all: build

tools:
	@scripts/require-go.sh

build: tools
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/gcp-t4 ./gcp-t4

## demo: the main job on the embedded GCE emulator, no cloud account needed
demo: build
	$(BIN)/gcp-t4 demo

## test: everything CI runs
test: tools lint unit upstream-go

upstream-go:
	cd src/cloud-providers && GOWORK=off GOTOOLCHAIN=$(UPSTREAM_GO) $(GO) vet ./...

unit:
	$(GO) test -count=1 $(MODULES)

lint: fmt-check vet

fmt-check:
	@out=$$(gofmt -l src gcp-t4 test 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(MODULES)

## bench: benchmarks recorded in docs/benchmarks.md
bench: tools
	$(GO) test -run '^$$' -bench . -benchmem $(MODULES)

## dropin-check: copy gcpt4 into an upstream CAA checkout and build and test it there
##   make dropin-check UPSTREAM=/path/to/cloud-api-adaptor [UPSTREAM_REF=v0.22.0]
dropin-check: tools
	test/dropin/check.sh "$(UPSTREAM)" $(UPSTREAM_REF)

clean:
	rm -rf $(BIN)
