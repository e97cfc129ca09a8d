/*
 * optim.c - plans of the distributed optimizers (loom_plan_adam,
 * loom_plan_lamb): the description checks, the chunk table, the peers'
 * addresses of every tensor, the sharded state, the plan's info, and what
 * both calls share. The calls are in adam.c and lamb.c; the protocol in
 * optim.h; who updates what in optim_schedule.h.
 *
 * Plan creation is collective, and argument checks that depend on the rank
 * (each rank's pointers) could fail on one rank only: every rank first
 * checks its own arguments, then all ranks agree (one NCCL all-reduce of
 * [layout hash, its complement, failed]) before anything collective is
 * done, so a rank whose tensors are refused never leaves its peers waiting
 * in a collective, and tensors laid out differently on two ranks (another
 * offset, another allocation, other sizes or hyperparameters) are refused
 * on every rank.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/util.h"
#include "core/handle.h"
#include "core/log.h"
#include "core/op.h"
#include "core/plan.h"
#include "core/ptr_check.h"
#include "ops/optim/optim.h"
#include "ops/optim/optim_protocol.h"
#include "ops/optim/optim_schedule.h"

/* The kernels' wait sites, named from the protocol's table of signals. */
__attribute__((constructor)) static void loom__optim_wait_sites(void) {
  loom__proto_register_sites(loom__optim_signals, LOOM__OPTIM_NSIG);
}

/* The tensors: their count, arrays, sizes, pointers, weight decays. */
static loom_result_t optim_check_tensors(const char *fn, int comm_size, const loom_optim_desc_t *d) {
  if (!d) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc=NULL must point to a loom_optim_desc_t", fn);
  if (d->struct_size != sizeof(loom_optim_desc_t))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->struct_size=%zu, expected %zu (initialise with LOOM_OPTIM_DESC_INIT; header and "
                      "library differ?)",
                      fn, d->struct_size, sizeof(loom_optim_desc_t));
  if (d->world_size != comm_size)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->world_size=%d differs from the comm's size %d", fn,
                      d->world_size, comm_size);
  if (d->num_tensors < 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->num_tensors=%d must be >= 1", fn, d->num_tensors);
  if (!d->params) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->params=NULL (an array of %d pointers)", fn, d->num_tensors);
  if (!d->grads) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->grads=NULL (an array of %d pointers)", fn, d->num_tensors);
  if (!d->numels) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->numels=NULL (an array of %d sizes)", fn, d->num_tensors);
  for (int t = 0; t < d->num_tensors; ++t) {
    if (d->numels[t] < 1)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->numels[%d]=%lld must be >= 1", fn, t,
                        (long long)d->numels[t]);
    if (d->numels[t] > ((int64_t)1 << 40))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->numels[%d]=%lld is more than 2^40 elements", fn, t,
                        (long long)d->numels[t]);
    if (!d->params[t]) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->params[%d]=NULL", fn, t);
    if (!d->grads[t]) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->grads[%d]=NULL", fn, t);
    if (d->weight_decays && !(d->weight_decays[t] >= 0.0f))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->weight_decays[%d]=%g must be >= 0", fn, t,
                        (double)d->weight_decays[t]);
  }
  return LOOM_SUCCESS;
}

