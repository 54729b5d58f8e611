# kpreload: see README.md. `make demo` runs the main job on its built-in default;
# bin/kpreload is static: "kpreload image build" copies it into images.
# `make test` runs every test (unit, DKMS and QEMU end-to-end). Both install what
# they need through scripts/deps.sh first (idempotent).
SHELL := /bin/bash
GO ?= go
BIN := bin
KPRELOAD := $(BIN)/kpreload
INIT := $(BIN)/kpreload-init
GOFLAGS_STATIC := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w'

.PHONY: all build deps demo test unit vet fmt bench clean

all: build

deps:
	@scripts/deps.sh

build:
	$(GOFLAGS_STATIC) -o $(KPRELOAD) ./cmd/kpreload
	$(GOFLAGS_STATIC) -o $(INIT) ./initramfs/cmd/init
	$(GOFLAGS_STATIC) -o $(BIN)/kpreload-rootinit ./initramfs/rootinit

demo: deps build
	@scripts/demo.sh

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every test, the real-DKMS and real-QEMU ones included, never from the test cache
# (-count=1: they depend on kernels, dkms and QEMU outside Go's view). -p 2: two cores.
test: deps build vet
	$(GO) test -count=1 -p 2 -timeout 45m ./...

unit: build
	$(GO) test -short ./...

bench: deps build
	@scripts/bench-boot.sh

clean:
	rm -rf $(BIN)
