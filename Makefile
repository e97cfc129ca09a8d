# loom - build, test, benchmark.
#
#   make              libloom.so, libloom.a, tools, tests        (build/)
#   make test         everything, then the host test suites, C and Python (no GPU needed),
#                     then how long it took (make -j$(nproc) test: every core; .ci/run)
#   make gpu-test     the GPU test suite (needs GPUs; 2 for the peer tests)
#   make bench        the main benchmark job on the GPUs present (without a GPU it
#                     says so and stops before building anything)
#   make install PREFIX=/usr/local   (loom-bench's PyTorch peers in share/loom/peers)
#
# The version is in VERSION alone (MAJOR.MINOR.PATCH): loom.pc and the Python
# package take it from there; include/loom.h's LOOM_VERSION_* must equal it
# (header-check, part of every build, says so otherwise).
#
# Switches: DEBUG=1 (-O0 -g, device -lineinfo), VERBOSE=1 (ptxas resource
# report: registers, shared memory, spills), LOOM_ARCH="-gencode ..." (default
# sm_90a machine code plus sm_80 PTX), CUDA_HOME, NCCL_HOME.

CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CC        ?= gcc
PREFIX    ?= /usr/local
BUILD     ?= build
LOOM_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=compute_80
VERSION   := $(strip $(shell cat VERSION))

# NCCL: NCCL_HOME if given, else the system's (/usr/include, as on the GPU
# machines), else the one inside the CUDA toolkit.
ifdef NCCL_HOME
  NCCL_INC := $(NCCL_HOME)/include
  NCCL_LIB := $(NCCL_HOME)/lib
else
  NCCL_INC := $(firstword $(foreach d,/usr/include /usr/local/include $(CUDA_HOME)/include,$(if $(wildcard $(d)/nccl.h),$(d))))
  NCCL_LIB := $(firstword $(foreach d,/usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/local/lib $(CUDA_HOME)/lib64,$(if $(wildcard $(d)/libnccl.so*),$(d))))
endif

ifeq ($(DEBUG),1)
  OPT   := -O0 -g
  NVOPT := -O0 -g -lineinfo
else
  OPT   := -O2
  NVOPT := -O3
endif
ifeq ($(VERBOSE),1)
  NVOPT += -Xptxas -v
endif

INCS     := -I. -Iinclude -Isrc -I$(NCCL_INC) -I$(CUDA_HOME)/include
# Hidden by default: libloom.so exports only what include/loom.h declares
# (the header marks its declarations visible); internals stay linkable from
# the static libraries that tests and tools use.
CFLAGS   := -std=c11 $(OPT) -Wall -Wextra -Werror -Wno-unused-parameter -fPIC -fvisibility=hidden -pthread $(INCS)
NVFLAGS  := -std=c++17 $(NVOPT) $(LOOM_ARCH) -Xcompiler -fPIC,-Wall,-fvisibility=hidden -Werror all-warnings $(INCS)
# -lnccl needs libnccl.so; an NCCL that ships only libnccl.so.2 (the pip
# wheel's) is linked by its soname.
NCCL_LINK := $(if $(wildcard $(NCCL_LIB)/libnccl.so),-lnccl,-l:libnccl.so.2)
LDLIBS   := -L$(NCCL_LIB) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(NCCL_LIB):$(CUDA_HOME)/lib64 \
            $(NCCL_LINK) -lcublasLt -lcublas -lnvrtc -lcudart -lpthread -lm -ldl -lstdc++