/* The dtypes, the form and the hyperparameters. */
static loom_result_t optim_check_hyper(const char *fn, const loom_optim_desc_t *d) {
  if (!loom__dtype_known(d->param_type))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->param_type=%d is not LOOM_FP32, LOOM_BF16 or LOOM_FP16", fn,
                      (int)d->param_type);
  if (!loom__dtype_known(d->grad_type))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->grad_type=%d is not LOOM_FP32, LOOM_BF16 or LOOM_FP16", fn,
                      (int)d->grad_type);
  if (d->form < LOOM_OPTIM_AUTO || d->form > LOOM_OPTIM_AR_OPT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->form=%d is unknown: must be LOOM_OPTIM_AUTO, LOOM_OPTIM_RS_OPT_AG or LOOM_OPTIM_AR_OPT",
                      fn, (int)d->form);
  if (!(d->lr >= 0.0f)) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->lr=%g must be >= 0", fn, (double)d->lr);
  if (!(d->beta1 >= 0.0f && d->beta1 < 1.0f))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->beta1=%g must be in [0, 1)", fn, (double)d->beta1);
  if (!(d->beta2 >= 0.0f && d->beta2 < 1.0f))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->beta2=%g must be in [0, 1)", fn, (double)d->beta2);
  if (!(d->eps > 0.0f)) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->eps=%g must be > 0", fn, (double)d->eps);
  if (!(d->weight_decay >= 0.0f))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->weight_decay=%g must be >= 0", fn, (double)d->weight_decay);
  if (d->decoupled_weight_decay != 0 && d->decoupled_weight_decay != 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->decoupled_weight_decay=%d must be 0 or 1", fn,
                      d->decoupled_weight_decay);
  if (d->bias_correction != 0 && d->bias_correction != 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->bias_correction=%d must be 0 or 1", fn, d->bias_correction);
  if (d->average_grads != 0 && d->average_grads != 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->average_grads=%d must be 0 or 1", fn, d->average_grads);
  if (d->use_nvlamb != 0 && d->use_nvlamb != 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: desc->use_nvlamb=%d must be 0 or 1", fn, d->use_nvlamb);
  return LOOM_SUCCESS;
}

/* The chunk size, and the chunk count it gives (the global chunk list is indexed by int32). */
static loom_result_t optim_check_chunks(const char *fn, int comm_size, const loom_optim_desc_t *d) {
  if (d->chunk_elems < 0 || d->chunk_elems % LOOM_OPTIM_VEC != 0 || d->chunk_elems > (1 << 24))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: desc->chunk_elems=%lld must be 0 (default %d) or a positive multiple of %d up to 2^24", fn,
                      (long long)d->chunk_elems, LOOM_OPTIM_CHUNK_DEFAULT, LOOM_OPTIM_VEC);
  const int64_t chunk = d->chunk_elems ? d->chunk_elems : LOOM_OPTIM_CHUNK_DEFAULT;
  int64_t g = 0, total = 0;
  for (int t = 0; t < d->num_tensors; ++t) {
    total += d->numels[t];
    g += loom__optim_tensor_global_chunks(d->numels[t], comm_size, loom__optim_tensor_is_ar((int)d->form, d->numels[t]),
                                         chunk);
  }
  if (g > INT32_MAX / 2)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: %lld elements in %lld chunks of desc->chunk_elems=%lld are too many chunks: raise chunk_elems",
                      fn, (long long)total, (long long)g, (long long)d->chunk_elems);
  return LOOM_SUCCESS;
}

loom_result_t loom__optim_check_desc(const char *fn, int comm_size, const loom_optim_desc_t *d) {
  LOOM_TRY(optim_check_tensors(fn, comm_size, d));
  LOOM_TRY(optim_check_hyper(fn, d));
  return optim_check_chunks(fn, comm_size, d);
}

/* ---- plan state ---------------------------------------------------------- */

static const loom_op_family_t optim_family = {"optim", "an adam or lamb plan"};

/* The plan is of the optimizer asked for (lamb -1: either). */
static loom_result_t optim_kind(loom_plan_t plan, const char *fn, int lamb, const loom_optim_state_t *st) {
  if (lamb >= 0 && st->lamb != lamb)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: plan=%p is a%s %s plan, not a%s plan", fn, (void *)plan,
                      st->lamb ? "" : "n", plan->op->name, lamb ? " lamb" : "n adam");
  return LOOM_SUCCESS;
}

loom_result_t loom__optim_state(loom_plan_t plan, const char *fn, int lamb, loom_optim_state_t **st) {
  LOOM_TRY(loom__plan_state(plan, fn, &optim_family, NULL, (void **)st));
  return optim_kind(plan, fn, lamb, *st);
}

/* FNV-1a over bytes. */
/* Where p lies in the comm's allocation table: (index, offset); (-1, p) if
 * not in it. */
static void alloc_pos(loom_comm_t comm, const void *p, int64_t pos[2]) {
  loom_alloc_t *a = comm->detached ? NULL : loom__find_alloc(comm, p, 1);
  pos[0] = a ? (int64_t)(a - comm->allocs) : -1;
  pos[1] = a ? (int64_t)((const char *)p - (const char *)a->ptr) : (int64_t)(uintptr_t)p;
}

/* Rank-local checks of every tensor's memory and the peers' addresses:
 * grad_tab [T][nsrc], param_tab [T][npush]; vec[T]. */
