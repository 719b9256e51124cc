# hami-go: `make demo` runs the main job on the local cluster; `make test` runs every test.
SHELL := /usr/bin/env bash
VERSION ?= 0.1.0
GO ?= go
# go-nvml's headers warn about deprecated declarations; cgo is needed by pkg/nvml and pkg/fake.
export CGO_CFLAGS ?= -Wno-deprecated-declarations
export CGO_ENABLED ?= 1
HAMI_GO_STATE ?= /var/lib/hami-go-cluster
export HAMI_GO_STATE
BINARIES := device-plugin scheduler-extender webhook dra-driver
# The kubectl plugin (`kubectl hami-go`): built into bin/ with the binaries, no image.
PLUGINS := kubectl-hami_go

.PHONY: all build build-kube-scheduler test test-unit bench-smoke bench-e2e-smoke test-e2e test-daytwo test-upgrade lint bench bench-schedperf demo images cluster-up cluster-down prometheus-up prometheus-down shell fuzz gpu-check autoscaler-trial clean

all: build

build-kube-scheduler: ## Build kube-scheduler v1.37.2 with hami-go's framework plugin HamiGo (cmd/kube-scheduler-hami-go, a module of its own) into bin/kube-scheduler-hami-go.
	@mkdir -p bin
	$(GO) build -C cmd/kube-scheduler-hami-go -o $(CURDIR)/bin/kube-scheduler-hami-go .

build: ## Build the three binaries and the kubectl plugin (bin/kubectl-hami_go) into bin/.
	@mkdir -p bin
	$(GO) build -o bin/ $(addprefix ./cmd/,$(BINARIES) $(PLUGINS))

test: lint test-unit bench-smoke test-e2e test-daytwo test-upgrade ## Everything CI runs: lint, unit tests (race), every Go benchmark once, end-to-end on the local cluster (with a short e2esched), then the day-two suite and the upgrade from the previous release.

# Go modules of their own beside the library's (their tools' dependencies stay out of go.mod):
# the chart tests (helm SDK), the image builder (go-containerregistry), the benchmark tools, and
# kube-scheduler built with hami-go's framework plugin (k8s.io/kubernetes; vet 5 s, test -race
# 7 s with a warm build cache, 2-3 min cold).
TOOL_MODULES := test/chart hack/images hack/bench cmd/kube-scheduler-hami-go

# The chart's alert rule tests (test/chart) and test/promstack's configuration check run promtool, which build-tools.sh builds into the
# tool cache (minutes the first time, cached after) and which they find through HAMI_GO_PROMTOOL.
test-unit: ## Unit, chart and image tests with the race detector (no cluster needed).
	set -eo pipefail; promtool=$$(hack/cluster/build-tools.sh promtool | tail -n1)/promtool; \
	HAMI_GO_PROMTOOL=$$promtool $(GO) test -race -count=1 ./...; \
	for m in $(TOOL_MODULES); do (cd $$m && HAMI_GO_PROMTOOL=$$promtool $(GO) test -race -count=1 -timeout 30m ./...); done

# bench-smoke (issue 38): every Go benchmark of the main module and of the tool modules once
# (-benchtime 1x, hack/bench/smoke.sh: only the packages that hold one), so that a benchmark whose
# build, fixture or assertions broke fails make test, not make bench (which no CI step ran, so a
# broken one went unnoticed). Once is a check, not a measurement: make bench measures.
# hack/schedperf (scheduler_perf: its own module, etcd, a long build) is left to make bench and
# make bench-schedperf. Prints each module's time.
bench-smoke: ## Every Go benchmark once (-benchtime 1x: builds, fixtures and assertions, no timing) in the main module and test/chart, hack/images, hack/bench; part of make test.
	GO=$(GO) HAMI_GO_BENCH_SMOKE_MODULES=". $(TOOL_MODULES)" hack/bench/smoke.sh

