/*
 * fuzz_door.c - libFuzzer entry of the door's fuzzer (dev/door/fuzz.sh):
 * every op's plan entry on descriptions built from the input, on a test comm
 * without a GPU (tests/host/core/door_fuzz_one.h). A broken property aborts,
 * so libFuzzer keeps the input.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tests/host/core/door_fuzz_one.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const int bad = door_fuzz_one(data, size);
  if (bad) {
    fprintf(stderr, "fuzz_door: property %d broke: %s\n", bad, loom_last_error());
    abort();
  }
  return 0;
}
