# leaseguard — see README.md.
SHELL := /usr/bin/env bash -o pipefail

# Control-plane binaries (kube-apiserver, etcd, kubectl) for tests and `make run`,
# built from source at the versions pinned in test/tools/go.mod and cached here.
K8S_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" {print $$2; exit}' test/tools/go.mod)
CONTROLPLANE_DIR ?= $(CURDIR)/bin/controlplane/$(K8S_VERSION)
# A prebuilt set (envtest's layout) can be used instead: KUBEBUILDER_ASSETS=/path make test
export KUBEBUILDER_ASSETS ?= $(CONTROLPLANE_DIR)

# The release version: VERSION holds it (SemVer, no v), the one place it is
# written; the binaries print v$(VERSION), the chart's version and
# appVersion are it (test/chart checks), and the image is tagged with it.
VERSION ?= v$(shell cat VERSION)
LDFLAGS := -s -w -X main.version=$(VERSION)
# Fuzzing budgets are counts of executions, not durations: Go 1.26's fuzz
# coordinator can fail a target with a bare "context deadline exceeded",
# no failing input, when a duration runs out while a worker is busy
# (golang/go#75804, fixed in Go 1.27; seen in this suite's CI under load).
# 30,000 runs take 10–25 s on an idle two-core machine.
FUZZTIME ?= 30000x
FUZZMINIMIZETIME ?= 1000x

.PHONY: all
all: build

##@ General

.PHONY: help
# help lists the targets a user runs, by group (##@): 25 at most. The
# stages and measurements behind them (marked "#:" instead of "##") run
# the same way; docs/operations.md names them where it uses them.
help: ## This list. `make help-all` adds the stages and measurements behind these.
	@awk 'BEGIN {FS = ":.*?## "} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z0-9_-]+:.*?## / {printf "  %-22s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: help-all
help-all: #: Every target, the stages and measurements too.
	@awk 'BEGIN {FS = ":.*?#[#:] "} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z0-9_-]+:.*?#[#:] / {printf "  %-28s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: ## Build bin/leaseguard: the production binary, as in the image (serve, check, manifests, version).
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/leaseguard ./cmd/leaseguard

.PHONY: build-plugin
build-plugin: #: Build bin/kubectl-leaseguard, the kubectl plugin (kubectl leaseguard top, check, vap, manifests): put it on PATH.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/kubectl-leaseguard ./cmd/kubectl-leaseguard

.PHONY: build-dev
build-dev: #: Build bin/leaseguard-dev: leaseguard with the `dev` command (local control plane).
	CGO_ENABLED=0 go build -tags dev -trimpath -ldflags "$(LDFLAGS)" -o bin/leaseguard-dev ./cmd/leaseguard

.PHONY: controlplane
controlplane: ## Build (once) kube-apiserver, etcd and kubectl into the cache.
	@if [ "$(KUBEBUILDER_ASSETS)" != "$(CONTROLPLANE_DIR)" ]; then \
		echo "controlplane: using KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS)"; \
	else \
		hack/controlplane.sh "$(CONTROLPLANE_DIR)"; \
	fi

# Where early renewals are coalesced in the generated configuration: policy
# (a MutatingAdmissionPolicy, Kubernetes 1.36+), webhook, or off.
COALESCE ?= policy

.PHONY: manifests
manifests: ## Generate config/webhook/manifests.yaml from the deployed policy, config/manager/policy.yaml, and the e2e overlays' patch from theirs.
	go run ./cmd/leaseguard manifests --config config/manager/policy.yaml --coalesce $(COALESCE) --output-file config/webhook/manifests.yaml
	go run ./cmd/leaseguard manifests --config config/e2e-policy/policy.yaml --coalesce $(COALESCE) --kustomize-patch --output-file config/e2e-policy/webhooks-patch.yaml

.PHONY: run
run: controlplane build-dev ## Run leaseguard on a local control plane (leaseguard dev).
	bin/leaseguard-dev dev --assets "$(KUBEBUILDER_ASSETS)"

.PHONY: fmt-check
fmt-check: #: Fail when gofmt would change a file.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Every Go module of the repository: the product, the measuring programs and
# the pinned tools (vetted, linted and tested alike).
MODULES := . test/perf test/multicluster test/cluster hack/image

