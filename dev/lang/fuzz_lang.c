/*
 * fuzz_lang.c - libFuzzer target for the language's parser, checker,
 * printer, transformations and interpreter (tests/host/lang/lang_fuzz_one.h
 * says what one input does). Built and run by dev/lang/fuzz.sh; a broken
 * property aborts so that libFuzzer saves the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/host/lang/lang_fuzz_one.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return 0;
  const int bad = lang_fuzz_one((const char *)data, size);
  if (bad) {
    fprintf(stderr, "fuzz_lang: property %d broke: %s\n", bad, loom_last_error());
    abort();
  }
  return 0;
}
