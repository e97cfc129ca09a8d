/*
 * proto_ops.c - the language's table of the hand-written ops' protocols
 * (lang_proto.h): each op id built by its family's builder
 * (src/ops/<family>/<family>_protocol.c, where each protocol and why it is
 * what its kernels run are written), at the sizes the checker explores:
 * one block per rank; the collectives over W elements (an element per
 * rank's slice, chunks of one; PUSH in one chunk); the MoE op one unfused cycle of two combines (its
 * forms: tests/host/moe/test_moe_protocol.c).
 */
#include <stdio.h>

#include "lang/lang_proto.h"
#include "ops/coll/coll_protocol.h"
#include "ops/embedding/embedding_protocol.h"
#include "ops/moe/moe_protocol.h"
#include "ops/optim/optim_protocol.h"
#include "ops/tp/tp_protocol.h"

const char *loom__proto_op_name(int op) {
  static const char *names[] = {"allreduce_one_shot", "allreduce_two_shot", "reduce_scatter", "all_gather",
                                "gemm_rs", "gemm_ar", "ag_gemm", "optim_adam", "optim_lamb",
                                "allreduce_one_shot_ip", "allreduce_two_shot_ip", "reduce_scatter_ip",
                                "all_gather_ip", "embedding_fwd", "embedding_bwd", "allreduce_ll",
                                "allreduce_push", "embedding_bwd_sorted", "gemm_rs_bulk", "moe", "reduce_scatter_ll",
                                "all_gather_ll"};
  return op >= 0 && op < LOOM__PROTO_OPS_COUNT ? names[op] : "?";
}

/* A collective of kernel kind `kind` at W ranks. */
static void loom__proto_coll(int kind, int in_place, int W, loom__proto_t *p) {
  const loom__coll_proto_t s = {kind, W, 1, W, 1, kind == LOOM__CK_PUSH ? W : 1, in_place, 4, 0};
  loom__coll_protocol(&s, p);
}

/* One MoE cycle, unfused, of two combines. */
static void loom__proto_moe(int W, loom__proto_t *p) {
  const loom__moe_cycle_t y = {2, {LOOM__MOE_FORM_UNFUSED}};
  loom__moe_protocol(W, 1, &y, 0, p);
}

void loom__proto_op(int op, int W, loom__proto_t *p) {
  switch (op) {
    case LOOM__PROTO_AR_ONE_SHOT: loom__proto_coll(LOOM__CK_ONE_SHOT, 0, W, p); break;
    case LOOM__PROTO_AR_TWO_SHOT: loom__proto_coll(LOOM__CK_TWO_SHOT, 0, W, p); break;
    case LOOM__PROTO_RS: loom__proto_coll(LOOM__CK_RS, 0, W, p); break;
    case LOOM__PROTO_AG: loom__proto_coll(LOOM__CK_AG, 0, W, p); break;
    case LOOM__PROTO_AR_ONE_SHOT_IP: loom__proto_coll(LOOM__CK_ONE_SHOT, 1, W, p); break;
    case LOOM__PROTO_AR_TWO_SHOT_IP: loom__proto_coll(LOOM__CK_TWO_SHOT, 1, W, p); break;
    case LOOM__PROTO_RS_IP: loom__proto_coll(LOOM__CK_RS, 1, W, p); break;
    case LOOM__PROTO_AG_IP: loom__proto_coll(LOOM__CK_AG, 1, W, p); break;
    case LOOM__PROTO_AR_LL: loom__proto_coll(LOOM__CK_LL, 0, W, p); break;
    case LOOM__PROTO_AR_PUSH: loom__proto_coll(LOOM__CK_PUSH, 0, W, p); break;
    case LOOM__PROTO_RS_LL: loom__proto_coll(LOOM__CK_LL_RS, 0, W, p); break;
    case LOOM__PROTO_AG_LL: loom__proto_coll(LOOM__CK_LL_AG, 0, W, p); break;
    case LOOM__PROTO_GEMM_RS: loom__tp_protocol(LOOM__TP_PROTO_GEMM_RS, W, p); break;
    case LOOM__PROTO_GEMM_AR: loom__tp_protocol(LOOM__TP_PROTO_GEMM_AR, W, p); break;
    case LOOM__PROTO_AG_GEMM: loom__tp_protocol(LOOM__TP_PROTO_AG_GEMM, W, p); break;
    case LOOM__PROTO_GEMM_RS_BULK: loom__tp_protocol(LOOM__TP_PROTO_GEMM_RS_BULK, W, p); break;
    case LOOM__PROTO_OPTIM_ADAM: loom__optim_protocol(0, W, p); break;
    case LOOM__PROTO_OPTIM_LAMB: loom__optim_protocol(1, W, p); break;
    case LOOM__PROTO_EMB_FWD: loom__emb_protocol(LOOM__EMB_PROTO_FWD, W, p); break;
    case LOOM__PROTO_EMB_BWD: loom__emb_protocol(LOOM__EMB_PROTO_BWD, W, p); break;
    case LOOM__PROTO_EMB_BWD_SORTED: loom__emb_protocol(LOOM__EMB_PROTO_BWD_SORTED, W, p); break;
    case LOOM__PROTO_MOE: loom__proto_moe(W, p); break;
    default: loom__proto_init(p, "?", W), p->overflow = 1; return;
  }
  snprintf(p->name, sizeof p->name, "%s", loom__proto_op_name(op));
}
