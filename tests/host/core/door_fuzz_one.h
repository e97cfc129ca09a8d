/*
 * door_fuzz_one.h - one input of the door's fuzzer (dev/door/fuzz.sh) and
 * of its kept corpus (test_door_fuzz_corpus.c): any bytes become a comm of
 * 1..64 ranks (detached: no GPU) and the description of one op, built field
 * by field from the bytes (counts and the arrays they size kept consistent,
 * as the API's contract asks of the caller; values anywhere, often at the
 * edges), and go through that op's public plan entry, the door's host part
 * (check; on a valid description resolve, lay out and the slice, where a
 * test comm stops). Errors are fine; a crash, a leak or undefined behaviour
 * (under the sanitizers) or a broken property is a finding.
 *
 * Properties: 1 the result is a loom_result_t; 2 a refusal's message
 * (LOOM_ERR_INVALID_ARGUMENT, LOOM_ERR_UNSUPPORTED) names the plan entry; 3 the same call again gives the same result and message
 * (the checks are a function of the arguments alone); 4 a plan made is
 * destroyed cleanly and leaves the comm's workspace as it was.
 * Returns 0, or the number of the property that broke.
 */
#ifndef LOOM_TESTS_DOOR_FUZZ_ONE_H
#define LOOM_TESTS_DOOR_FUZZ_ONE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "core/comm.h"
#include "testing/hooks.h"

/* The bytes, read front to back; past the end every read is 0. */
typedef struct {
  const uint8_t *p;
  size_t n, at;
} door_bytes_t;

static inline uint8_t door_u8(door_bytes_t *b) { return b->at < b->n ? b->p[b->at++] : 0; }

/* An integer at an edge most of the time: 0, 1, -1, small, a power of two,
 * a multiple of 8 or 64, huge, or raw bytes. */
static inline int64_t door_i64(door_bytes_t *b) {
  const uint8_t k = door_u8(b);
  const int64_t v = (int64_t)door_u8(b) | ((int64_t)door_u8(b) << 8);
  switch (k % 10) {
    case 0: return 0;
    case 1: return 1;
    case 2: return -1 - (v & 7);
    case 3: return v & 15;
    case 4: return (int64_t)1 << (v % 63);
    case 5: return 8 * v;
    case 6: return 64 * v;
    case 7: return ((int64_t)1 << 40) + v;
    case 8: return INT64_MAX - v;
    default: {
      int64_t r = 0;
      for (int i = 0; i < 8; ++i) r = (r << 8) | door_u8(b);
      return r;
    }
  }
}

static inline int door_i32(door_bytes_t *b) {
  const int64_t v = door_i64(b);
  return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int)v;
}

static inline float door_f32(door_bytes_t *b) {
  static const float f[8] = {0.0f, 1e-8f, 0.9f, 0.999f, 1.0f, -1.0f, 1e30f, 0.5f};
  const uint8_t k = door_u8(b);
  if (k < 200) return f[k % 8];
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u = (u << 8) | door_u8(b);
  float x;
  memcpy(&x, &u, sizeof x); /* NaN and inf too */
  return x;
}

/* struct_size: right most of the time. */
static inline size_t door_size(door_bytes_t *b, size_t right) { return door_u8(b) % 16 ? right : right + 8; }

/* Arrays an input owns (freed after the call). */
typedef struct {
  void *a[8];
  int n;
} door_owned_t;

static inline void *door_alloc(door_owned_t *o, size_t bytes) {
  void *p = o->n < 8 ? calloc(1, bytes ? bytes : 1) : NULL;
  if (p) o->a[o->n++] = p;
  return p;
}