static loom_result_t tensor_tables(loom_comm_t comm, const char *fn, loom_optim_state_t *st, char **grad_tab,
                                   char **param_tab, int *vec, uint64_t *hash) {
  const int T = st->T, W = st->world, nsrc = st->k.nsrc, npush = st->k.npush;
  const size_t ps = loom_dtype_size(st->desc.param_type), gs = loom_dtype_size(st->desc.grad_type);
  char name[64];
  for (int t = 0; t < T; ++t) {
    const size_t pb = (size_t)st->numel[t] * ps, gb = (size_t)st->numel[t] * gs;
    snprintf(name, sizeof name, "desc->params[%d]", t);
    LOOM_TRY(loom__check_device_ptr(fn, name, st->params[t], pb));
    snprintf(name, sizeof name, "desc->grads[%d]", t);
    LOOM_TRY(loom__check_device_ptr(fn, name, st->grads[t], gb));
    char **g = grad_tab + (size_t)t * nsrc, **p = param_tab + (size_t)t * npush;
    if (st->local) {
      g[0] = (char *)st->grads[t];
      p[0] = (char *)st->params[t];
    } else {
      LOOM_TRY(loom__peer_addresses(fn, name, comm, st->grads[t], gb,
                                    "every rank loads every rank's gradients, so they must be symmetric memory", g));
      if (!st->ar[t]) {
        snprintf(name, sizeof name, "desc->params[%d]", t);
        LOOM_TRY(loom__peer_addresses(fn, name, comm, st->params[t], pb,
                                      "its owners store the updated slices into every rank's parameters (an "
                                      "RS-Opt-AG tensor), so they must be symmetric memory",
                                      p));
      } else {
        for (int q = 0; q < W; ++q) p[q] = NULL;
        p[st->rank] = (char *)st->params[t];
      }
    }
    int v = 1;
    for (int q = 0; q < nsrc; ++q) v &= (uintptr_t)g[q] % 16 == 0;
    for (int q = 0; q < npush; ++q) v &= p[q] == NULL || (uintptr_t)p[q] % 16 == 0;
    vec[t] = v;
    if (st->local) continue; /* each rank's own memory, anywhere: nothing of it for the ranks to agree on */
    int64_t pos[2];
    alloc_pos(comm, st->grads[t], pos);
    *hash = loom__fnv64(*hash, pos, sizeof pos);
    if (!st->ar[t]) {
      alloc_pos(comm, st->params[t], pos);
      *hash = loom__fnv64(*hash, pos, sizeof pos);
    }
  }
  return LOOM_SUCCESS;
}

/* The host tables plan creation builds and uploads (freed when it ends):
 * the peers' addresses grad_tab [T][nsrc] and param_tab [T][npush], which
 * tensors vectorise, this rank's chunks, the tensors' device records and
 * the owners of the global chunks (LAMB). */
typedef struct optim_host {
  char **grad_tab, **param_tab;
  int *vec;
  loom_optim_chunk_t *chunks;
  loom_optim_tensor_dev_t *tdev;
  int32_t *gowner;
} optim_host_t;

static void optim_host_free(optim_host_t *h) {
  if (!h) return;
  free(h->grad_tab), free(h->param_tab), free(h->vec), free(h->chunks), free(h->tdev), free(h->gowner);
  free(h);
}

/* The schedule's world and rank: local plans update every tensor on their own. */
static int32_t sched_world(const loom_optim_state_t *st) { return st->local ? 1 : st->world; }
static int32_t sched_rank(const loom_optim_state_t *st) { return st->local ? 0 : st->rank; }

/* Resolve: the state's own copy of every tensor's numel, pointers and
 * weight decay, which tensors are AR-Opt; the host tables allocated. */