# vet and lint read the packages' dependencies compiled under the race
# detector, as the tests build them (the same source: no file of the
# repository depends on the race build tag), so that a cold cache compiles
# each module's dependencies once, not once for the analysers and once for
# the tests.
.PHONY: vet
vet: #: go vet every module, also the dev-tagged command.
	@for m in $(MODULES); do (cd $$m && go vet -race ./...) || exit 1; done
	go vet -race -tags dev ./cmd/... ./internal/...

.PHONY: compile
compile: #: Compile every package the tests, vet and lint build, without running anything: every module under the race detector, the product also plain (its binaries, benchmarks). make test does this once before its tracks, which would otherwise compile the same packages side by side on a cold cache.
	@for m in $(MODULES); do (cd $$m && go list -race -export -deps -test ./... >/dev/null) || exit 1; done
	@go list -export -deps -test ./... >/dev/null
	@go list -export -deps -tags dev ./cmd/... >/dev/null
	@# Helm, which the checks and kind tracks both use.
	@$(MAKE) --no-print-directory $(HELM)
	@# The image's binary, as docker-build-offline and test/integration build it.
	@CGO_ENABLED=0 GOOS=linux go list -trimpath -export -deps ./cmd/leaseguard >/dev/null

GOLANGCI_LINT := bin/golangci-lint
$(GOLANGCI_LINT): hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && go build -o ../../$(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint (version pinned in hack/tools/go.mod, config .golangci.yml) on every module.
	@for m in $(MODULES); do echo "golangci-lint $$m"; (cd $$m && GOFLAGS="$$GOFLAGS -race" $(CURDIR)/$(GOLANGCI_LINT) run --allow-parallel-runners --config $(CURDIR)/.golangci.yml ./...) || exit 1; done

.PHONY: check-tracked-files
check-tracked-files: #: Fail when git tracks a binary or a file over 1 MiB.
	hack/check-tracked-files.sh

# `make test` never uses the caller's cluster: KUBECONFIG points at a server
# that does not exist while the suite runs (hack/unreachable-kubeconfig.yaml),
# so a test that reached for it would fail instead of writing to it. The e2e
# suite runs against another cluster only with E2E_KUBECONFIG.
TEST_ENV := KUBECONFIG=$(CURDIR)/hack/unreachable-kubeconfig.yaml E2E_KUBECONFIG=
# Packages run under the race detector: every package of the product and its
# tests starts goroutines somewhere (handlers, reloaders, electors).
# -timeout 30m: a package's tests measure no time, and on a cold cache a
# busy machine can take longer than go test's default 10 minutes to build
# what they start (test/integration builds the image's binary).
GOTEST := env $(TEST_ENV) go test -count=1 -race -timeout 30m

.PHONY: test
test: ## The whole suite with stage timings: the control plane, then three tracks side by side: api (integration, multicluster), checks (fmt, vet, lint, chart, alerts, unit, VAP parity, perf programs, image reproducibility, fuzz, e2e), kind (3 nodes: Helm, e2e, faults, cert-manager overlay). hack/test.sh.
	@GOTEST="$(GOTEST)" MAKE="$(MAKE)" hack/test.sh

# Packages whose tests run one goroutine: neither they nor a package of
# this module they run starts another (hack/race-free.sh fails when one
# does). The race detector has nothing to find there and makes their CEL
# compiles four times slower (webhook/render/manifests: 141 s with it, 32 s
# without, alone on two cores), so they run without it.
RACE_FREE := ./webhook/render/manifests ./webhook/render/vap ./internal/cli
UNIT_PACKAGES := ./api/... ./webhook/... ./certs/... ./config/... ./cmd/... ./internal/... ./test/controlplane/... ./test/certmanager/... ./test/testfixtures/... ./test/procstat/...
# The packages of webhook/ and internal/ that hold a benchmark (test-unit runs each once).
BENCH_PACKAGES = $(addprefix ./,$(sort $(dir $(shell grep -l '^func Benchmark' $$(find webhook internal -name '*_test.go')))))

.PHONY: test-unit
test-unit: ## Unit tests only: every package that needs no control plane (webhook/, internal/, api/, certs/, config/, cmd/ and the test harness's own), under the race detector but those that run one goroutine.
	hack/race-free.sh $(RACE_FREE)
	$(GOTEST) $$(go list $(UNIT_PACKAGES) | grep -vxF $(foreach p,$(RACE_FREE),-e $$(go list $(p))))
	env $(TEST_ENV) go test -count=1 -timeout 30m $(RACE_FREE)
	@# Every benchmark once: their fixtures assert what they measure, and rot unseen otherwise.
	@# Only the packages that hold one: asking every package links a test
	@# binary for each (25 s of this target's 2 minutes) to run nothing.
	env $(TEST_ENV) go test -count=1 -run='^$$' -bench=. -benchtime=1x $(BENCH_PACKAGES)

.PHONY: test-perf
test-perf: #: Tests of the measuring programs (test/perf).
	cd test/perf && $(GOTEST) ./...

.PHONY: fuzz
fuzz: ## Fuzz the decode-and-decide path for FUZZTIME executions, from the committed seed corpus.
	go test -run='^$$' -fuzz=FuzzDecodeAndDecide -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZETIME) ./webhook/serve/admission

