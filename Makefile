# kpreload: see README.md. `make demo` runs the main job on its built-in default;
# `make test` runs every test (unit, DKMS and QEMU end-to-end). Both install what
# they need through scripts/deps.sh first (idempotent). bin/kpreload is static:
# "kpreload image build" and the Packer plugin copy it into images.
SHELL := /bin/bash
GO ?= go
BIN := bin
KPRELOAD := $(BIN)/kpreload
INIT := $(BIN)/kpreload-init
# Every build of the project's code is static and path-free, as the binaries
# that go into images must be: make build, the plugin, go vet and go test all
# compile with CGO_ENABLED=0 and -trimpath, so each package (the standard library
# included) is compiled once for all of them instead of once per configuration.
STATIC := CGO_ENABLED=0
# Nor do they carry DWARF (the binaries are linked with -s -w, and no test reads
# it): -dwarf=false for every package, set in GOFLAGS so that the go commands the
# tests and scripts run share the compiled packages too. It is a tenth less CPU
# compiling cold. And every build names the pure-Go resolver and user lookup
# (-tags=netgo,osusergo), which a static build uses anyway: the one cgo test
# package ($(CGO_PKGS)) then compiles net, crypto/tls, net/http and all that
# import them exactly as the static builds did, and shares them from the cache
# instead of compiling a cgo variant of each (its pass takes about 9 CPU-s cold,
# against 26).
OUR_GOFLAGS := -gcflags=all=-dwarf=false -tags=netgo,osusergo
export GOFLAGS := $(strip $(filter-out $(OUR_GOFLAGS),$(GOFLAGS)) $(OUR_GOFLAGS))
# The commit goes into `kpreload --version`, the plugin's describe and image
# manifests (internal/version); the version itself is internal/version.Release.
COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo +dirty)
VERSION_LDFLAGS := -X github.com/kpreload/kpreload/internal/version.commit=$(COMMIT)
GOFLAGS_STATIC := $(STATIC) $(GO) build -trimpath -ldflags '-s -w $(VERSION_LDFLAGS)'
# The one exception: gpu/k8sconfig's tests read the files it writes back with
# mig-parted's own types, whose go-nvml dependency needs cgo. They are vetted and
# run with cgo after the rest (a cgo-less build of them fails, saying so).
CGO_PKGS := ./gpu/k8sconfig
NOCGO_PKGS = $(filter-out $(shell $(GO) list $(CGO_PKGS)),$(shell $(GO) list ./...))

.PHONY: all build plugin deb deps demo demo-initramfs test unit unit-in-place vet fmt bench bench-build bench-matrix bench-image clean fuzz

all: build

deps:
	@scripts/deps.sh

build:
	$(GOFLAGS_STATIC) -o $(KPRELOAD) ./cmd/kpreload
	$(GOFLAGS_STATIC) -o $(INIT) ./cmd/kpreload-init
	$(GOFLAGS_STATIC) -o $(BIN)/kpreload-rootinit ./cmd/kpreload-rootinit

# The Packer plugin: `packer plugins install --path bin/packer-plugin-kpreload
# github.com/kpreload/kpreload` installs it (docs/packer.md); it finds bin/kpreload
# and bin/kpreload-init next to itself, else under bin/ where Packer runs.
plugin: build
	$(GOFLAGS_STATIC) -o $(BIN)/packer-plugin-kpreload ./cmd/packer-plugin-kpreload

# kpreload's Debian package, out/kpreload_<version>-1_amd64.deb (cmd/mkdeb,
# packaging/deb; docs/package.md): the programs above, man pages and completion
# from the command tree, the recipes, the kernel hooks. Dated by the last commit
# (SOURCE_DATE_EPOCH), so the same tree gives the same package.
deb: plugin
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) $(STATIC) $(GO) run -trimpath ./cmd/mkdeb --bin $(BIN) --recipes recipes --out out

# The main job on its built-in default: packer build images/ci-testdriver.pkr.hcl
# with the real Packer, boot the image in QEMU, print the timeline and report.
demo: deps plugin
	@scripts/demo-image.sh

# The boot path alone: dkms build, cache, initramfs, root disk, direct kernel boot.
demo-initramfs: deps build
	@scripts/demo.sh

vet:
	$(STATIC) $(GO) vet -trimpath ./...
	CGO_ENABLED=1 $(GO) vet -trimpath $(CGO_PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }

