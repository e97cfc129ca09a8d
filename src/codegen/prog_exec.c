/*
 * prog_exec.c - loom_prog_run: one call of a compiled program on the
 * caller's stream, and a timeout named by its stage.
 *
 * A call: the door's entry; the buffers checked (each input and output this
 * rank holds: reachable memory with every byte of its piece; no output
 * overlapping another buffer); the inputs peers read copied into the arena;
 * each unit this rank runs, in the program's order (a GEMM, or a generated
 * kernel of the unit's grid, its epoch advancing on the device); the
 * outputs that are inputs copied; the door's exit. Everything is
 * stream-ordered and capturable: replays of a captured call are new calls.
 *
 * Timeouts. A generated kernel's wait that expires records its site (the
 * arrived, ready, done or blocks' wait) and the word it waited on, which
 * lies in this plan's slice of the workspace: the next call of the plan
 * returns LOOM_ERR_TIMEOUT with the core's message and the stage, the unit
 * and the rank it waited for.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "codegen/prog.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/plan.h"
#include "core/ptr_check.h"
#include "core/util.h"

/* Appends the stage of the expired wait to the failure's message, where it was one of this plan's. */
static void name_stage(loom_plan_t plan, const loom_cg_state_t *st) {
  const volatile loom_error_record_t *rec = plan->comm->err_host;
  if (!rec || !rec->valid || rec->site < LOOM_SITE_CG_ARRIVED || rec->site > LOOM_SITE_CG_BLOCKS) return;
  const uint32_t w0 = (uint32_t)(plan->signals_offset / 4), w = rec->signal;
  if (w < w0 || w >= w0 + plan->nsignals) return;
  for (int u = 0; u < st->lw.nunit; ++u) {
    const loom_cg_unit_rt_t *x = &st->units[u];
    if (!x->words || w - w0 < x->word0 || w - w0 >= x->word0 + x->words) continue;
    const uint32_t slot = w - w0 - x->word0 - LOOM_CG_WORDS0;
    char what[32];
    if (slot == 0) snprintf(what, sizeof what, "arrived");
    else if (slot == 1) snprintf(what, sizeof what, "done");
    else snprintf(what, sizeof what, "ready[%u]", slot - 2);
    loom__fail_append(" (in stage `%s` of program %s: its unit %s waited for the %s signal of rank %d)",
                      st->lw.units[u].stage, st->prog->name, st->lw.units[u].name, what, (int)rec->peer);
    return;
  }
}

/* An input or output of this rank: NULL allowed where it holds none (or an empty piece). */
static loom_result_t check_one(const char *fn, loom_comm_t comm, const loom_cg_state_t *st, int output, int i,
                               const void *p) {
  const loom__lw_prog_t *lw = &st->lw;
  const int node = output ? lw->out_node[i] : lw->in_node[i];
  const loom__lw_buf_t *b = &lw->bufs[lw->buf_of[node]];
  if (!loom__lw_holds(lw, b, st->rank)) return LOOM_SUCCESS;
  const int64_t n = loom__lw_piece_count(&b->geom, st->q);
  if (n == 0 && !p) return LOOM_SUCCESS;
  char name[96];
  snprintf(name, sizeof name, "%s[%d] (`%s`)", output ? "outputs" : "inputs", i,
           output ? lw->out_name[i] : st->prog->nodes[node].name);
  const loom_buf_t buf = {name, p, (size_t)n * loom_dtype_size((loom_dtype_t)b->dtype), 0u, NULL};
  return loom__check_buf(fn, comm, &buf);
}

/* This rank's bytes of input / output i. */
static size_t io_bytes(const loom_cg_state_t *st, int output, int i) {
  const loom__lw_prog_t *lw = &st->lw;
  const loom__lw_buf_t *b = &lw->bufs[lw->buf_of[output ? lw->out_node[i] : lw->in_node[i]]];
  if (!loom__lw_holds(lw, b, st->rank)) return 0;
  return (size_t)loom__lw_piece_count(&b->geom, st->q) * loom_dtype_size((loom_dtype_t)b->dtype);
}