BENCHSTAT := cd hack/tools && go tool benchstat

.PHONY: bench-apiserver
bench-apiserver: controlplane #: Admission's cost on a Lease renewal through the real API server, setups side by side (docs/performance.md).
	cd test/perf && go run ./benchapi --rounds $(BENCH_ROUNDS) --duration $(BENCH_DURATION)

BENCH_ROUNDS ?= 5
BENCH_DURATION ?= 10s

.PHONY: bench-cel
bench-cel: #: The CEL the generated configuration makes the API server evaluate per lease write (docs/performance.md).
	cd test/perf && go test -run '^$$' -bench . -benchmem -count 5 ./celbench

.PHONY: bench
bench: ## Benchmarks of the decision core and of the handler beside a no-op handler (docs/performance.md).
	@mkdir -p bin
	go test -run='^$$' -bench='Handler|Decide' -benchmem -count=10 ./webhook/serve/admission ./webhook/decision/policy | tee bin/bench.txt
	$(BENCHSTAT) -col /handler -filter '.name:Handler' $(CURDIR)/bin/bench.txt
	$(BENCHSTAT) -filter '.name:/Decide/' $(CURDIR)/bin/bench.txt

##@ ValidatingAdmissionPolicy mode (docs/vap.md)

.PHONY: vap
vap: ## Generate config/vap/vap.yaml: the sample policy as ValidatingAdmissionPolicies (kubectl leaseguard vap).
	go run ./cmd/kubectl-leaseguard vap --config config/samples/policy.yaml --coalesce=policy --output-file config/vap/vap.yaml

.PHONY: test-vap
test-vap: controlplane ## Verdict parity through three real API servers: leaseguard as shipped, the webhook alone (--coalesce webhook), the generated policies.
	$(GOTEST) -v ./test/vap/...

##@ Deployment

# The chart's default image (its appVersion) is this tag too.
IMG ?= leaseguard:$(VERSION)
# kubectl for deploy/undeploy: the one on PATH, else the pinned build.
KUBECTL ?= $(shell command -v kubectl 2>/dev/null || echo $(CONTROLPLANE_DIR)/kubectl)
# The kustomization `make deploy` installs; config/e2e for the cert-manager overlay of the kind stage.
OVERLAY ?= config/default

.PHONY: build-installer
build-installer: ## Render $(OVERLAY) with image $(IMG) into dist/install.yaml.
	@mkdir -p dist
	$(KUBECTL) kustomize $(OVERLAY) | sed 's|image: leaseguard:latest|image: $(IMG)|' > dist/install.yaml
	@echo "wrote dist/install.yaml"

.PHONY: docker-build
docker-build: ## Build the image $(IMG) (needs a Docker engine; pulls the Go base image).
	docker build --build-arg VERSION=$(VERSION) -t $(IMG) .

# The same image without a base image to pull: the static binary is built
# here (as the Dockerfile builds it) and copied FROM scratch.
IMAGE_CONTEXT := bin/image
.PHONY: docker-build-offline
docker-build-offline: #: Build the image $(IMG) from a binary built here, FROM scratch (Dockerfile.scratch; needs a Docker engine, no registry).
	@rm -rf $(IMAGE_CONTEXT) && mkdir -p $(IMAGE_CONTEXT)
	CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags "-s -w -buildid= -X main.version=$(VERSION)" \
		-o $(IMAGE_CONTEXT)/leaseguard ./cmd/leaseguard
	cp Dockerfile.scratch $(IMAGE_CONTEXT)/Dockerfile
	docker build -t $(IMG) $(IMAGE_CONTEXT)