static loom_result_t optim_copy(loom_optim_state_t *st, const char *fn, const loom_optim_desc_t *desc,
                                optim_host_t *h) {
  const int T = desc->num_tensors;
  st->chunk = desc->chunk_elems ? desc->chunk_elems : LOOM_OPTIM_CHUNK_DEFAULT;
  st->numel = (int64_t *)calloc((size_t)T, sizeof(int64_t));
  st->ar = (int *)calloc((size_t)T, sizeof(int));
  st->params = (void **)calloc((size_t)T, sizeof(void *));
  st->grads = (void **)calloc((size_t)T, sizeof(void *));
  st->wd = (float *)calloc((size_t)T, sizeof(float));
  st->state_off = (int64_t *)calloc((size_t)T, sizeof(int64_t));
  const int nsrc = sched_world(st), npush = sched_world(st);
  h->grad_tab = (char **)calloc((size_t)T * (size_t)nsrc, sizeof(char *));
  h->param_tab = (char **)calloc((size_t)T * (size_t)npush, sizeof(char *));
  h->vec = (int *)calloc((size_t)T, sizeof(int));
  if (!st->numel || !st->ar || !st->params || !st->grads || !st->wd || !st->state_off || !h->grad_tab ||
      !h->param_tab || !h->vec)
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: host allocation of the tensor tables failed", fn);
  st->k.nsrc = nsrc, st->k.npush = npush, st->k.self = sched_rank(st);
  for (int t = 0; t < T; ++t) {
    st->numel[t] = desc->numels[t];
    st->ar[t] = st->local ? 1 : loom__optim_tensor_is_ar((int)desc->form, desc->numels[t]);
    st->nar += st->ar[t];
    st->params[t] = desc->params[t];
    st->grads[t] = desc->grads[t];
    st->wd[t] = desc->weight_decays ? desc->weight_decays[t] : desc->weight_decay;
  }
  st->desc.params = st->params;
  st->desc.grads = st->grads;
  st->desc.numels = st->numel;
  st->desc.weight_decays = st->wd;
  return LOOM_SUCCESS;
}

/* What every rank must have alike: the tensors' sizes, dtypes and
 * hyperparameters, and where each lies (st->where). */
static uint64_t optim_fingerprint(const loom_optim_state_t *st) {
  const loom_optim_desc_t *desc = &st->desc;
  const int T = st->T;
  uint64_t hash = LOOM_FNV64_INIT;
  const int32_t hdr[8] = {T, (int32_t)desc->param_type, (int32_t)desc->grad_type, (int32_t)desc->form, st->lamb,
                          desc->decoupled_weight_decay * 4 + desc->bias_correction * 2 + desc->average_grads,
                          desc->use_nvlamb, st->local};
  const float hp[5] = {desc->lr, desc->beta1, desc->beta2, desc->eps, desc->weight_decay};
  hash = loom__fnv64(hash, hdr, sizeof hdr);
  hash = loom__fnv64(hash, hp, sizeof hp);
  hash = loom__fnv64(hash, &st->chunk, sizeof st->chunk);
  hash = loom__fnv64(hash, st->numel, (size_t)T * sizeof(int64_t));
  hash = loom__fnv64(hash, st->wd, (size_t)T * sizeof(float));
  return loom__fnv64(hash, &st->where, sizeof st->where);
}

/* Lay out: the chunk table (this rank's), the tensors' device records and
 * the global chunks' owners (LAMB). */
static loom_result_t optim_layout(const char *fn, loom_optim_state_t *st, optim_host_t *h) {
  const int T = st->T;
  const int32_t sw = sched_world(st), sr = sched_rank(st);
  st->nchunks = loom__optim_build_chunks(T, st->numel, st->ar, h->vec, sw, sr, st->chunk, NULL, st->state_off,
                                        &st->state_elems);
  for (int t = 0; t < T; ++t) st->gchunks += loom__optim_tensor_global_chunks(st->numel[t], sw, st->ar[t], st->chunk);
  h->chunks = (loom_optim_chunk_t *)calloc((size_t)(st->nchunks > 0 ? st->nchunks : 1), sizeof *h->chunks);
  h->tdev = (loom_optim_tensor_dev_t *)calloc((size_t)T, sizeof *h->tdev);
  h->gowner = (int32_t *)calloc((size_t)st->gchunks, sizeof(int32_t));
  if (!h->chunks || !h->tdev || !h->gowner)
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: host allocation of the chunk table failed", fn);
  (void)loom__optim_build_chunks(T, st->numel, st->ar, h->vec, sw, sr, st->chunk, h->chunks, NULL, NULL);
  int64_t g = 0;
  for (int t = 0; t < T; ++t) {
    const int64_t gc = loom__optim_tensor_global_chunks(st->numel[t], sw, st->ar[t], st->chunk);
    h->tdev[t].weight_decay = st->wd[t];
    h->tdev[t].global_first = (int32_t)g;
    h->tdev[t].global_count = (int32_t)gc;
    for (int32_t q = 0; q < sw; ++q) {
      const int64_t nq = st->ar[t] ? (q == 0 ? gc : 0) : loom__optim_rank_chunks(st->numel[t], sw, q, 0, st->chunk);
      const int64_t first = loom__optim_global_index(st->numel[t], sw, q, st->ar[t], st->chunk, 0);
      for (int64_t j = 0; j < nq; ++j) h->gowner[g + first + j] = st->ar[t] ? -1 : q;
    }
    g += gc;
  }
  return LOOM_SUCCESS;
}