static loom_result_t check_call(const char *fn, loom_comm_t comm, const loom_cg_state_t *st, const void *const *in,
                                void *const *out) {
  const int ni = st->lw.ninputs, no = st->lw.noutputs;
  if (ni && !in) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: inputs=NULL; the program has %d inputs", fn, ni);
  if (no && !out) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: outputs=NULL; the program has %d outputs", fn, no);
  for (int i = 0; i < ni; ++i) LOOM_TRY(check_one(fn, comm, st, 0, i, in[i]));
  for (int j = 0; j < no; ++j) LOOM_TRY(check_one(fn, comm, st, 1, j, out[j]));
  for (int j = 0; j < no; ++j) {
    const size_t bj = io_bytes(st, 1, j);
    for (int i = 0; i < ni && bj; ++i)
      if (in[i] && loom__ranges_overlap(out[j], bj, in[i], io_bytes(st, 0, i)))
        return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: outputs[%d]=%p overlaps inputs[%d]=%p (peers and later "
                          "stages may still read the input)", fn, j, out[j], i, in[i]);
    for (int k = j + 1; k < no && bj; ++k)
      if (out[k] && loom__ranges_overlap(out[j], bj, out[k], io_bytes(st, 1, k)))
        return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: outputs[%d]=%p overlaps outputs[%d]=%p", fn, j, out[j], k,
                          out[k]);
  }
  return LOOM_SUCCESS;
}

static loom_result_t launch(loom_plan_t plan, const loom_cg_state_t *st, int u, const void *const *in,
                            void *const *out, cudaStream_t stream) {
  const loom_cg_unit_rt_t *x = &st->units[u];
  loom_cg_args_t a;
  memset(&a, 0, sizeof a);
  a.dc = loom__comm_dev(plan->comm);
  a.sig_off = plan->signals_offset + 4u * x->word0;
  for (int p = 0; p < st->lw.R; ++p) a.arena[p] = st->arena_peer[p];
  for (int i = 0; i < st->lw.ninputs; ++i) a.ptr[i] = (void *)in[i];
  for (int j = 0; j < st->lw.noutputs; ++j) a.ptr[st->lw.ninputs + j] = out[j];
  a.vec = 1;
  for (int i = 0; i < st->lw.ninputs + st->lw.noutputs; ++i) a.vec &= (uintptr_t)a.ptr[i] % 16 == 0;
  void *args[] = {&a};
  const dim3 grid = {(unsigned)x->blocks, 1, 1}, block = {LOOM_CG_THREADS, 1, 1};
  LOOM_CUDA(cudaLaunchKernel(x->func, grid, block, args, 0, stream));
  return LOOM_SUCCESS;
}

/* The inputs peers read, into the arena; then, after the units, the outputs that are inputs. */
static loom_result_t copy_inputs(const loom_cg_state_t *st, const void *const *in, void *const *out, int after,
                                 cudaStream_t stream) {
  for (int b = 0; b < st->lw.nbuf; ++b) {
    const loom__lw_buf_t *x = &st->lw.bufs[b];
    const size_t bytes = x->input >= 0 ? io_bytes(st, 0, x->input) : 0;
    if (!(x->store & LOOM__LWB_INPUT) || !bytes) continue;
    if (!after && (x->store & LOOM__LWB_ARENA))
      LOOM_CUDA(
          cudaMemcpyAsync((char *)st->arena + x->arena_off, in[x->input], bytes, cudaMemcpyDeviceToDevice, stream));
    for (int k = 0; after && k < x->noutput; ++k)
      LOOM_CUDA(cudaMemcpyAsync(out[x->output[k]], in[x->input], bytes, cudaMemcpyDeviceToDevice, stream));
  }
  return LOOM_SUCCESS;
}