# bench-e2e-smoke (issue 38): a short hack/bench/e2esched on the running local cluster (20 simulated
# nodes, 20 pods per run and 10 per DRA run, one run of each variant, the plugin build's included:
# a minute or two), so that a broken end-to-end bench fails test-e2e, which runs it in device-plugin mode. The bench does not
# depend on what the cluster has installed: its pods live in namespace hami-go-bench, which
# values-local.yaml excludes from the webhook (webhook.excludeNamespaces), and where the chart runs
# its scheduler (device-plugin mode) the bench's extender writes as that scheduler's
# ServiceAccount, the one the allocation-records policy lets write hami-go.io/allocation-* (without
# the chart: as the kubeconfig's user). A cluster whose admission would rewrite or refuse its pods
# fails at once, saying why. Output in _output/bench-smoke/.
BENCH_E2E_SMOKE_ARGS ?= --nodes 20 --pods 20 --dra-pods 10 --runs 1 --plugins
bench-e2e-smoke: ## A short hack/bench/e2esched (20 nodes, 20 pods, 1 run) on the running local cluster; test-e2e runs it in device-plugin mode.
	set -eo pipefail; kubectl=$${HAMI_GO_CACHE:-$$HOME/.cache/hami-go}/tools/bin/kubectl; as=; \
	if "$$kubectl" --kubeconfig $(HAMI_GO_STATE)/kubeconfig -n hami-go-system get serviceaccount hami-go-scheduler >/dev/null 2>&1; then \
	  as=system:serviceaccount:hami-go-system:hami-go-scheduler; fi; \
	echo "== bench-e2e-smoke: extender as $${as:-the kubeconfig user}"; t0=$$SECONDS; \
	$(GO) run -C hack/bench ./e2esched --kubeconfig $(HAMI_GO_STATE)/kubeconfig --extender-as "$$as" $(BENCH_E2E_SMOKE_ARGS) \
	  --out $(CURDIR)/_output/bench-smoke/e2esched.json --work-dir $(CURDIR)/_output/bench-smoke/e2esched; \
	echo "== bench-e2e-smoke: $$((SECONDS - t0))s"

# E2E_MODES: the cluster modes test-e2e runs the suite in, one after the other (HAMI_GO_MODE
# set: only that one). In each mode the other mode's tests skip, saying so.
E2E_MODES ?= $(or $(HAMI_GO_MODE),deviceplugin dra)

test-e2e: ## For each of E2E_MODES: bring up the local cluster in it, run the demo and the end-to-end suite, tear it down (logs in _output/e2e-logs/<mode>).
	set -o pipefail; status=0; rm -rf _output/e2e-logs; mkdir -p _output/e2e-logs; \
	for mode in $(E2E_MODES); do \
	  echo "== e2e in mode $$mode"; t0=$$SECONDS; \
	  if HAMI_GO_MODE=$$mode hack/cluster/up.sh; then \
	    echo "== demo in mode $$mode (make demo's scenario; a broken demo fails the run)"; \
	    HAMI_GO_MODE=$$mode $(GO) run ./hack/demo 2>&1 | tee $(HAMI_GO_STATE)/logs/demo.log || status=1; \
	    HAMI_GO_MODE=$$mode $(GO) test -tags e2e -count=1 -timeout 40m -v ./test/e2e/... 2>&1 | tee $(HAMI_GO_STATE)/logs/e2e.log || status=1; \
	    if [[ $$mode == deviceplugin && "$(BENCH_E2E_SMOKE)" != 0 ]]; then \
	      echo "== short e2esched in mode $$mode (make bench-e2e-smoke; BENCH_E2E_SMOKE=0 skips it)"; \
	      $(MAKE) --no-print-directory bench-e2e-smoke 2>&1 | tee $(HAMI_GO_STATE)/logs/bench-e2e-smoke.log || status=1; \
	    fi; \
	  else status=1; fi; \
	  cp -r $(HAMI_GO_STATE)/logs _output/e2e-logs/$$mode || true; \
	  hack/cluster/down.sh || status=1; \
	  echo "== e2e in mode $$mode took $$((SECONDS - t0))s"; \
	done; exit $$status