/* The device memory's parts, in order: chunks | tensors | grad_tab |
 * param_tab | gowner | norms | step | m | v | master. */
enum { OPT_CHUNKS, OPT_TENSORS, OPT_GRAD_TAB, OPT_PARAM_TAB, OPT_GOWNER, OPT_NORMS, OPT_STEP, OPT_M, OPT_V,
       OPT_MASTER, OPT_PARTS };

static void optim_device_sizes(const loom_optim_state_t *st, size_t sz[OPT_PARTS]) {
  const int T = st->T;
  const size_t state = (size_t)st->state_elems * sizeof(float);
  sz[OPT_CHUNKS] = (size_t)st->nchunks * sizeof(loom_optim_chunk_t);
  sz[OPT_TENSORS] = (size_t)T * sizeof(loom_optim_tensor_dev_t);
  sz[OPT_GRAD_TAB] = (size_t)T * st->k.nsrc * sizeof(char *);
  sz[OPT_PARAM_TAB] = (size_t)T * st->k.npush * sizeof(char *);
  sz[OPT_GOWNER] = (size_t)st->gchunks * sizeof(int32_t);
  sz[OPT_NORMS] = (size_t)T * 2 * sizeof(float);
  sz[OPT_STEP] = sizeof(int32_t);
  sz[OPT_M] = state;
  sz[OPT_V] = state;
  sz[OPT_MASTER] = st->desc.param_type != LOOM_FP32 ? state : 0;
}

/* Allocate: one cudaMalloc for every part (256-aligned), the host tables
 * uploaded, norms, step and the moments zeroed; *b, off[]: where. */
static loom_result_t optim_device_alloc(loom_comm_t comm, const char *fn, loom_optim_state_t *st,
                                        const optim_host_t *h, size_t off[OPT_PARTS]) {
  size_t sz[OPT_PARTS], o = 0;
  optim_device_sizes(st, sz);
  for (int i = 0; i < OPT_PARTS; ++i) {
    off[i] = o;
    o += loom__align256(sz[i] ? sz[i] : 1);
  }
  cudaError_t e = cudaMalloc(&st->dev, o);
  if (e != cudaSuccess)
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: cudaMalloc of %zu bytes (chunk table and optimizer state): %s", fn,
                      o, cudaGetErrorString(e));
  st->device_bytes = o;
  char *b = (char *)st->dev;
  const void *host[OPT_NORMS] = {h->chunks, h->tdev, h->grad_tab, h->param_tab, h->gowner};
  for (int i = 0; i < OPT_NORMS && e == cudaSuccess; ++i)
    if (sz[i]) e = cudaMemcpyAsync(b + off[i], host[i], sz[i], cudaMemcpyHostToDevice, comm->stream);
  /* norms, step and the moments start at zero */
  for (int i = OPT_NORMS; i < OPT_MASTER && e == cudaSuccess; ++i)
    e = cudaMemsetAsync(b + off[i], 0, sz[i] ? sz[i] : 1, comm->stream);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "uploading the optimizer's tables", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