# Every test, the real-DKMS and real-QEMU ones included, never from the test cache
# (-count=1: they depend on kernels, dkms and QEMU outside Go's view). -p 3 on two cores: the
# slow packages spend long stretches waiting on Debian's archive, debootstrap/mmdebstrap and dpkg
# (the other tools' images, root tarballs, kernels), when a third package's boots use the CPU.
# -timeout only catches a hang (60m: within CI's 90 minutes with deps and builds;
# builder/image takes about 12 on an idle host): each VM test's own deadlines follow the host's
# measured slowdown (testenv.Deadline), so a busy host needs the room.
# go test starts packages in the order named (each once): the long ones first, so
# that the many short ones fill the second core around them instead of one long one
# running alone at the end. builder/adopt (other tools' image builds, which wait on
# dpkg and the disk more than they use a CPU) and builder/image lead; builder/e2e
# (the NVIDIA dkms builds, CPU all the way) comes third so that its compilers fill
# what the image builds leave, where last it ran alone at the end of a cold run.
SLOW_FIRST := ./builder/adopt ./builder/image ./builder/e2e ./builder/packer-plugin-kpreload/e2e ./builder/follow/e2e ./initramfs/e2e ./packaging/e2e ./gpu/userdata/e2e
test: deps build vet
	@echo '$(STATIC) $(GO) test -trimpath -count=1 -vet=off -ldflags=-w -p 3 -timeout 60m $(SLOW_FIRST) ./... (but $(CGO_PKGS))'
	@$(STATIC) $(GO) test -trimpath -count=1 -vet=off -ldflags=-w -p 3 -timeout 60m $(SLOW_FIRST) $(NOCGO_PKGS)
	CGO_ENABLED=1 $(GO) test -trimpath -count=1 -vet=off -ldflags=-w $(CGO_PKGS)

# The unit tier, offline and quick with empty caches, which on two cores means
# less CPU: no vet here (`make vet` and `make test` run the whole of go vet, of
# which go test's own would be a subset), test binaries linked without DWARF or
# symbol table (-ldflags="-s -w": a tenth less link; stack traces come from the
# pclntab, which stays), four packages at once (many unit tests wait on timeouts,
# locks and child processes), the ones that wait longest first. It needs no `make build`:
# the tests that run a binary build it once for all the packages
# (testenv.GoBuildStatic). The cgo pass for $(CGO_PKGS) compiles only what cgo
# builds alone use (go-nvml, runtime/cgo: netgo in GOFLAGS above), so it runs
# beside the rest at the lowest priority, on whatever CPU that leaves idle, and
# its output follows theirs.
# The compiler and linker run without their garbage collector until a process
# holds 1 GiB (UNIT_ENV): a tenth less CPU, and no compile of ours comes near it.
# Its temporary files are in memory (scripts/scratch-in-memory.sh: a tmpfs in a
# mount namespace of its own, as root; as they are where /tmp is a tmpfs).
UNIT_ENV := GOGC=off GOMEMLIMIT=1GiB
UNIT_FIRST := ./builder/install ./kmodcache/remote ./builder/image ./builder/qemu ./cmd/kpreload/internal/cdicmd ./builder/archive ./builder/packer-plugin-kpreload/provisioner ./initramfs/pid1 ./cmd/kpreload/internal/clirun
UNIT_FLAGS := -trimpath -short -vet=off -p 4 -ldflags="-s -w"
unit:
	@scripts/scratch-in-memory.sh $(MAKE) --no-print-directory unit-in-place

# The unit tier with its temporary files where TMPDIR says (`make unit` puts them in memory).
unit-in-place:
	@echo '$(STATIC) $(GO) test $(UNIT_FLAGS) ./... (but $(CGO_PKGS)), and CGO_ENABLED=1 $(GO) test $(UNIT_FLAGS) $(CGO_PKGS)'
	@cgolog=$$(mktemp); trap 'rm -f "$$cgolog"' EXIT; \
	$(UNIT_ENV) CGO_ENABLED=1 nice -n 19 $(GO) test $(UNIT_FLAGS) $(CGO_PKGS) > "$$cgolog" 2>&1 & cgo=$$!; \
	$(UNIT_ENV) $(STATIC) $(GO) test $(UNIT_FLAGS) $(UNIT_FIRST) $(NOCGO_PKGS); rc=$$?; \
	wait $$cgo || rc=1; cat "$$cgolog"; exit $$rc

# Every fuzz target of the parsers fed from outside, FUZZTIME (default 30s) each,
# one after another; prints execs and crashers per target, fails on any crasher.
# (`make test` runs their seed corpora as ordinary tests.)
fuzz:
	@FUZZTIME=$(or $(FUZZTIME),30s) GO=$(GO) scripts/fuzz.sh

bench: deps build
	@scripts/bench-boot.sh

bench-build: deps build
	@scripts/bench-build.sh

bench-matrix: deps build
	@scripts/bench-build.sh --matrix

bench-image: deps plugin
	@scripts/bench-image.sh

clean:
	rm -rf $(BIN)