# The day-two suite (issue 28: scheduler and webhook failover, uninstall; test/e2e/daytwo_*_e2e_test.go,
# build tag daytwo, so test-e2e never builds it): for each of E2E_MODES a fresh cluster, the
# TestDayTwo* tests, teardown (logs in _output/e2e-logs/daytwo-<mode>). Mode dra runs the uninstall
# test only (no hami-go scheduler there). Prints the time of each part.
test-daytwo: ## The day-two end-to-end suite (failover, uninstall) on the local cluster, apart from test-e2e.
	set -o pipefail; status=0; mkdir -p _output/e2e-logs; \
	for mode in $(E2E_MODES); do \
	  echo "== day-two e2e in mode $$mode"; t0=$$SECONDS; \
	  if HAMI_GO_MODE=$$mode hack/cluster/up.sh; then \
	    t1=$$SECONDS; echo "== day-two $$mode: cluster up in $$((t1 - t0))s"; \
	    HAMI_GO_MODE=$$mode $(GO) test -tags 'e2e daytwo' -count=1 -timeout 25m -v -run '^TestDayTwo' ./test/e2e/ 2>&1 | tee $(HAMI_GO_STATE)/logs/e2e-daytwo.log || status=1; \
	    echo "== day-two $$mode: tests in $$((SECONDS - t1))s"; \
	  else status=1; fi; \
	  rm -rf _output/e2e-logs/daytwo-$$mode; cp -r $(HAMI_GO_STATE)/logs _output/e2e-logs/daytwo-$$mode || true; \
	  hack/cluster/down.sh || status=1; \
	  echo "== day-two e2e in mode $$mode took $$((SECONDS - t0))s"; \
	done; exit $$status

# test-upgrade: the upgrade from the previous release (hack/cluster/previous-release.sh, which pins
# its commit) with pods running, apart from the main suite (build tag upgrade): the previous
# release's images are built once (cached by commit), then for each of E2E_MODES a new cluster
# without the chart (HAMI_GO_SKIP_CHART=1 up.sh builds and imports this checkout's images), the
# test (it installs the previous release, then helm-upgrades to this one), teardown. Each part's
# time is printed ("== test-upgrade: ..."); logs in _output/e2e-logs/upgrade-<mode>.
# The node is the one the previous release ran on: the fake backend without the simulated driver
# (HAMI_GO_GPU_NODE=none; the previous release predates it), so the test upgrades hami-go and
# does not also switch the node's backend, which no release upgrade does.
test-upgrade: ## The upgrade from the previous release with pods running, in each of E2E_MODES (tears the local cluster down, as test-e2e).
	set -o pipefail; status=0; mkdir -p _output/e2e-logs; t0=$$SECONDS; \
	hack/cluster/previous-release.sh build >/dev/null || exit 1; \
	echo "== test-upgrade: previous release's images ready in $$((SECONDS - t0))s"; \
	for mode in $(E2E_MODES); do \
	  t=$$SECONDS; echo "== test-upgrade in mode $$mode"; \
	  hack/cluster/down.sh || status=1; \
	  if HAMI_GO_GPU_NODE=none HAMI_GO_MODE=$$mode HAMI_GO_SKIP_CHART=1 hack/cluster/up.sh; then \
	    echo "== test-upgrade: cluster without the chart up in mode $$mode in $$((SECONDS - t))s"; t1=$$SECONDS; \
	    HAMI_GO_GPU_NODE=none HAMI_GO_MODE=$$mode $(GO) test -tags e2e,upgrade -count=1 -timeout 20m -v -run '^TestUpgrade' ./test/e2e/ 2>&1 | tee $(HAMI_GO_STATE)/logs/e2e-upgrade.log || status=1; \
	    echo "== test-upgrade: the test in mode $$mode took $$((SECONDS - t1))s"; \
	  else status=1; fi; \
	  rm -rf _output/e2e-logs/upgrade-$$mode; cp -r $(HAMI_GO_STATE)/logs _output/e2e-logs/upgrade-$$mode || true; \
	  hack/cluster/down.sh || status=1; \
	  echo "== test-upgrade: mode $$mode took $$((SECONDS - t))s in all"; \
	done; echo "== test-upgrade: $$((SECONDS - t0))s in all"; exit $$status

lint: ## gofmt, go vet of every module and of the e2e tests, once per tag set the targets build them with (e2e; e2e,daytwo; e2e,upgrade) (helm lint runs as a Go test of the chart).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	set -e; for tags in e2e e2e,daytwo e2e,upgrade; do $(GO) vet -tags $$tags ./test/e2e/; done
	set -e; for m in $(TOOL_MODULES); do (cd $$m && $(GO) vet ./...); done