/* One plan entry on the description built from b (kind: which op). */
static inline loom_result_t door_call(loom_comm_t c, int kind, door_bytes_t *b, door_owned_t *o, loom_plan_t *p,
                                      const char **fn) {
  const int W = c->size;
  switch (kind) {
    case 0: case 1: case 2: {
      loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
      d.struct_size = door_size(b, sizeof d);
      d.count = door_i64(b), d.dtype = (loom_dtype_t)(door_u8(b) % 5), d.out_type = (loom_dtype_t)(door_u8(b) % 5);
      d.cols = door_i64(b), d.norm = (loom_norm_t)(door_u8(b) % 4), d.norm_eps = door_f32(b);
      d.algo = (loom_coll_algo_t)(door_u8(b) % 6), d.world_size = door_u8(b) % 8 ? W : door_i32(b);
      d.blocks = door_i32(b);
      static const char *const names[3] = {"loom_plan_allreduce", "loom_plan_reduce_scatter", "loom_plan_all_gather"};
      *fn = names[kind];
      return kind == 0 ? loom_plan_allreduce(c, &d, p) : kind == 1 ? loom_plan_reduce_scatter(c, &d, p)
                                                                    : loom_plan_all_gather(c, &d, p);
    }
    case 3: case 4: case 5: {
      loom_tp_desc_t d = LOOM_TP_DESC_INIT;
      d.struct_size = door_size(b, sizeof d);
      d.m = door_i64(b), d.n = door_i64(b), d.k = door_i64(b);
      d.ab_type = (loom_dtype_t)(door_u8(b) % 5), d.c_type = (loom_dtype_t)(door_u8(b) % 5);
      d.b_layout = (loom_layout_t)(door_u8(b) % 3), d.has_bias = door_u8(b) % 3;
      d.activation = (loom_activation_t)(door_u8(b) % 6), d.world_size = door_u8(b) % 8 ? W : door_i32(b);
      d.transfer = (loom_tp_transfer_t)(door_u8(b) % 7), d.chunk_rows = door_i32(b), d.comm_blocks = door_i32(b);
      d.sequential_gemm = (loom_tp_gemm_t)(door_u8(b) % 4);
      static const char *const names[3] = {"loom_plan_ag_gemm", "loom_plan_gemm_rs", "loom_plan_gemm_ar"};
      *fn = names[kind - 3];
      return kind == 3 ? loom_plan_ag_gemm(c, &d, p) : kind == 4 ? loom_plan_gemm_rs(c, &d, p)
                                                                 : loom_plan_gemm_ar(c, &d, p);
    }
    case 6: case 7: {
      loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
      d.struct_size = door_size(b, sizeof d);
      d.world_size = door_u8(b) % 8 ? W : door_i32(b);
      const int T = door_u8(b) % 6; /* 0: refused (num_tensors) */
      d.num_tensors = door_u8(b) % 8 ? T : door_i32(b);
      const int arrays = d.num_tensors == T; /* the arrays as long as the count says */
      void **params = arrays ? (void **)door_alloc(o, (size_t)T * sizeof(void *)) : NULL;
      void **grads = arrays ? (void **)door_alloc(o, (size_t)T * sizeof(void *)) : NULL;
      int64_t *numels = arrays ? (int64_t *)door_alloc(o, (size_t)T * sizeof(int64_t)) : NULL;
      float *wds = arrays && door_u8(b) % 2 ? (float *)door_alloc(o, (size_t)T * sizeof(float)) : NULL;
      for (int t = 0; arrays && t < T && params && grads && numels; ++t) {
        params[t] = door_u8(b) % 4 ? (void *)(uintptr_t)(4096 * (1 + door_u8(b))) : NULL;
        grads[t] = door_u8(b) % 4 ? (void *)(uintptr_t)(8192 * (1 + door_u8(b))) : NULL;
        numels[t] = door_i64(b);
        if (wds) wds[t] = door_f32(b);
      }
      d.params = params, d.grads = grads, d.numels = numels, d.weight_decays = wds;
      d.param_type = (loom_dtype_t)(door_u8(b) % 5), d.grad_type = (loom_dtype_t)(door_u8(b) % 5);
      d.form = (loom_optim_form_t)(door_u8(b) % 4);
      d.lr = door_f32(b), d.beta1 = door_f32(b), d.beta2 = door_f32(b), d.eps = door_f32(b);
      d.weight_decay = door_f32(b);
      d.decoupled_weight_decay = door_u8(b) % 3, d.bias_correction = door_u8(b) % 3;
      d.average_grads = door_u8(b) % 3, d.use_nvlamb = door_u8(b) % 3, d.chunk_elems = door_i64(b);
      *fn = kind == 6 ? "loom_plan_adam" : "loom_plan_lamb";
      return kind == 6 ? loom_plan_adam(c, &d, p) : loom_plan_lamb(c, &d, p);
    }
    case 8: {
      loom_embedding_desc_t d = LOOM_EMBEDDING_DESC_INIT;
      d.struct_size = door_size(b, sizeof d);
      d.world_size = door_u8(b) % 8 ? W : door_i32(b);
      const int consistent = d.world_size == W;
      int *tpr = consistent ? (int *)door_alloc(o, (size_t)W * sizeof(int)) : NULL;
      int64_t total = 0;
      for (int r = 0; tpr && r < W; ++r) {
        tpr[r] = door_u8(b) % 5 ? door_u8(b) % 4 : door_i32(b);
        if (tpr[r] > 0) total += tpr[r];
      }
      int bad_count = 0;
      for (int r = 0; tpr && r < W; ++r) bad_count |= tpr[r] < 0 || tpr[r] > 64;
      int64_t *rows = tpr && !bad_count ? (int64_t *)door_alloc(o, (size_t)total * sizeof(int64_t)) : NULL;
      for (int64_t g = 0; rows && g < total; ++g) rows[g] = door_u8(b) % 8 ? 1 + door_u8(b) : door_i64(b);
      d.tables_per_rank = tpr, d.rows = rows;
      d.dim = door_i32(b), d.global_batch = door_i64(b), d.pooling = (loom_pooling_t)(door_u8(b) % 3);
      d.per_sample_weights = door_u8(b) % 3, d.table_type = (loom_dtype_t)(door_u8(b) % 5);
      d.out_type = (loom_dtype_t)(door_u8(b) % 5), d.slice_samples = door_i32(b), d.grid_blocks = door_i32(b);
      d.check_indices_sync = door_u8(b) % 3;
      if (tpr && bad_count) d.rows = NULL; /* rows' length is unknowable: let the check refuse the counts first */
      *fn = "loom_plan_embedding_a2a";
      if (tpr && bad_count) return loom_plan_embedding_a2a(c, &d, p);
      if (tpr && !rows && total > 0) return LOOM_ERR_OUT_OF_MEMORY; /* no input for the call: skip */
      return loom_plan_embedding_a2a(c, &d, p);
    }
    default: {
      loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
      d.struct_size = door_size(b, sizeof d);
      d.hidden = door_i32(b), d.experts = door_i32(b), d.topk = door_i32(b);
      d.max_tokens = door_i64(b), d.capacity = door_i64(b), d.dtype = (loom_dtype_t)(door_u8(b) % 5);
      d.ffn = door_i32(b), d.mlp_path = door_u8(b) % 6;
      *fn = "loom_plan_moe";
      return loom_plan_moe(c, &d, p);
    }
  }
}

