# seqctl build, test and release targets. `make test` is the one test command (CI runs it).
GO       ?= go
PKGS     ?= ./...
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo none)
DATE     ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS  := -s -w -X github.com/seqctl/seqctl/internal/buildinfo.Version=$(VERSION) \
            -X github.com/seqctl/seqctl/internal/buildinfo.Commit=$(COMMIT) \
            -X github.com/seqctl/seqctl/internal/buildinfo.Date=$(DATE)

.PHONY: all build image test test-short lint bench fuzz ensure-redis release-check clean

all: lint test build

build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o bin/seqctl ./cmd/seqctl

# The full suite: unit tests, fuzz seed corpora, and the guarantee tests on real Redis
# (each test package starts its own redis-server), with the race detector; beside it, the
# deploy module's tests (chart, dashboard, alerts, image), offline (scripts/test.sh).
test: ensure-redis
	GO=$(GO) PKGS='$(PKGS)' bash scripts/test.sh

# Skips the slow multi-process fault tests.
test-short: ensure-redis
	$(GO) test -short -count=1 $(PKGS)
	cd deploy && $(GO) test -short -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	cd deploy && $(GO) vet ./...

bench: ensure-redis
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./pkg/engine/
	$(GO) test -run '^$$' -bench . -benchtime 20x ./pkg/outbox/
	$(GO) test -run '^$$' -bench . -benchtime 3s ./pkg/deliver/

fuzz:
	$(GO) test ./pkg/engine -run '^$$' -fuzz FuzzValidateKey -fuzztime 60s
	$(GO) test ./pkg/config -run '^$$' -fuzz FuzzParse -fuzztime 60s

ensure-redis:
	@bash scripts/ensure-redis.sh

# The container image, without a container runtime: static seqctl binaries for each of
# IMAGE_PLATFORMS, written by deploy/cmd/seqctl-image as an OCI image layout in
# dist/image (ref name: the version) with its SPDX SBOM in dist/image.spdx.json, then
# read back by the image test. Push it with `crane push dist/image REPO:TAG` or
# `skopeo copy oci:dist/image:TAG docker://REPO:TAG`.
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
CREATED  ?= $(shell git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
image:
	@set -e; bins=; for p in $(IMAGE_PLATFORMS); do \
	  out=dist/image-bin/$${p%/*}_$${p#*/}/seqctl; \
	  echo "building $$out"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$out ./cmd/seqctl; \
	  bins="$$bins --binary $$p=../$$out"; \
	done; \
	cd deploy && $(GO) run ./cmd/seqctl-image --out ../dist/image --sbom ../dist/image.spdx.json \
	  --version $(VERSION) --revision $(COMMIT) --created $(CREATED) $$bins
	cd deploy && $(GO) test -count=1 -run TestSnapshotImage -v ./image

# Validates goreleaser.yaml, builds a snapshot of the current platform into dist/, and
# builds the image as a snapshot (make image).
GORELEASER ?= $(GO) run github.com/goreleaser/goreleaser/v2@v2.15.1
release-check: export GOFLAGS = -buildvcs=auto
release-check:
	$(GORELEASER) check
	$(GORELEASER) build --snapshot --single-target --clean
	@ls dist/*/seqctl* && ./dist/*/seqctl version
	$(MAKE) image

clean:
	rm -rf bin dist