/* The kernels' arguments: the plan's signal words and the device parts. */
static void optim_kargs(loom_comm_t comm, loom_plan_t plan, loom_optim_state_t *st, const size_t off[OPT_PARTS]) {
  const loom_optim_desc_t *desc = &st->desc;
  char *b = (char *)st->dev;
  loom_optim_kargs_t *k = &st->k;
  k->dc = loom__comm_dev(comm);
  k->epoch_off = plan->epoch_offset;
  k->ready_off = plan->signals_offset;
  k->done_off = k->ready_off + (size_t)st->world * sizeof(uint32_t);
  k->phase_off = k->done_off + (size_t)st->world * sizeof(uint32_t);
  k->nonfinite_off = k->phase_off + (size_t)st->world * sizeof(uint32_t);
  k->count_off = k->nonfinite_off + (size_t)st->world * sizeof(uint32_t);
  k->partial_off = plan->staging_offset;
  k->chunks = (const loom_optim_chunk_t *)(b + off[OPT_CHUNKS]);
  k->nchunks = st->nchunks;
  k->tensors = (const loom_optim_tensor_dev_t *)(b + off[OPT_TENSORS]);
  k->num_tensors = st->T;
  k->grad_ptrs = (char *const *)(b + off[OPT_GRAD_TAB]);
  k->param_ptrs = (char *const *)(b + off[OPT_PARAM_TAB]);
  k->gowner = (const int32_t *)(b + off[OPT_GOWNER]);
  k->norms = (float *)(b + off[OPT_NORMS]);
  k->step = (int32_t *)(b + off[OPT_STEP]);
  k->m = (float *)(b + off[OPT_M]);
  k->v = (float *)(b + off[OPT_V]);
  k->master = desc->param_type != LOOM_FP32 ? (float *)(b + off[OPT_MASTER]) : NULL;
  k->handshake = !st->local;
  k->ptype = (int32_t)desc->param_type;
  k->gtype = (int32_t)desc->grad_type;
  k->lr = desc->lr, k->beta1 = desc->beta1, k->beta2 = desc->beta2, k->eps = desc->eps;
  k->grad_div = desc->average_grads ? (float)st->world : 1.0f;
  k->decoupled = desc->decoupled_weight_decay;
  k->bias_correction = desc->bias_correction;
  k->use_nvlamb = desc->use_nvlamb;
}

/* Preload: the master weights (this rank's part of every tensor, read now),
 * the grid, the kernels. */
static loom_result_t optim_preload(loom_comm_t comm, loom_optim_state_t *st) {
  const loom_optim_kargs_t *k = &st->k;
  loom_result_t r = LOOM_SUCCESS;
  if (k->master)
    for (int t = 0; t < st->T && r == LOOM_SUCCESS; ++t) {
      int64_t lo, hi;
      loom__optim_rank_range(st->numel[t], sched_world(st), sched_rank(st), st->ar[t], &lo, &hi);
      r = loom__optim_load_master(k->master + st->state_off[t],
                                  (const char *)st->params[t] + (size_t)lo * loom_dtype_size(st->desc.param_type),
                                  hi - lo, (int)st->desc.param_type, comm->stream);
    }
  LOOM_TRY(r);
  cudaError_t e = cudaStreamSynchronize(comm->stream);
  if (e != cudaSuccess) return loom__cuda_fail((int)e, "initialising the optimizer state", __FILE__, __LINE__);
  const int64_t cap = (int64_t)comm->sm_count * LOOM_OPTIM_BLOCKS_PER_SM;
  const int64_t g = st->nchunks < cap ? st->nchunks : cap;
  st->grid = g < 1 ? 1 : (int)g;
  return loom__optim_preload_kernels();
}

/* ---- the ops (core/op.h) ---------------------------------------------------- */

static int op_lamb(const loom_op_t *op) { return op->kind & 1; }
static int op_local(const loom_op_t *op) { return (op->kind >> 1) & 1; }

/* The description, and (distributed) one NVLink domain. */
static loom_result_t optim_check(const loom_op_t *op, loom_comm_t comm, const void *desc) {
  LOOM_TRY(loom__optim_check_desc(op->plan_fn, comm->size, (const loom_optim_desc_t *)desc));
  if (!op_local(op) && !comm->ws_all_reachable && !comm->detached)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "%s: every rank must be load/store reachable (one NVLink domain): peers' gradients are read "
                      "and their parameters written through NVLink",
                      op->plan_fn);
  return LOOM_SUCCESS;
}

/* The state's own copy of the tensors, which are AR-Opt; every rank's own
 * checks of its tensors' memory and the peers' addresses (host tables). */
static loom_result_t optim_resolve(const loom_op_t *op, loom_comm_t comm, const void *desc, void *state) {
  loom_optim_state_t *st = (loom_optim_state_t *)state;
  const loom_optim_desc_t *d = (const loom_optim_desc_t *)desc;
  st->lamb = op_lamb(op), st->local = op_local(op), st->desc = *d;
  st->rank = comm->rank, st->world = comm->size, st->T = d->num_tensors;
  st->host = (optim_host_t *)calloc(1, sizeof *st->host);
  if (!st->host) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "%s: host allocation failed", op->plan_fn);
  LOOM_TRY(optim_copy(st, op->plan_fn, d, st->host));
  st->where = LOOM_FNV64_INIT;
  optim_host_t *h = st->host;
  return tensor_tables(comm, op->plan_fn, st, h->grad_tab, h->param_tab, h->vec, &st->where);
}