/* The units in order; with `ev` (lw.nunit + 1 events), an event before each and after the last. */
static loom_result_t run_units(loom_plan_t plan, loom_cg_state_t *st, const void *const *in, void *const *out,
                               cudaStream_t stream, cudaEvent_t *ev) {
  LOOM_TRY(copy_inputs(st, in, out, 0, stream));
  for (int u = 0; u < st->lw.nunit; ++u) {
    if (ev) LOOM_CUDA(cudaEventRecord(ev[u], stream));
    if (!st->units[u].runs) continue;
    const int kind = st->lw.units[u].kind;
    if (kind == LOOM__LU_GEMM) LOOM_TRY(loom__cg_gemm_run(plan, st, u, in, out, stream));
    else if (kind == LOOM__LU_COLL) LOOM_TRY(loom__cg_coll_run(plan, st, u, in, out, stream));
    else LOOM_TRY(launch(plan, st, u, in, out, stream));
  }
  if (ev) LOOM_CUDA(cudaEventRecord(ev[st->lw.nunit], stream));
  return copy_inputs(st, in, out, 1, stream);
}

/* The call: entry (a timeout named by its stage), checks, the units, exit. */
static loom_result_t execute(loom_plan_t plan, const void *const *in, void *const *out, cudaStream_t stream,
                             cudaEvent_t *ev) {
  const char *fn = "loom_prog_run";
  loom_cg_state_t *st = NULL;
  LOOM_TRY(loom__plan_state(plan, fn, NULL, &loom__op_prog, (void **)&st));
  loom_result_t r = loom__call_enter(plan, fn, NULL, &loom__op_prog, stream, (void **)&st);
  if (r == LOOM_ERR_TIMEOUT) name_stage(plan, st);
  if (r != LOOM_SUCCESS) return r;
  LOOM_TRY(check_call(fn, plan->comm, st, in, out));
  (void)loom__plan_next_epoch(plan);
  LOOM_TRY(run_units(plan, st, in, out, stream, ev));
  return loom__call_exit(plan, stream, NULL);
}

loom_result_t loom_prog_run(loom_plan_t plan, const void *const *inputs, void *const *outputs, cudaStream_t stream) {
  return execute(plan, inputs, outputs, stream, NULL);
}

loom_result_t loom__cg_execute_timed(loom_plan_t plan, const void *const *inputs, void *const *outputs,
                                     cudaStream_t stream, float *ms, int cap) {
  loom_cg_state_t *st = NULL;
  LOOM_TRY(loom__plan_state(plan, "loom_prog_run", NULL, &loom__op_prog, (void **)&st));
  const int n = st->lw.nunit;
  if (cap < n) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom__cg_execute_timed: room for %d of %d units", cap, n);
  cudaEvent_t ev[257];
  if (n + 1 > 257) return loom__fail(LOOM_ERR_UNSUPPORTED, "loom__cg_execute_timed: %d units; at most 256", n);
  int made = 0;
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i <= n && r == LOOM_SUCCESS; ++i)
    if (cudaEventCreate(&ev[i]) != cudaSuccess) r = loom__fail(LOOM_ERR_CUDA, "cudaEventCreate");
    else made++;
  if (r == LOOM_SUCCESS) r = execute(plan, inputs, outputs, stream, ev);
  if (r == LOOM_SUCCESS && cudaEventSynchronize(ev[n]) != cudaSuccess)
    r = loom__fail(LOOM_ERR_CUDA, "cudaEventSynchronize");
  for (int u = 0; u < n && r == LOOM_SUCCESS; ++u)
    if (cudaEventElapsedTime(&ms[u], ev[u], ev[u + 1]) != cudaSuccess)
      r = loom__fail(LOOM_ERR_CUDA, "cudaEventElapsedTime");
  for (int i = 0; i < made; ++i) (void)cudaEventDestroy(ev[i]);
  return r;
}
