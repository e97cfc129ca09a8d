/* prog_io.c - see prog_io.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/interp_ops.h"
#include "lang/lang.h"
#include "ref/ref.h"
#include "support/prog_io.h"

static size_t io_bytes(const loom_prog_io_t *io) { return (size_t)io->count * loom_dtype_size(io->dtype); }

/* The whole tensor's flat index of element e of this rank's piece. */
static int64_t whole_index(const loom_prog_io_t *io, int64_t e) {
  int64_t g[6], f = 0;
  for (int j = io->rank - 1; j >= 0; --j) {
    g[j] = e % io->dims[j] + (io->layout == LOOM_PROG_SLICED && io->arg == j ? io->offset : 0);
    e /= io->dims[j];
  }
  for (int j = 0; j < io->rank; ++j) f = f * io->whole[j] + g[j];
  return f;
}

loom_result_t prog_io_make(loom_plan_t plan, prog_io_t *b) {
  memset(b, 0, sizeof *b);
  loom_prog_plan_info_t info = LOOM_PROG_PLAN_INFO_INIT;
  loom_result_t r = loom_prog_plan_info(plan, &info);
  if (r != LOOM_SUCCESS) return r;
  if (info.ninputs > PROG_IO_MAX || info.noutputs > PROG_IO_MAX) return LOOM_ERR_UNSUPPORTED;
  b->ni = info.ninputs, b->no = info.noutputs;
  size_t most = 16;
  for (int i = 0; i < b->ni + b->no; ++i) {
    const int out = i >= b->ni, k = out ? i - b->ni : i;
    loom_prog_io_t *io = out ? &b->out[k] : &b->in[k];
    void **d = out ? &b->dout[k] : &b->din[k];
    io->struct_size = sizeof *io;
    if ((r = loom_prog_plan_io(plan, out, k, io)) != LOOM_SUCCESS) return r;
    if (io->count && cudaMalloc(d, io_bytes(io)) != cudaSuccess) return LOOM_ERR_CUDA;
    if (io_bytes(io) > most) most = io_bytes(io);
  }
  b->host = malloc(most);
  return b->host ? LOOM_SUCCESS : LOOM_ERR_OUT_OF_MEMORY;
}

void prog_io_free(prog_io_t *b) {
  for (int i = 0; i < b->ni; ++i) cudaFree(b->din[i]);
  for (int j = 0; j < b->no; ++j) cudaFree(b->dout[j]);
  free(b->host);
  memset(b, 0, sizeof *b);
}

int prog_io_fill(prog_io_t *b, int q, uint64_t seed, cudaStream_t s) {
  for (int i = 0; i < b->ni; ++i) {
    const loom_prog_io_t *io = &b->in[i];
    if (!io->count) continue;
    for (int64_t e = 0; e < io->count; ++e)
      loom_ref_store(
          io->dtype, b->host, (size_t)e,
          loom__interp_input_elem(io->name, seed, io->layout == LOOM_PROG_LOCAL ? q : -1, whole_index(io, e)));
    if (cudaMemcpyAsync(b->din[i], b->host, io_bytes(io), cudaMemcpyHostToDevice, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
      return 1;
  }
  for (int j = 0; j < b->no; ++j)
    if (b->out[j].count && cudaMemsetAsync(b->dout[j], 0xff, io_bytes(&b->out[j]), s) != cudaSuccess) return 1;
  return 0;
}

/* Output j's elements against its logical value v (the interpreter's), this rank's piece. */
static int check_one(const prog_io_t *b, int j, const loom__value_t *v, int q, double tol, const char *label,
                     int rank, double *maxdiff) {
  const loom_prog_io_t *io = &b->out[j];
  int bad = 0;
  for (int64_t e = 0; e < io->count; ++e) {
    const int64_t g = whole_index(io, e) + (v->local ? (int64_t)q * v->count : 0);
    const double got = loom_ref_load(io->dtype, b->host, (size_t)e), want = v->v[g];
    const double d = isnan(got) || isnan(want) ? INFINITY : fabs(got - want) / fmax(1.0, fabs(want));
    if (d > *maxdiff) *maxdiff = d;
    if (d <= tol) continue;
    if (bad++ < 5)
      fprintf(stderr, "%s, rank %d: output %s element %lld: %.8g, the interpreter %.8g\n", label, rank, io->name,
              (long long)e, got, want);
  }
  return bad;
}

loom_result_t prog_io_check(const prog_io_t *b, loom_prog_t prog, int W, const char *bind, uint64_t seed, int rank,
                            double tol, const char *label, double *maxdiff, int *bad) {
  loom__binding_t bd;
  loom__results_t res;
  *maxdiff = 0, *bad = 0;
  loom_result_t r = loom__lang_parse_bind(bind, &bd);
  if (r == LOOM_SUCCESS) r = loom__lang_interp(prog, W, &bd, seed, &res);
  if (r != LOOM_SUCCESS) return r;
  if (res.n != b->no) *bad = 1, *maxdiff = INFINITY;
  for (int j = 0; j < b->no && j < res.n && r == LOOM_SUCCESS; ++j) {
    if (!b->out[j].count) continue;
    if (cudaMemcpy(b->host, b->dout[j], io_bytes(&b->out[j]), cudaMemcpyDeviceToHost) != cudaSuccess) {
      r = LOOM_ERR_CUDA;
      break;
    }
    *bad += check_one(b, j, &res.vals[j], rank % W, tol, label, rank, maxdiff);
  }
  loom__lang_results_free(&res);
  return r;
}

double prog_io_bound(loom_prog_t p) {
  double bound = 2e-4;
  for (int i = 0; i < p->n; ++i) {
    if (p->nodes[i].removed || !p->nodes[i].typed) continue;
    if (p->nodes[i].ty.dtype == LOOM_BF16) bound = 6e-2;
    else if (p->nodes[i].ty.dtype == LOOM_FP16 && bound < 1.5e-2) bound = 1.5e-2;
  }
  return bound;
}