/* Signals ready, done, phase, nonfinite [W] each, count [2]; LAMB's partials. */
static loom_result_t optim_lay_out(const loom_op_t *op, loom_comm_t comm, void *state, loom_plan_layout_t *lay) {
  loom_optim_state_t *st = (loom_optim_state_t *)state;
  LOOM_TRY(optim_layout(op->plan_fn, st, st->host));
  lay->nsignals = (uint32_t)(4 * st->world + 2);
  lay->staging_bytes = st->lamb ? (size_t)st->gchunks * 2 * sizeof(float) : 0;
  lay->fingerprint = optim_fingerprint(st);
  return LOOM_SUCCESS;
}

/* Everything after the agreement: device memory, arguments, preload. */
static loom_result_t optim_fill(loom_plan_t plan, void *state) {
  loom_optim_state_t *st = (loom_optim_state_t *)state;
  loom_comm_t comm = plan->comm;
  if (comm->detached) return loom__plan_detached(plan->op->plan_fn); /* host tests stop here */
  size_t off[OPT_PARTS];
  LOOM_TRY(optim_device_alloc(comm, plan->op->plan_fn, st, st->host, off));
  optim_host_free(st->host);
  st->host = NULL;
  optim_kargs(comm, plan, st, off);
  return optim_preload(comm, st);
}

static void optim_release(loom_comm_t comm, void *state) {
  loom_optim_state_t *st = (loom_optim_state_t *)state;
  optim_host_free(st->host);
  if (st->dev) (void)cudaFree(st->dev);
  free(st->numel), free(st->ar), free(st->params), free(st->grads), free(st->wd), free(st->state_off);
}

static void optim_describe(loom_plan_t plan, const void *state) {
  const loom_optim_state_t *st = (const loom_optim_state_t *)state;
  LOOM_INFO("%s: %d tensors (%d AR-Opt), W=%d%s, chunk %lld: %lld chunks here, %lld global, %lld state elements, grid %d",
            plan->op->plan_fn, st->T, st->nar, st->world, st->local ? " (local)" : "", (long long)st->chunk,
            (long long)st->nchunks, (long long)st->gchunks, (long long)st->state_elems, st->grid);
}

/* kind: bit 0 LAMB, bit 1 local (no communication) */
#define OPTIM_OP(name_, plan_fn_, kind_)                                                                             \
  {                                                                                                                  \
    .name = name_, .plan_fn = plan_fn_, .family = &optim_family, .kind = kind_,                                      \
    .state_bytes = sizeof(loom_optim_state_t),                                                                       \
    .differ = "the same tensors (numels, dtypes, hyperparameters) must be given on every rank, each gradient (and "  \
              "each RS-Opt-AG parameter) at the same offset of the same loom_malloc allocation (allocate in the "     \
              "same order on every rank)",                                                                           \
    .check = optim_check, .resolve = optim_resolve, .lay_out = optim_lay_out, .fill = optim_fill,                    \
    .release = optim_release, .describe = optim_describe                                                             \
  }
static const loom_op_t optim_ops[4] = {OPTIM_OP("adam", "loom_plan_adam", 0), OPTIM_OP("lamb", "loom_plan_lamb", 1),
                                       OPTIM_OP("adam", "loom_plan_adam (update only)", 2),
                                       OPTIM_OP("lamb", "loom_plan_lamb (update only)", 3)};

loom_result_t loom__optim_plan(loom_comm_t comm, const loom_optim_desc_t *desc, int lamb, loom_plan_t *out) {
  return loom__plan_make(comm, &optim_ops[lamb ? 1 : 0], desc, out);
}

loom_result_t loom__optim_update_plan(loom_comm_t comm, const loom_optim_desc_t *desc, int lamb, loom_plan_t *out) {
  return loom__plan_make(comm, &optim_ops[lamb ? 3 : 2], desc, out);
}

