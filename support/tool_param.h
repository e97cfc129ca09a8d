/*
 * tool_param.h - the LOOM_* settings that tests, benchmarks and tools read
 * (not the library: its own are in src/core/param.h). Same row format and
 * types; `loom env` lists both tables.
 */
#ifndef LOOM_SUPPORT_TOOL_PARAM_H
#define LOOM_SUPPORT_TOOL_PARAM_H

#include <stddef.h>
#include "core/param.h"

#define LOOM_TOOL_PARAMS(X)                                                                                   \
  X(BENCH_RESULTS_DIR, STR, "loom-results", "where loom-bench writes its JSON (--results overrides)")         \
  X(BENCH_PEERS, STR, "", "loom-bench's PyTorch peers; empty: <prefix>/share/loom/peers, else ./bench/peers") \
  X(COMMIT, STR, "", "the commit recorded in benchmark JSON where there is no .git (device runs)")            \
  X(BENCH_HOLD, STR, "1", "loom-bench with several ranks: 1 holds the GPU before each timed op's barrier until " \
                          "the host has issued the op (times are the GPU's); 0 does not (host issue time and " \
                          "its skew between ranks count, as before this setting)")                        \
  X(TEST_SEED, STR, "", "repeat a test run's random inputs (the seed it printed); empty: fresh")              \
  X(TEST_TIMEOUT_S, STR, "900", "limit per GPU test process, in seconds")                                     \
  X(TEST_TIMEOUT_MS, STR, "", "GPU case suites: every case's comm timeout in ms (shorter finds a hang sooner); "  \
                              "empty: the suite's own")                                                        \
  X(TEST_CASES, STR, "", "GPU case suites: the case indices to run (\"10\", \"3,10-12\"); empty: every case") \
  X(TEST_STEP_TIMES, STR, "", "GPU tests that mark their steps: nonempty prints each rank's step times on "    \
                              "stderr (which rank's thread is held, where)")                                   \
  X(TEST_POISON_DEVICE, STR, "", "one-GPU worlds: a byte (e.g. 255) that most free device memory is filled "  \
                                 "with, then freed, before the ranks start (reads of never-written memory "    \
                                 "show); empty: none")                                  \
  X(LAUNCH_JOB, STR, "", "names the job whose ranks meet under mpirun (see support/launch.h)")                \
  X(WHEEL_LIBRARY, STR, "", "pip wheel ./python: the libloom.so.0 to ship (none: no library); empty: make builds it") \
  X(WHEEL_JOBS, STR, "", "pip wheel ./python: make -j for libloom; empty: the CPUs present")

#ifdef __cplusplus
extern "C" {
#endif

/* The table, in declaration order. */
const loom_param_desc_t *loom_tool_param_table(size_t *count);

/* The value in force of LOOM_<name> (environment, else default). */
const char *loom_tool_param(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_SUPPORT_TOOL_PARAM_H */
