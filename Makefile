# Thin wrapper over CMake. BUILD selects the build folder (helpers may use their own).
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure run test unit pytest asan fuzz fuzz-smoke bundle clean format

all: deps configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

run: all
	@scripts/fetch-model.sh
	$(BUILD)/lpx run -m "$$(scripts/fetch-model.sh --print-path)" --chat \
	    -p "Write a haiku about fast inference." -n 64

test: all
	@scripts/fetch-model.sh
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	LPX_BUILD=$(BUILD) python3 -m pytest -q tests/py
	$(MAKE) fuzz-smoke

asan:
	$(MAKE) BUILD=build-asan CMAKE_FLAGS="-DLPX_ASAN=ON -DLPX_CUDA=OFF" all
	@scripts/fetch-model.sh
	cd build-asan && ctest --output-on-failure -j $(JOBS)
	LPX_BUILD=build-asan python3 -m pytest -q tests/py -m "not slow"

fuzz:
	@scripts/fuzz.sh build-fuzz 300

fuzz-smoke:
	@scripts/fuzz.sh build-fuzz 20

bundle: all
	@scripts/bundle-libs.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build build-asan build-fuzz