fuzz: ## Run each fuzzer for a short while.
	$(GO) test -run - -fuzz FuzzParseMemoryMiB -fuzztime 30s ./pkg/device
	$(GO) test -run - -fuzz FuzzDecodeInventory -fuzztime 30s ./pkg/device
	$(GO) test -run - -fuzz FuzzDecodeAllocation -fuzztime 30s ./pkg/device
	$(GO) test -run - -fuzz FuzzParseConfigs -fuzztime 30s ./pkg/preflight

bench: ## Benchmarks and the performance report (docs/bench/report.md).
	hack/bench/run.sh

# SCHEDPERF_DIR: where a bench-schedperf run's data is kept: docs/bench/schedperf at the default
# scale (the report's main table), docs/bench/schedperf-<scale> at another (its "other scales").
SCHEDPERF_SCALE := $(or $(HAMI_GO_SCHEDPERF_SCALE),500Nodes)
SCHEDPERF_DIR := docs/bench/schedperf$(if $(filter 500Nodes,$(SCHEDPERF_SCALE)),,-$(SCHEDPERF_SCALE))

bench-schedperf: ## Only kube-scheduler's scheduler_perf (hack/schedperf; HAMI_GO_SCHEDPERF_SCALE=100Nodes|500Nodes|1000Nodes): report section 3, the rest rewritten from docs/bench.
	status=0; HAMI_GO_SCHEDPERF_SCALE=$(SCHEDPERF_SCALE) HAMI_GO_SCHEDPERF_OUT=$(CURDIR)/_output/bench/schedperf hack/schedperf/run.sh || status=$$?; \
	rm -rf $(SCHEDPERF_DIR); mkdir -p $(SCHEDPERF_DIR); \
	cp _output/bench/schedperf/*.json $(SCHEDPERF_DIR)/ || status=1; \
	$(GO) -C hack/bench run ./report --in $(CURDIR)/docs/bench --out $(CURDIR)/docs/bench || status=1; exit $$status

demo: ## Bring up the local cluster (a simulated GPU node: docs/simgpu.md) and run the KubeRay scenario end to end.
	@echo "make demo: the first run builds the Kubernetes tools and a whole cluster (20-40 minutes; progress lines follow), later runs take a minute or two"
	hack/cluster/up.sh
	$(GO) build -o bin/ ./cmd/kubectl-hami_go
	$(GO) run ./hack/demo

images: ## Build the images without Docker into _output/images/*.tar.
	cd hack/images && $(GO) run . --version $(VERSION) --out $(CURDIR)/_output/images --repo-root $(CURDIR)

gpu-check: ## Build and stage the real-GPU check in _output/gpu-check; prints the command to run on a GPU machine (hack/gpu-check/README.md).
	GO=$(GO) hack/gpu-check/build.sh _output/gpu-check

cluster-up: ## Start the local cluster (idempotent).
	hack/cluster/up.sh

cluster-down: ## Stop the local cluster and remove its state.
	hack/cluster/down.sh

prometheus-up: ## Start a Prometheus on 127.0.0.1:9090 scraping the local cluster as the chart's ServiceMonitors say, with its alert rules (hack/cluster/prometheus.sh).
	hack/cluster/prometheus.sh up

prometheus-down: ## Stop the local cluster's Prometheus (down.sh stops it too).
	hack/cluster/prometheus.sh down

autoscaler-trial: ## Cluster Autoscaler's and Karpenter's KWOK providers on a private control plane (loopback ports, own etcd): GPU node groups with hami-go.io/gpu-memory, decisions in /tmp/hami-go-autoscaler-trial/results.txt (hack/autoscaler; long build; not part of test).
	hack/autoscaler/build.sh
	hack/autoscaler/trial.sh

shell: ## A subshell on the local cluster: KUBECONFIG, kubectl v1.37.2 and bin/ first on PATH (exit to leave).
	@eval "$$(hack/cluster/env.sh)" && echo "make shell: KUBECONFIG=$$KUBECONFIG, kubectl $$(command -v kubectl); exit to leave" && exec bash -i

clean:
	rm -rf bin _output