LIB_C    := $(sort $(wildcard src/core/*.c src/baseline/*.c src/gemm/*.c src/ops/*/*.c src/lang/*.c src/codegen/*.c))
# The slowest translation units (ptxas, mostly: the GEMM kernels' groups of
# instantiations, src/gemm/gemm_sm80.cuh and gemm_sm90.cuh, and the
# collectives' kernels) come first, the slowest first, so that make -j starts
# them before the quick ones and none is left compiling alone at the end.
SLOW_CU  := $(foreach p,src/gemm/gemm_sm80_ src/ops/coll/coll_kernels src/gemm/gemm_sm90_128x256_ \
              src/gemm/gemm_sm90_128x224_ src/gemm/gemm_sm90_128x128_ src/gemm/gemm_sm90_128x192_ \
              src/ops/embedding/embedding_a2a src/gemm/gemm_sm90_64x256_ src/ops/optim/optim_kernels \
              src/gemm/gemm_small_m src/gemm/gemm_sm90_64x128_ src/gemm/gemm_sm90_grouped_,$(sort $(wildcard $(p)*.cu)))
LIB_CU   := $(SLOW_CU) $(filter-out $(SLOW_CU),$(sort $(wildcard src/core/*.cu src/baseline/*.cu src/gemm/*.cu \
              src/ops/*/*.cu src/lang/*.cu)))
# The headers generated kernels include (everything reached from codegen/cg_device.cuh), embedded in the
# library for NVRTC at build time (src/codegen/embed_headers.py; its .d file lists what it read).
RTC_GEN  := $(BUILD)/gen/src/codegen/rtc_headers_data.c
LIB_OBJ  := $(patsubst %.cu,$(BUILD)/obj/%.o,$(LIB_CU)) $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_C)) \
            $(BUILD)/obj/src/codegen/rtc_headers_data.o
# The test-support library: CPU references (src/ref), hooks into loom's
# internals (src/testing: hooks.h for tests, bench_api.h, the one internal
# header the benchmarks include) and what tests and tools share (support/:
# the multi-process launcher, input generators). Tests, tools and dev
# programs link it before libloom.a; it never goes into libloom.so.
TS_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard src/ref/*.c src/testing/*.c support/*.c))) \
            $(patsubst %.cu,$(BUILD)/obj/%.o,$(sort $(wildcard src/testing/*.cu)))
HOST_T   := $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard tests/host/*.c tests/host/*/*.c tests/common/*.c)))
GPU_T    := $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard tests/gpu/*.c tests/gpu/*/*.c tests/common/*.c))) \
            $(patsubst %.cu,$(BUILD)/obj/%.o,$(sort $(wildcard tests/gpu/*.cu tests/gpu/*/*.cu)))
BENCH    := $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard tools/bench/*.c))) \
            $(patsubst %.cu,$(BUILD)/obj/%.o,$(sort $(wildcard tools/bench/*.cu)))

LIBSO    := $(BUILD)/lib/libloom.so
LIBA     := $(BUILD)/lib/libloom.a
LIBTS    := $(BUILD)/lib/libloom_testsupport.a
BINS     := $(BUILD)/bin/loom $(BUILD)/bin/loom-bench
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c)) \
            $(patsubst examples/%.cu,$(BUILD)/examples/%,$(wildcard examples/*/*.cu))
# Kernel development programs (dev/<area>/*.cu): built with everything, so
# CI compiles every .cu file in the tree.
DEVBINS  := $(patsubst dev/%.cu,$(BUILD)/dev/%,$(wildcard dev/*/*.cu))
TESTS    := $(BUILD)/tests/loom-test-host $(BUILD)/tests/loom-test-gpu

# Keep the dev programs' objects (intermediates of the pattern rule that
# links them). Only those: a bare .SECONDARY would make every target
# secondary, and a new source file older than an existing binary would then
# never be compiled into it.
.SECONDARY: $(patsubst dev/%.cu,$(BUILD)/obj/dev/%.o,$(wildcard dev/*/*.cu))
.PHONY: all test host-test python-test gpu-test mutants bench install clean check-env header-check
all: check-env $(LIBSO) $(LIBA) $(BINS) $(TESTS) $(EXAMPLES) $(DEVBINS) header-check

