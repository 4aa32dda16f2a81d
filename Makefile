# leaseguard — see README.md.
SHELL := /usr/bin/env bash -o pipefail

# Control-plane binaries (kube-apiserver, etcd, kubectl) for tests and `make run`,
# built from source at the versions pinned in test/tools/go.mod and cached here.
K8S_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" {print $$2; exit}' test/tools/go.mod)
CONTROLPLANE_DIR ?= $(CURDIR)/bin/controlplane/$(K8S_VERSION)
# A prebuilt set (envtest's layout) can be used instead: KUBEBUILDER_ASSETS=/path make test
export KUBEBUILDER_ASSETS ?= $(CONTROLPLANE_DIR)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
FUZZTIME ?= 20s

.PHONY: all
all: build

.PHONY: build
build: ## Build bin/leaseguard.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/leaseguard ./cmd/leaseguard

.PHONY: controlplane
controlplane: ## Build (once) kube-apiserver, etcd and kubectl into the cache.
	@if [ "$(KUBEBUILDER_ASSETS)" != "$(CONTROLPLANE_DIR)" ]; then \
		echo "controlplane: using KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS)"; \
	else \
		hack/controlplane.sh "$(CONTROLPLANE_DIR)"; \
	fi

.PHONY: run
run: controlplane build ## Run leaseguard on a local control plane (leaseguard dev).
	bin/leaseguard dev --assets "$(KUBEBUILDER_ASSETS)"

.PHONY: fmt-check
fmt-check: ## Fail when gofmt would change a file.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: test
test: controlplane fmt-check vet ## The whole suite: unit, integration against a real API server, fuzzing.
	go test -count=1 ./...
	$(MAKE) fuzz

.PHONY: test-unit
test-unit: ## Unit tests only (no control plane).
	go test -count=1 -short ./webhook/... ./certs/... ./config/... ./cmd/...

.PHONY: fuzz
fuzz: ## Fuzz the decode-and-decide path for FUZZTIME.
	go test -run='^$$' -fuzz=FuzzDecodeAndDecide -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s ./webhook/admission

BENCHSTAT ?= go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

.PHONY: bench
bench: ## Benchmarks of the decision core and of the handler beside a no-op handler (docs/performance.md).
	@mkdir -p bin
	go test -run='^$$' -bench='Handler|Decide' -benchmem -count=10 ./webhook/admission ./webhook/policy | tee bin/bench.txt
	$(BENCHSTAT) -col /handler -filter '.name:Handler' bin/bench.txt
	$(BENCHSTAT) -filter '.name:/Decide/' bin/bench.txt

.PHONY: help
help:
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "} {printf "%-14s %s\n", $$1, $$2}'
