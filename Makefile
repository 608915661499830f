# Thin wrapper over CMake. BUILD selects the build folder (helpers may use their own).
#   make / make run    install what building and running need, build, (run one prompt)
#   make test          also install the test tools, then build and run every test
#   make soak-asan     the ASan/UBSan lpx under scripts/soak.py's mixed load for SOAK_S seconds
#   make install       install the built program, library, header, lpx.pc and lpx.1 to PREFIX
BUILD  ?= build
JOBS   ?= $(shell nproc)
PREFIX ?= /usr/local
CMAKE_FLAGS ?=
SOAK_S ?= 120

.PHONY: all build deps test-deps configure run test unit pytest asan soak-asan fuzz fuzz-smoke \
        bundle install clean format

all: deps
	@$(MAKE) --no-print-directory build

build: configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

test-deps:
	@scripts/install-deps.sh --test

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

run: all
	@scripts/fetch-model.sh
	$(BUILD)/lpx run -m "$$(scripts/fetch-model.sh --print-path)" --chat \
	    -p "Write a haiku about fast inference." -n 64

test: test-deps
	@$(MAKE) --no-print-directory build
	@scripts/fetch-model.sh
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	LPX_BUILD=$(BUILD) python3 -m pytest -q tests/py
	$(MAKE) fuzz-smoke

asan: test-deps
	$(MAKE) BUILD=build-asan CMAKE_FLAGS="-DLPX_ASAN=ON -DLPX_CUDA=OFF" build
	@scripts/fetch-model.sh
	cd build-asan && ctest --output-on-failure -j $(JOBS)
	LPX_BUILD=build-asan python3 -m pytest -q tests/py -m "not slow"

# The server of the ASan/UBSan build (its lpx alone) under the soak's mixed load: any
# sanitizer report, 5xx or /metrics counter that disagrees with the client fails it.
soak-asan: test-deps
	$(MAKE) BUILD=build-asan CMAKE_FLAGS="-DLPX_ASAN=ON -DLPX_CUDA=OFF" configure
	cmake --build build-asan -j $(JOBS) --target lpx_cli
	@scripts/fetch-model.sh
	python3 scripts/soak.py --lpx build-asan/lpx --duration $(SOAK_S) --clients 4

fuzz:
	@scripts/fuzz.sh build-fuzz 300

fuzz-smoke:
	@scripts/fuzz.sh build-fuzz 20

bundle: all
	@scripts/bundle-libs.sh $(BUILD) $(BUILD)/lpx-bundle.tar.gz

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build build-asan build-fuzz
