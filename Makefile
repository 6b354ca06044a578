# Coffer: make help lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Workspace modules, leaf first.
MODULES := apis driverkit e2e/harness kubectl-coffer metricskit velerokit core-controller driver-velero driver-job verifier e2e tools
COMPONENTS := core-controller driver-velero driver-job verifier

BIN := $(CURDIR)/bin
CONTROLLER_GEN := $(BIN)/controller-gen
GO_TEST_FLAGS ?= -race -count=1 -timeout 20m
# The binaries of the local cluster live outside the checkout (hack/testbin.sh), so fresh clones reuse them.
TESTBIN = $(shell hack/testbin.sh)
VELEROBIN = $(shell hack/testbin.sh --velero)
PROMBIN = $(shell hack/testbin.sh --prometheus)
CSIBIN = $(shell hack/testbin.sh --csi)

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(CONTROLLER_GEN): tools/go.mod tools/go.sum
	cd tools && GOWORK=off go build -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code in apis.
	cd apis && GOWORK=off $(CONTROLLER_GEN) object paths=./...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC into deploy/<component>/.
	@for c in $(COMPONENTS); do \
		case $$c in core-controller) g=backups;; driver-velero) g=velerodriver;; driver-job) g=jobdriver;; verifier) g=security;; esac; \
		rm -f deploy/$$c/crd/*_*.yaml; \
		(cd apis && GOWORK=off $(CONTROLLER_GEN) crd paths=./$$g/... output:crd:dir=../deploy/$$c/crd); \
		$(CONTROLLER_GEN) rbac:roleName=coffer-$$c paths=./$$c/... output:rbac:dir=deploy/$$c/rbac; \
	done
	@# ugallu's SecurityEvent CRD is an install of its own: a cluster that runs ugallu keeps ugallu's.
	mv deploy/verifier/crd/security.ugallu.io_securityevents.yaml deploy/verifier/securityevents/

.PHONY: tidy
tidy: ## go mod tidy in every module (workspace modules, testbin wrappers, the third-party toy driver).
	@for m in $(MODULES) tools/testbin/kubernetes tools/testbin/etcd e2e/thirdparty/testdata/toydriver; do (cd $$m && GOWORK=off GOFLAGS=-mod=mod go mod tidy); done

.PHONY: verify
verify: generate manifests tidy ## Regenerate, tidy and fail on any diff; gofmt and vet every module.
	@test -z "$$(gofmt -l $(MODULES))" || { echo "gofmt needed:"; gofmt -l $(MODULES); exit 1; }
	@git diff --exit-code -- . || { echo "generated files or go.mod/go.sum are stale: run make generate manifests tidy"; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- apis deploy '*go.mod' '*go.sum')" || { git status --porcelain -- apis deploy; echo "untracked generated files"; exit 1; }
	@bins=$$(git ls-files -z | xargs -0 -r sh -c 'for f; do [ -f "$$f" ] && [ "$$(head -c 4 "$$f" | od -An -c | tr -d " ")" = "177ELF" ] && echo "$$f"; done; true' sh); test -z "$$bins" || { echo "build output tracked in git: $$bins"; exit 1; }
	@allowed=$$(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$$//' hack/large-files.txt); git ls-files -z | { big=(); while IFS= read -r -d '' f; do if [ -f "$$f" ] && [ ! -L "$$f" ] && [ "$$(wc -c < "$$f")" -gt 1048576 ] && ! grep -qxF -- "$$f" <<< "$$allowed"; then big+=("$$f"); fi; done; test $${#big[@]} -eq 0 || { printf 'tracked file larger than 1 MiB (not in hack/large-files.txt): %s\n' "$${big[@]}"; exit 1; }; }

.PHONY: build
build: ## Build every binary into bin/ (and check every module builds and vets alone).
	@for m in $(MODULES); do (cd $$m && GOWORK=off go build ./... && GOWORK=off go vet ./...); done
	@for c in $(COMPONENTS); do \
		if [ -d $$c/cmd ]; then (cd $$c && CGO_ENABLED=0 go build -trimpath -o $(BIN)/ ./cmd/...); fi; \
	done
	@cd kubectl-coffer && CGO_ENABLED=0 go build -trimpath -o $(BIN)/ ./cmd/kubectl-coffer

.PHONY: images
images: ## OCI image archives of every component and coffer-agent into bin/images (static binaries, user 65532, no shell; no Docker).
	cd e2e && go run ./cmd/images -out $(BIN)/images

.PHONY: testbin
testbin: ## Build the local cluster's binaries (and Velero, MinIO, promtool) from source into ~/.cache/coffer/testbin (skips what is there).
	hack/testbin.sh
	hack/testbin.sh --velero
	hack/testbin.sh --prometheus
	hack/testbin.sh --csi

.PHONY: test
test: build ## Unit, envtest and real-server suites of every module (builds testbin when missing).
	@export KUBEBUILDER_ASSETS="$(TESTBIN)" COFFER_VELERO_ASSETS="$(VELEROBIN)" COFFER_PROMETHEUS_ASSETS="$(PROMBIN)"; \
	failed=(); for m in $(MODULES); do echo "== $$m"; (cd $$m && go test $(GO_TEST_FLAGS) ./...) || failed+=("$$m"); done; \
	if [ $${#failed[@]} -gt 0 ]; then echo "FAILED modules: $${failed[*]}"; exit 1; fi

# The suites behind the e2e build tag (the other e2e packages run in `make test`); the real node's
# own tests (e2e/harness/node) run first, in their module.
E2E_SUITES := ./jobdriver/ ./volumes/ ./deployments/ ./ha/ ./swap/ ./badinput/ ./tenancy/ ./faults/ ./chaos/

.PHONY: e2e
e2e: build ## End-to-end suites on real processes and (as root) a real node: Job driver on kubelet + containerd, chaos, HA.
	hack/node-runtime.sh
	export KUBEBUILDER_ASSETS="$(TESTBIN)" COFFER_VELERO_ASSETS="$(VELEROBIN)" COFFER_PROMETHEUS_ASSETS="$(PROMBIN)" COFFER_CSI_ASSETS="$(CSIBIN)" COFFER_CHAOS_ITERATIONS="$(E2E_CHAOS_ITERATIONS)"; \
	(cd e2e/harness && go test -count=1 -tags e2e -timeout 30m ./node/) && \
	(cd e2e && go test -count=1 -p 1 -tags e2e -timeout 80m $(E2E_SUITES))

# make e2e (and so CI) runs the chaos suite with 10 kills, which keeps a cold CI run near an hour;
# make chaos runs it alone with its default of 20 (COFFER_CHAOS_SEED reproduces a schedule).
E2E_CHAOS_ITERATIONS ?= 10

.PHONY: chaos
chaos: build ## The chaos suite alone, with its full schedule of 20 kills.
	export KUBEBUILDER_ASSETS="$(TESTBIN)" COFFER_VELERO_ASSETS="$(VELEROBIN)"; cd e2e && go test -count=1 -tags e2e -timeout 40m ./chaos/

.PHONY: bench
bench: ## Benchmarks against peers on this machine (Plan fire lag vs the CronJob controller, coffer-agent vs restic and kopia, ...); takes minutes (builds the peers when missing).
	@export KUBEBUILDER_ASSETS="$(TESTBIN)" COFFER_VELERO_ASSETS="$(VELEROBIN)" COFFER_PEERS_BIN="$$(hack/testbin.sh --peers)" COFFER_CSI_ASSETS="$(CSIBIN)"; \
	for m in $(MODULES); do (cd $$m && go test -run '^$$' -bench . -benchtime=1x -timeout 60m ./...); done; \
	cd e2e && go test -tags e2e -run '^$$' -bench . -benchtime=1x -timeout 60m ./volumes/ # on the real node: as root, else skipped

.PHONY: demo
demo: ## Local cluster of real processes, the golden lifecycle narrated, a final table; Ctrl-C tears down (DEMO_FLAGS=--exit stops at the end).
	export KUBEBUILDER_ASSETS="$(TESTBIN)" COFFER_VELERO_ASSETS="$(VELEROBIN)"; cd e2e && go run ./cmd/demo $(DEMO_FLAGS)