loom_result_t loom_optim_plan_info(loom_plan_t plan, loom_optim_plan_info_t *info) {
  loom_optim_state_t *st;
  LOOM_TRY(loom__optim_state(plan, "loom_optim_plan_info", -1, &st));
  if (!info) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_optim_plan_info: info=NULL");
  if (info->struct_size != sizeof *info)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_optim_plan_info: info->struct_size=%zu, expected %zu (initialise with "
                      "LOOM_OPTIM_PLAN_INFO_INIT)",
                      info->struct_size, sizeof *info);
  info->num_tensors = st->T;
  info->num_ar_tensors = st->nar;
  info->chunk_elems = st->chunk;
  info->chunks = st->nchunks;
  info->global_chunks = st->gchunks;
  info->state_elems = st->state_elems;
  info->exp_avg = st->k.m;
  info->exp_avg_sq = st->k.v;
  info->master = st->k.master;
  info->step = st->k.step;
  info->kernels_per_step = st->lamb ? 3 : 1;
  info->device_bytes = st->device_bytes;
  info->workspace_bytes = plan->ws_bytes;
  return LOOM_SUCCESS;
}

loom_result_t loom_optim_tensor_state(loom_plan_t plan, int tensor, int64_t *lo, int64_t *hi, int64_t *state_offset) {
  const char *fn = "loom_optim_tensor_state";
  loom_optim_state_t *st;
  LOOM_TRY(loom__optim_state(plan, fn, -1, &st));
  if (tensor < 0 || tensor >= st->T)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: tensor=%d is not in [0, %d)", fn, tensor, st->T);
  if (!lo || !hi || !state_offset)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: lo=%p, hi=%p, state_offset=%p: none may be NULL", fn, (void *)lo,
                      (void *)hi, (void *)state_offset);
  loom__optim_rank_range(st->numel[tensor], st->local ? 1 : st->world, st->local ? 0 : st->rank, st->ar[tensor], lo, hi);
  *state_offset = st->state_off[tensor];
  return LOOM_SUCCESS;
}

loom_result_t loom_optim_set_step(loom_plan_t plan, int32_t step, cudaStream_t stream) {
  const char *fn = "loom_optim_set_step";
  loom_optim_state_t *st;
  LOOM_TRY(loom__optim_state(plan, fn, -1, &st));
  if (step < 0) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: step=%d must be >= 0", fn, (int)step);
  return loom__optim_write_step(st->k.step, step, stream);
}

/* The kernel argument of one call (args: the call's, may be NULL). */
static loom_result_t optim_call_args(loom_optim_state_t *st, const char *fn, const loom_optim_args_t *args,
                                     loom_optim_kargs_t *k) {
  *k = st->k;
  k->lr_ptr = NULL, k->grad_scale = NULL, k->found_inf = NULL, k->nonfinite = NULL;
  if (!args) return LOOM_SUCCESS;
  if (args->struct_size != sizeof *args)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: args->struct_size=%zu, expected %zu (initialise with LOOM_OPTIM_ARGS_INIT)", fn,
                      args->struct_size, sizeof *args);
  if (args->lr) LOOM_TRY(loom__check_device_ptr(fn, "args->lr", args->lr, sizeof(float)));
  if (args->grad_scale) LOOM_TRY(loom__check_device_ptr(fn, "args->grad_scale", args->grad_scale, sizeof(float)));
  if (args->found_inf) LOOM_TRY(loom__check_device_ptr(fn, "args->found_inf", args->found_inf, sizeof(float)));
  if (args->grad_nonfinite)
    LOOM_TRY(loom__check_device_ptr(fn, "args->grad_nonfinite", args->grad_nonfinite, sizeof(int)));
  k->lr_ptr = args->lr;
  k->grad_scale = args->grad_scale;
  k->found_inf = args->found_inf;
  k->nonfinite = args->grad_nonfinite;
  return LOOM_SUCCESS;
}

loom_result_t loom__optim_step(loom_plan_t plan, const char *fn, int lamb, const loom_optim_args_t *args,
                               cudaStream_t stream) {
  loom_optim_state_t *st;
  LOOM_TRY(loom__call_enter(plan, fn, &optim_family, NULL, stream, (void **)&st));
  LOOM_TRY(optim_kind(plan, fn, lamb, st));
  loom_optim_kargs_t k;
  LOOM_TRY(optim_call_args(st, fn, args, &k));
  (void)loom__plan_next_epoch(plan);
  LOOM_TRY(lamb ? loom__optim_lamb_launch(&k, st->grid, stream) : loom__optim_adam_launch(&k, st->grid, stream));
  return loom__call_exit(plan, stream, NULL);
}
