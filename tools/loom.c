/*
 * loom.c - the loom command.
 *
 *   loom env       every LOOM_* setting: name, value in force, default, meaning
 *   loom version   library and NCCL versions
 *   loom check | schedules | interp | run | tune   the language (tools/loom_lang.c)
 */
#include <stdio.h>
#include <string.h>

#include "loom.h"
#include "core/param.h"
#include "support/tool_param.h"
#include "tools/loom_lang.h"

static void loom_env_table(const loom_param_desc_t *t, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    char name[64];
    snprintf(name, sizeof name, "LOOM_%s", t[i].name);
    const char *v = loom__param_text(&t[i]);
    printf("%-32s %-16s %-14s %s\n", name, *v ? v : "\"\"", *t[i].default_text ? t[i].default_text : "\"\"",
           t[i].meaning);
  }
}

static int loom_env(void) {
  size_t n = 0;
  /* the table first, then its count: the order in which a call's arguments
   * are evaluated is unspecified, so f(table(&n), n) may pass the old n */
  const loom_param_desc_t *t = loom__param_table(&n);
  printf("%-32s %-16s %-14s %s\n", "setting", "value", "default", "meaning");
  loom_env_table(t, n);
  printf("# tests, benchmarks and tools:\n");
  t = loom_tool_param_table(&n);
  loom_env_table(t, n);
  return 0;
}

static int loom_version(void) {
  int v = 0, nv = 0;
  loom_get_version(&v);
  printf("loom %d.%d.%d\n", v / 10000, (v / 100) % 100, v % 100);
  if (ncclGetVersion(&nv) == ncclSuccess)
    printf("NCCL %d.%d.%d (loaded; loom needs >= 2.28.0)\n", nv / 10000, (nv / 100) % 100, nv % 100);
  return 0;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "help";
  if (!strcmp(cmd, "env")) return loom_env();
  if (!strcmp(cmd, "version")) return loom_version();
  if (!strcmp(cmd, "check") || !strcmp(cmd, "schedules") || !strcmp(cmd, "interp") || !strcmp(cmd, "run") ||
      !strcmp(cmd, "tune"))
    return loom_lang_main(argc - 1, argv + 1);
  printf("usage: loom env | version | check | schedules | interp | run | tune\n"
         "  env        list every LOOM_* setting with its value, default and meaning\n"
         "  version    library and NCCL versions\n"
         "  check      parse a .loom program, infer its types, print it typed (loom check --help)\n"
         "  schedules  the schedules the transformations reach, with a cost estimate\n"
         "  interp     run a program on the CPU with W simulated ranks\n"
         "  run        compile a program for the GPUs (generated kernels) and run it, timed, checked\n"
         "  tune       time every schedule of a program on the GPUs and record the fastest for loom run\n");
  return strcmp(cmd, "help") && strcmp(cmd, "--help") ? 2 : 0;
}
