/*
 * prog_io.h - the buffers of a compiled loom program on this rank, as the
 * GPU tests and `loom run` feed and check them (test-support library):
 *
 *   prog_io_make    every input and output this rank holds, in device memory
 *                   (loom_prog_plan_io's pieces)
 *   prog_io_fill    the inputs drawn as the CPU interpreter draws them (each
 *                   rank's piece of each tensor from the seed, rounded to
 *                   its dtype), the outputs poisoned (NaN)
 *   prog_io_check   every element of this rank's outputs against the
 *                   interpreter's results: the largest |x - ref| / max(1,
 *                   |ref|), and the first elements beyond `tol`
 *   prog_io_bound   the stated bound of a program: by its narrowest dtype,
 *                   2e-4 (FP32), 1.5e-2 (FP16), 6e-2 (BF16) (the kernels
 *                   compute in fp32 and round every stored value, the
 *                   interpreter in double)
 */
#ifndef LOOM_SUPPORT_PROG_IO_H
#define LOOM_SUPPORT_PROG_IO_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "loom.h"

#define PROG_IO_MAX 16

typedef struct prog_io {
  int ni, no;
  loom_prog_io_t in[PROG_IO_MAX], out[PROG_IO_MAX];
  void *din[PROG_IO_MAX], *dout[PROG_IO_MAX]; /* NULL where this rank holds nothing */
  void *host;                                 /* room for the largest piece */
} prog_io_t;

loom_result_t prog_io_make(loom_plan_t plan, prog_io_t *b);
void prog_io_free(prog_io_t *b);
/* q: this rank's index in its group. 0 on success. */
int prog_io_fill(prog_io_t *b, int q, uint64_t seed, cudaStream_t s);
/* The largest difference of this rank's outputs from the interpreter's results of prog (scheduled) at W
 * ranks per group with sizes bind and inputs from seed; *bad: elements beyond tol (up to 5 printed,
 * prefixed by label). LOOM_SUCCESS, or the interpreter's or CUDA's failure. */
loom_result_t prog_io_check(const prog_io_t *b, loom_prog_t prog, int W, const char *bind, uint64_t seed, int rank,
                            double tol, const char *label, double *maxdiff, int *bad);
double prog_io_bound(loom_prog_t prog);

#endif /* LOOM_SUPPORT_PROG_IO_H */