check-env:
	@command -v $(NVCC) >/dev/null 2>&1 || { echo "loom: nvcc not found at $(NVCC): install the CUDA toolkit >= 12 or set CUDA_HOME" >&2; exit 1; }
	@test -n "$(NCCL_INC)" -a -f "$(NCCL_INC)/nccl.h" || { echo "loom: nccl.h not found: install NCCL >= 2.28 (libnccl-dev) or set NCCL_HOME" >&2; exit 1; }
	@test -n "$(NCCL_LIB)" || { echo "loom: libnccl.so not found: install NCCL >= 2.28 or set NCCL_HOME" >&2; exit 1; }
	@v=$$(sed -n 's/^#define NCCL_VERSION_CODE \([0-9]*\).*/\1/p' $(NCCL_INC)/nccl.h); \
	  test -n "$$v" -a "$$v" -ge 22800 2>/dev/null || { echo "loom: $(NCCL_INC)/nccl.h is NCCL $$v; loom needs NCCL >= 2.28 (22800)" >&2; exit 1; }
	@test -f "$(NCCL_INC)/nccl_device.h" || { echo "loom: $(NCCL_INC)/nccl_device.h missing: NCCL >= 2.28 with its device API headers is needed" >&2; exit 1; }

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

$(RTC_GEN): src/codegen/embed_headers.py src/codegen/cg_device.cuh
	@mkdir -p $(dir $@)
	python3 src/codegen/embed_headers.py . $@ $(BUILD)/gen/rtc_headers.d src/codegen/cg_device.cuh

$(BUILD)/obj/src/codegen/rtc_headers_data.o: $(RTC_GEN)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIBA): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBTS): $(TS_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBSO): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@.0 $^ $(LDLIBS) -Wl,-soname,libloom.so.0
	ln -sf libloom.so.0 $@

# The whole library: `loom env` lists the settings every object declares
# (core/param.h: rows added as the program loads), linked in or not.
$(BUILD)/bin/loom: $(BUILD)/obj/tools/loom.o $(BUILD)/obj/tools/loom_lang.o $(LIBTS) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(filter-out $(LIBA),$^) -Wl,--whole-archive $(LIBA) -Wl,--no-whole-archive $(LDLIBS)

$(BUILD)/bin/loom-bench: $(BENCH) $(LIBTS) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/loom-test-host: $(HOST_T) $(LIBTS) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/loom-test-gpu: $(GPU_T) $(LIBTS) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/dev/%: $(BUILD)/obj/dev/%.o $(LIBTS) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS)

# Examples link the shared library, as a user's program would.
$(BUILD)/examples/%: examples/%.c $(LIBSO)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude -I$(NCCL_INC) -I$(CUDA_HOME)/include -o $@ $< \
	  -L$(BUILD)/lib -Wl,-rpath,$(abspath $(BUILD)/lib) -lloom $(LDLIBS)

comma := ,
# Examples with kernels of their own (examples/<name>/<name>.cu), also
# against the shared library.
$(BUILD)/examples/%: examples/%.cu $(LIBSO)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O2 $(LOOM_ARCH) -Werror all-warnings -Iinclude -I$(NCCL_INC) -o $@ $< \
	  -L$(BUILD)/lib -Xlinker -rpath,$(abspath $(BUILD)/lib) -lloom $(subst -Wl$(comma),-Xlinker ,$(LDLIBS))

# loom.pc from loom.pc.in: the install prefix, the version, and CUDA and NCCL
# linked as this Makefile links them (NCCL_LINK).
LOOM_PC_SED = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
                  -e 's|@CUDA_LIB@|$(CUDA_HOME)/lib64|g' -e 's|@CUDA_INC@|$(CUDA_HOME)/include|g' \
                  -e 's|@NCCL_LIB@|$(NCCL_LIB)|g' -e 's|@NCCL_INC@|$(NCCL_INC)|g' -e 's|@NCCL_LINK@|$(NCCL_LINK)|g'