# The same image without a Docker engine, for linux/amd64 and linux/arm64:
# the binaries cross-compiled here (as docker-build-offline builds its one),
# each put FROM scratch and into an OCI image index by hack/image (its own
# module, go-containerregistry). Reproducible: every time in the image is
# SOURCE_DATE_EPOCH (the HEAD commit's time unless set), so the same commit
# gives the same digests (hack/image/reproducible_test.go).
IMAGE_PLATFORMS := linux/amd64 linux/arm64
IMAGE_LDFLAGS := -s -w -buildid= -X main.version=$(VERSION)
IMAGE_BIN_DIR := bin/image-platforms
IMAGE_OUT := dist/image
IMAGE_SOURCE ?= https://github.com/leaseguard/leaseguard
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# image-tar's tag and platform (the host's): what the kind stage loads.
IMAGE_TAR_TAG ?= leaseguard:e2e
IMAGE_TAR_PLATFORM ?= linux/$(shell go env GOARCH)
IMAGE_BUILDER := bin/image-builder
IMAGE_ARGS = -version $(VERSION) -revision "$(REVISION)" -source $(IMAGE_SOURCE) -source-date-epoch "$(SOURCE_DATE_EPOCH)"

$(IMAGE_BUILDER): hack/image/go.mod hack/image/go.sum $(filter-out %_test.go,$(wildcard hack/image/*.go))
	cd hack/image && go build -o ../../$(IMAGE_BUILDER) .

# $(call image-go-build,<os>/<arch>): cmd/leaseguard for that platform, into
# $(IMAGE_BIN_DIR)/<os>-<arch>/leaseguard (always rebuilt; go build's cache
# makes that cheap).
image-go-build = CGO_ENABLED=0 GOOS=$(word 1,$(subst /, ,$(1))) GOARCH=$(word 2,$(subst /, ,$(1))) go build -trimpath -buildvcs=false \
	-ldflags "$(IMAGE_LDFLAGS)" -o $(IMAGE_BIN_DIR)/$(subst /,-,$(1))/leaseguard ./cmd/leaseguard
image-binary-%:
	$(call image-go-build,$(subst -,/,$*))

.PHONY: image
image: $(IMAGE_BUILDER) $(addprefix image-binary-,$(subst /,-,$(IMAGE_PLATFORMS))) ## Build the image for linux/amd64 and linux/arm64 without Docker (hack/image): OCI layout dist/image/oci and dist/image/leaseguard-$(VERSION).oci.tar; prints the digests.
	@mkdir -p $(IMAGE_OUT)
	$(IMAGE_BUILDER) $(IMAGE_ARGS) $(foreach p,$(IMAGE_PLATFORMS),-binary $(p)=$(IMAGE_BIN_DIR)/$(subst /,-,$(p))/leaseguard) \
		-oci-layout $(IMAGE_OUT)/oci -oci-archive $(IMAGE_OUT)/leaseguard-$(VERSION).oci.tar

.PHONY: image-tar
image-tar: $(IMAGE_BUILDER) #: The host platform's image as a `docker load` tarball dist/image/leaseguard-docker.tar, tagged $(IMAGE_TAR_TAG) (no Docker needed to build it).
	$(call image-go-build,$(IMAGE_TAR_PLATFORM))
	@mkdir -p $(IMAGE_OUT)
	$(IMAGE_BUILDER) $(IMAGE_ARGS) -binary $(IMAGE_TAR_PLATFORM)=$(IMAGE_BIN_DIR)/$(subst /,-,$(IMAGE_TAR_PLATFORM))/leaseguard \
		-docker-tar $(IMAGE_OUT)/leaseguard-docker.tar -tag $(IMAGE_TAR_TAG) -platform $(IMAGE_TAR_PLATFORM)

.PHONY: test-image
test-image: #: Tests of hack/image: two builds give the same digests, a changed input another, the image's contents (builds cmd/leaseguard twice for the host; for both platforms with IMAGE_TEST_CROSS=1).
	cd hack/image && $(GOTEST) ./...

.PHONY: deploy
deploy: build-installer ## Install leaseguard into the cluster of the current kubeconfig (needs cert-manager).
	$(KUBECTL) apply --server-side -f dist/install.yaml
	$(KUBECTL) -n leaseguard-system rollout status deployment/leaseguard --timeout=3m

# undeploy deletes what $(OVERLAY) installs except any CustomResourceDefinition:
# deleting a CRD deletes every object of its kind (an overlay with
# config/components/multiclusterlease-crd, such as config/e2e, would take
# every MultiClusterLease of the cluster with it). The CRDs stay.
.PHONY: undeploy
undeploy: build-installer ## Remove leaseguard (webhook configurations first, so lease writes never wait on it); never a CRD, so every lease object stays.
	-$(KUBECTL) delete validatingwebhookconfiguration leaseguard-validating-webhook-configuration --ignore-not-found
	-$(KUBECTL) delete mutatingwebhookconfiguration leaseguard-mutating-webhook-configuration --ignore-not-found
	@awk '/^---$$/ { if (!crd) printf "%s---\n", doc; doc = ""; crd = 0; next } \
		/^kind: CustomResourceDefinition$$/ { crd = 1 } { doc = doc $$0 "\n" } \
		END { if (!crd) printf "%s", doc }' dist/install.yaml > dist/uninstall.yaml
	@if grep -q '^kind: CustomResourceDefinition$$' dist/install.yaml; then echo "undeploy: keeping the CustomResourceDefinitions of $(OVERLAY) (and every object of their kinds)"; fi
	$(KUBECTL) delete --ignore-not-found -f dist/uninstall.yaml

##@ End-to-end

.PHONY: test-e2e
test-e2e: controlplane ## The e2e suite on the local control plane (or on the cluster of $$E2E_KUBECONFIG, only when set).
	go test -count=1 -v ./test/e2e/ -ginkgo.v

.PHONY: test-e2e-kind
test-e2e-kind: ## kind (1 control plane, 2 workers; offline node image unless KIND_NODE_IMAGE is set), Helm install, the e2e suite, namespace mode on the real lock, fault tests, a second 1-node cluster sharing the global lock, helm upgrade and uninstall, the cert-manager overlay, teardown (needs root or Docker; hack/kind).
	hack/kind/e2e.sh

.PHONY: test-e2e-kind-down
test-e2e-kind-down: #: Remove what a kind run left (the cluster, and the Docker engine hack/kind started with its host changes).
	hack/kind/e2e.sh down

.PHONY: kind-node-image
kind-node-image: #: Build the offline kind node image (hack/kind/node-image.sh) into the engine hack/kind/docker.sh starts or finds.
	hack/kind/docker.sh up && eval "$$(hack/kind/docker.sh env)" && hack/kind/node-image.sh

# leaseguard top (docs/top.md): measurements, listed by make help-all.

.PHONY: bench-top
bench-top: #: Benchmarks of leaseguard top's aggregation and informer path, and of the webhook's /debug/leases sketch.
	@mkdir -p bin
	go test -run='^$$' -bench='Observe|Report|InformerEvent' -benchmem -count=10 ./internal/top/leasetraffic ./internal/top/leasewatch ./webhook/serve/leasestats | tee bin/bench-top.txt
	$(BENCHSTAT) -col /sink -filter '.name:InformerEvent' $(CURDIR)/bin/bench-top.txt
	$(BENCHSTAT) -filter '-.name:InformerEvent' $(CURDIR)/bin/bench-top.txt

.PHONY: top-load-synthetic
top-load-synthetic: #: leaseguard top's client side at 10,000 leases every 2s from a synthetic source, beside a bare informer (about 7 minutes).
	cd test/perf && go run ./topload --mode=synthetic

TOP_LOAD_LEASES ?= 2000
.PHONY: top-load-apiserver
top-load-apiserver: controlplane #: The real `leaseguard top` binary against a real API server, TOP_LOAD_LEASES leases every 2s.
	cd test/perf && go run ./topload --mode=apiserver --leases=$(TOP_LOAD_LEASES) --writers=$$(( $(TOP_LOAD_LEASES) / 20 ))

##@ Multi-cluster

# test/multicluster is a module of its own (fake-gcs-server and the GCS client
# stay out of the product's go.mod): two local control planes with leaseguard,
# a MultiClusterLease controller per cluster with its global lock in an
# in-process GCS emulator, and namespace-mode managers (docs/multicluster.md).
MULTICLUSTER_ROUNDS ?= 3
MULTICLUSTER_WINDOW ?= 20s

.PHONY: test-multicluster
test-multicluster: controlplane ## Two clusters in namespace mode with Config Connector's multicluster election: without leaseguard, as shipped, --coalesce webhook (about 8 minutes once built).
	cd test/multicluster && $(GOTEST) -v -timeout 20m ./...

.PHONY: measure-multicluster
measure-multicluster: controlplane #: The multi-cluster suite without the race detector, its per-run summary table into bin/multicluster-writes.md (docs/multicluster.md).
	@mkdir -p bin
	cd test/multicluster && $(TEST_ENV) MULTICLUSTER_REPORT=$(CURDIR)/bin/multicluster-writes.md \
		go test -count=1 -timeout 20m -v -run TestMultiCluster . -ginkgo.v
	@cat bin/multicluster-writes.md

CURVE_MANAGERS ?= 3,10,30,100
CURVE_ROUNDS ?= 2
CURVE_WINDOW ?= 45s

.PHONY: measure-multicluster-curve
measure-multicluster-curve: controlplane #: Lease traffic against the number of managers per cluster, unguarded and as shipped, interleaved rounds: docs/multicluster-curve.md and .png (docs/multicluster.md).
	cd test/multicluster && $(TEST_ENV) CURVE_MANAGERS=$(CURVE_MANAGERS) CURVE_ROUNDS=$(CURVE_ROUNDS) CURVE_WINDOW=$(CURVE_WINDOW) \
		CURVE_REPORT=$(CURDIR)/docs/multicluster-curve.md CURVE_PLOT=$(CURDIR)/docs/multicluster-curve.png \
		go test -count=1 -timeout 4h -v -run TestMultiCluster . -ginkgo.label-filter=curve -ginkgo.v
	@cat docs/multicluster-curve.md

APF_MANAGERS ?= 100
APF_ROUNDS ?= 3
APF_WINDOW ?= 20s

.PHONY: measure-apf
measure-apf: controlplane ## API Priority and Fairness for lease traffic: a manager flooding lease writes beside renewing ones, the other clients' latency with the API server's default flow schemas and with config/components/flowcontrol, interleaved rounds (docs/operations.md).
	cd test/perf && go run ./apf -managers $(APF_MANAGERS) -rounds $(APF_ROUNDS) -window $(APF_WINDOW)

##@ Helm chart and alerts (docs/helm.md, docs/alerts.md)

# Helm and promtool are built from their Go modules at the versions pinned in
# hack/helm/go.mod and hack/promtool/go.mod, like golangci-lint.
HELM := bin/helm
HELM_VERSION := $(shell awk '$$1 == "helm.sh/helm/v4" {print $$2; exit}' hack/helm/go.mod)
$(HELM): hack/helm/go.mod hack/helm/go.sum
	cd hack/helm && go build -ldflags "-X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)" -o ../../$(HELM) helm.sh/helm/v4/cmd/helm

PROMTOOL := bin/promtool
PROMETHEUS_VERSION := $(shell awk '$$1 == "github.com/prometheus/prometheus" {print $$2; exit}' hack/promtool/go.mod)
$(PROMTOOL): hack/promtool/go.mod hack/promtool/go.sum
	cd hack/promtool && go build -ldflags "-X github.com/prometheus/common/version.Version=$(PROMETHEUS_VERSION)" \
		-o ../../$(PROMTOOL) github.com/prometheus/prometheus/cmd/promtool

# promrules: PrometheusRule -> rule file for promtool, and the metric names
# the rules select, by Prometheus's own PromQL parser (hack/promtool/promrules).
PROMRULES := bin/promrules
$(PROMRULES): hack/promtool/go.mod hack/promtool/go.sum $(wildcard hack/promtool/promrules/*.go)
	cd hack/promtool && go build -o ../../$(PROMRULES) ./promrules

# dashboard: leaseguard's Grafana dashboard, generated with the Grafana
# foundation SDK (hack/dashboard, a module of its own).
DASHBOARD := bin/dashboard
$(DASHBOARD): hack/dashboard/go.mod hack/dashboard/go.sum $(wildcard hack/dashboard/*.go)
	cd hack/dashboard && go build -o ../../$(DASHBOARD) .

.PHONY: dashboard
dashboard: $(DASHBOARD) ## Regenerate config/grafana/leaseguard.json (and the chart's copy) from hack/dashboard.
	$(DASHBOARD) > config/grafana/leaseguard.json
	cp config/grafana/leaseguard.json $(CHART)/files/dashboard.json

.PHONY: dashboard-png
dashboard-png: controlplane #: Render docs/dashboard.png: every panel's query over a real 3-minute run (test/perf/dashshot; Prometheus's engine, gonum/plot).
	cd test/perf && go run ./dashshot -o ../../docs/dashboard.png

.PHONY: helm promtool
helm: $(HELM) #: Build bin/helm (version pinned in hack/helm/go.mod).
promtool: $(PROMTOOL) $(PROMRULES) #: Build bin/promtool and bin/promrules (version pinned in hack/promtool/go.mod).

CHART := charts/leaseguard
# The namespace the chart's webhook configurations are rendered with; the
# chart replaces it by the release namespace (templates/_helpers.tpl).
CHART_NAMESPACE_PLACEHOLDER := zz-leaseguard-release-namespace

.PHONY: chart
chart: build ## Regenerate charts/leaseguard's generated files: `leaseguard manifests` of the default policy per coalescing mode, and the copies of the policy, alerts and dashboard (no CRD: the chart installs none).
	@for c in policy webhook off; do \
		echo "leaseguard manifests --coalesce $$c -> $(CHART)/files/webhooks-coalesce-$$c.yaml"; \
		bin/leaseguard manifests --config config/manager/policy.yaml --leaseguard-namespace $(CHART_NAMESPACE_PLACEHOLDER) \
			--coalesce $$c --output-file $(CHART)/files/webhooks-coalesce-$$c.yaml || exit 1; \
	done
	cp config/manager/policy.yaml $(CHART)/files/policy.yaml
	cp config/prometheus/alerts.yaml $(CHART)/files/alerts.yaml
	cp config/grafana/leaseguard.json $(CHART)/files/dashboard.json

# Every combination of the chart's modes that `make test-chart` renders.
CHART_MODES := certManager selfManaged
CHART_COALESCING := auto policy webhook off

.PHONY: test-chart
test-chart: $(HELM) controlplane ## helm lint and template in every mode, and test/chart: the chart against the generator and the kustomize install.
	$(HELM) lint --strict $(CHART)
	$(HELM) template leaseguard $(CHART) --namespace leaseguard-system --kube-version $(K8S_VERSION) >/dev/null
	@for m in $(CHART_MODES); do for c in $(CHART_COALESCING); do \
		echo "helm template --set certificates.mode=$$m,coalescing=$$c"; \
		$(HELM) template leaseguard $(CHART) --namespace leaseguard-system --kube-version $(K8S_VERSION) --api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy --set certificates.mode=$$m,coalescing=$$c \
			--set serviceMonitor.enabled=true,prometheusRule.enabled=true,networkPolicy.enabled=true,grafanaDashboard.enabled=true \
			--set-json 'networkPolicy.apiServer=[{"ipBlock":{"cidr":"192.0.2.10/32"}}]' >/dev/null || exit 1; \
	done; done
	$(TEST_ENV) HELM=$(CURDIR)/$(HELM) KUBECTL=$(KUBEBUILDER_ASSETS)/kubectl K8S_VERSION=$(K8S_VERSION) \
		go test -count=1 -run '^TestChart' ./test/chart/

ALERTS_DIR := bin/alerts

.PHONY: test-alerts
test-alerts: $(PROMTOOL) $(PROMRULES) $(DASHBOARD) ## promtool check and unit tests of config/prometheus/alerts.yaml, and test/chart: the alerts and the dashboard name only metrics that exist.
	@rm -rf $(ALERTS_DIR) && mkdir -p $(ALERTS_DIR)
	$(PROMRULES) extract config/prometheus/alerts.yaml $(ALERTS_DIR)/leaseguard.rules.yaml
	cp config/prometheus/tests/*.yaml $(ALERTS_DIR)/
	$(PROMTOOL) check rules $(ALERTS_DIR)/leaseguard.rules.yaml
	cd $(ALERTS_DIR) && $(CURDIR)/$(PROMTOOL) test rules $(notdir $(wildcard config/prometheus/tests/*.yaml))
	$(TEST_ENV) PROMRULES=$(CURDIR)/$(PROMRULES) DASHBOARD=$(CURDIR)/$(DASHBOARD) go test -count=1 -run '^(TestAlerts|TestDashboard)' ./test/chart/
