# Thin front door over CMake. `make test` and `make run` work on a fresh Debian 12 machine.
BUILD      ?= build
JOBS       ?= $(shell nproc)
CUDA_ARCHS ?= 89-real;90a-real;90-virtual
CMAKE_ARGS ?=
DEMO_MODEL := $(BUILD)/demo/tiny.gguf
PORT       ?= 8080

# Debian packages the build and the tests need (see README: Dependencies).
DEB_PACKAGES := build-essential cmake ninja-build pkg-config libboost1.81-dev nlohmann-json3-dev \
                libfmt-dev catch2 libpcre2-dev libicu-dev libcli11-dev libomp-dev libsystemd-dev curl python3 \
                libtomlplusplus-dev python3-prometheus-client python3-jsonschema python3-jinja2 python3-numpy systemd nodejs \
                libopenmpi-dev openmpi-bin \
                chromium

ifeq ($(CI),true)
  CMAKE_ARGS += -DTANDEM_WERROR=ON
endif

.PHONY: all help deps configure build test run clean perf-gate

all: build

help:
	@echo "Targets:"
	@echo "  make run        install dependencies, build, write the demo model, serve it on port PORT"
	@echo "  make test       install dependencies, build, run every test this machine can run (ctest)"
	@echo "  make build      configure and build into BUILD"
	@echo "  make perf-gate  benches against perf/floors.json (GPU floors on a GPU machine, else CPU ratios)"
	@echo "  make deps       install the Debian packages the build and tests need (only missing ones)"
	@echo "  make clean      remove BUILD"
	@echo "Variables (current value):"
	@echo "  BUILD=$(BUILD)  JOBS=$(JOBS)  PORT=$(PORT)"
	@echo "  CUDA_ARCHS=$(CUDA_ARCHS)"
	@echo "  CMAKE_ARGS=$(CMAKE_ARGS)  (e.g. -DTANDEM_CUDA=OFF, -DTANDEM_WERROR=ON, -DTANDEM_SANITIZE=address,undefined)"

deps:
	@scripts/install-deps.sh $(DEB_PACKAGES)

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DTANDEM_CUDA_ARCHS="$(CUDA_ARCHS)" $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

$(DEMO_MODEL): build
	@mkdir -p $(dir $(DEMO_MODEL))
	@test -f $(DEMO_MODEL) || $(BUILD)/tandem synth --preset tiny --out $(DEMO_MODEL) --seed 1

run: build $(DEMO_MODEL)
	@echo "tandem-server on http://127.0.0.1:$(PORT) (Ctrl-C stops it). Try:"
	@echo "  curl -s http://127.0.0.1:$(PORT)/v1/chat/completions -H 'Content-Type: application/json' -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello from Tandem\"}],\"max_tokens\":32}'"
	@$(BUILD)/tandem-server -m $(DEMO_MODEL) --port $(PORT) --ctx 4096 --batched-session 4

# CPU ratios (CI) or GPU floors (a GPU machine): scripts/perf-gate.sh, floors in perf/floors.json.
perf-gate: build
	@scripts/perf-gate.sh $(BUILD)

clean:
	rm -rf $(BUILD)