# The public header is plain C11 and warning-free, and every place that
# states the version agrees with VERSION (tests/check_version.sh): loom.h's
# LOOM_VERSION_*, the Python package's, and loom.pc as make install writes it
# ($(BUILD)/loom.pc, for PREFIX).
header-check: $(BUILD)/header-check.ok
$(BUILD)/header-check.ok: include/loom.h VERSION loom.pc.in python/pyproject.toml $(wildcard python/loom/VERSION) \
                          tests/check_version.sh Makefile
	@mkdir -p $(BUILD)
	printf '#include "loom.h"\nint main(void){return 0;}\n' | $(CC) -std=c11 -Wall -Wextra -Werror -pedantic -Iinclude -I$(NCCL_INC) -I$(CUDA_HOME)/include -x c - -fsyntax-only
	$(LOOM_PC_SED) loom.pc.in > $(BUILD)/loom.pc
	sh tests/check_version.sh $(BUILD)/loom.pc '$(NCCL_LINK)'
	@touch $@

# `make test` ends by saying how long it took, build and tests, counted from
# when make read this file (LOOM_T0).
# The C host suite (with the export, tool and layer checks) and the Python
# host suite run side by side under make -j (each is one process), each
# one's output kept together (--output-sync).
LOOM_T0 := $(shell date +%s)
test: all
	@$(MAKE) --no-print-directory --output-sync=target host-test python-test
	@t=$$(( $$(date +%s) - $(LOOM_T0) )); printf 'loom: make test took %d min %02d s (build and tests)\n' $$((t / 60)) $$((t % 60))

host-test: all
	$(BUILD)/tests/loom-test-host
	bash tests/check_exports.sh $(LIBSO) include/loom.h
	bash tests/check_loom_tool.sh $(BUILD)/bin/loom
	bash tests/gpu/mutants.sh check
	python3 tests/check_layers.py --src src --obj $(BUILD)/obj/src --header include/loom.h

# The Python binding's host tests (pytest, installed on first use if missing;
# no GPU, no torch needed): tests/python/run_host.sh.
python-test: $(LIBSO)
	LOOM_LIBRARY=$(abspath $(LIBSO)) LOOM_TEST_CFLAGS="-I$(abspath include) -I$(NCCL_INC) -I$(CUDA_HOME)/include" \
	  CC="$(CC)" BUILD=$(BUILD) sh tests/python/run_host.sh

gpu-test: all
	$(BUILD)/tests/loom-test-gpu

# Kernels with one wait removed each (tests/gpu/mutants.txt), for
# `tests/gpu/mutants.sh run` on a GPU: the one-GPU world's tests must catch
# every one. Not part of all. MUTANT_ARCH: the GPUs they are built for.
MUTANT_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
mutants: $(LIBA) $(LIBTS) $(GPU_T)
	NVCC="$(NVCC)" NVFLAGS="$(filter-out $(LOOM_ARCH),$(NVFLAGS)) $(MUTANT_ARCH)" CC="$(CC)" LIBA=$(LIBA) \
	  LINK_IN="$(GPU_T) $(LIBTS)" LDLIBS="$(LDLIBS)" BUILD=$(BUILD) bash tests/gpu/mutants.sh build

# An NVIDIA GPU to run on: nvidia-smi lists one and CUDA_VISIBLE_DEVICES
# does not hide them all. `make bench` checks first, so that a machine
# without a GPU is told so at once instead of after the whole build.
HAVE_GPU = nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && case "$${CUDA_VISIBLE_DEVICES-all}" in ''|-1) false;; esac
NO_GPU   = loom: make bench needs an NVIDIA GPU and finds none (nvidia-smi -L lists none, or \
           CUDA_VISIBLE_DEVICES hides them): nothing was built; make and make test need no GPU

bench:
	@$(HAVE_GPU) || { echo "$(NO_GPU)" >&2; exit 1; }
	@$(MAKE) --no-print-directory all
	$(BUILD)/bin/loom-bench all

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin \
	  $(DESTDIR)$(PREFIX)/share/loom/peers
	install -m 644 include/loom.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(LIBSO).0 $(DESTDIR)$(PREFIX)/lib/libloom.so.0
	ln -sf libloom.so.0 $(DESTDIR)$(PREFIX)/lib/libloom.so
	install -m 644 $(LIBA) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 bench/peers/*.py $(DESTDIR)$(PREFIX)/share/loom/peers/
	$(LOOM_PC_SED) loom.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/loom.pc

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null) $(wildcard $(BUILD)/gen/rtc_headers.d)