static inline int door_known_result(loom_result_t r) {
  return r == LOOM_SUCCESS || r == LOOM_ERR_INVALID_ARGUMENT || r == LOOM_ERR_UNSUPPORTED ||
         r == LOOM_ERR_OUT_OF_MEMORY || r == LOOM_ERR_CUDA || r == LOOM_ERR_NCCL || r == LOOM_ERR_TIMEOUT ||
         r == LOOM_ERR_INTERNAL;
}

static inline int door_fuzz_one(const uint8_t *data, size_t n) {
  door_bytes_t b = {data, n, 0};
  const int kind = door_u8(&b) % 10;
  const int W = 1 + door_u8(&b) % 64;
  const int rank = door_u8(&b) % W;
  loom_comm_t c = NULL;
  if (loom__comm_create_detached(rank, W, (size_t)1 << 20, &c) != LOOM_SUCCESS) return 0;
  loom_comm_info_t before = LOOM_COMM_INFO_INIT, after = LOOM_COMM_INFO_INIT;
  (void)loom_comm_get_info(c, &before);
  int bad = 0;
  char first[1024] = "";
  loom_result_t r0 = LOOM_SUCCESS;
  for (int pass = 0; pass < 2 && !bad; ++pass) {
    door_bytes_t bb = b;
    door_owned_t o = {{0}, 0};
    loom_plan_t p = NULL;
    const char *fn = "";
    const loom_result_t r = door_call(c, kind, &bb, &o, &p, &fn);
    for (int i = 0; i < o.n; ++i) free(o.a[i]);
    if (!door_known_result(r)) bad = 1;
    else if ((r == LOOM_ERR_INVALID_ARGUMENT || r == LOOM_ERR_UNSUPPORTED) && !strstr(loom_last_error(), fn)) bad = 2;
    else if (pass == 0) r0 = r, snprintf(first, sizeof first, "%s", loom_last_error());
    else if (r != r0 || (r != LOOM_SUCCESS && strcmp(first, loom_last_error()) != 0)) bad = 3;
    if (p && loom_plan_destroy(p) != LOOM_SUCCESS) bad = 4;
  }
  (void)loom_comm_get_info(c, &after);
  if (!bad && after.workspace_free != before.workspace_free) bad = 4;
  (void)loom_comm_destroy(c);
  return bad;
}

#endif /* LOOM_TESTS_DOOR_FUZZ_ONE_H */
