#!/usr/bin/env python3
"""gen_wgmma.py - writes src/gemm/sm90_wgmma.cuh: one inline-PTX wrapper per
wgmma shape (m64nNk16, N in 64/128/192/224/256) and input type (bf16, f16), fp32
accumulators, A and B from shared memory (descriptors), B's transpose bit a
template constant. The N/2 accumulator operands are too many to write by hand:
this writes their register lists and operand lists once, in pieces of 16 and
8, and one macro that defines a wrapper from its N's pieces.
Run: python3 dev/gemm/gen_wgmma.py > src/gemm/sm90_wgmma.cuh
"""
import sys

SHAPES = (64, 128, 192, 224, 256)
out = []
w = out.append
w("""/*
 * sm90_wgmma.cuh - inline-PTX wrappers of wgmma.mma_async (sm_90a), generated
 * by dev/gemm/gen_wgmma.py (do not edit by hand).
 *
 *   loom__wgmma_m64n{N}k16_{t}<TB>(d, desc_a, desc_b, scale_d)
 *     N in 64, 128, 192, 224, 256; t: bf16 or f16;
 *     d [N/2] fp32 accumulators of this thread (64 x N tile of the warpgroup),
 *     desc_a / desc_b shared-memory matrix descriptors (A K-major; B K-major
 *     when TB = 0, MN-major when TB = 1), scale_d 0: D = A B, 1: D += A B.
 * Operands: %0 .. %(N/2 - 1) the accumulators, then desc_a, desc_b, scale_d
 * (the predicate's source) and TB. Only for sm_90a: callers guard with
 * LOOM_SM90A.
 */
#ifndef LOOM_GEMM_SM90_WGMMA_CUH
#define LOOM_GEMM_SM90_WGMMA_CUH

#include <stdint.h>

/* the accumulators' register names, 16 at a time */""")
for g in range(max(SHAPES) // 2 // 16):
    w('#define LOOM_WG_R%d "%s"' % (g, ", ".join("%%%d" % i for i in range(16 * g, 16 * g + 16))))
w("")
w("/* their output operands, 8 at a time */")
w("#define LOOM_WG_D8(i) " + ", ".join('"+f"(d[(i) + %d])' % k for k in range(8)))
w("")
w("/* per N: the register list, the operands, the predicate's operand and the rest */")
for n in SHAPES:
    nreg = n // 2
    w('#define LOOM_WG_REGS_%d %s' % (n, ' ", " '.join("LOOM_WG_R%d" % g for g in range(nreg // 16))))
    w('#define LOOM_WG_OUTS_%d %s' % (n, ", ".join("LOOM_WG_D8(%d)" % i for i in range(0, nreg, 8))))
    w('#define LOOM_WG_SETP_%d "%%%d"' % (n, nreg + 2))
    w('#define LOOM_WG_TAIL_%d "%%%d, %%%d, p, 1, 1, 0, %%%d"' % (n, nreg, nreg + 1, nreg + 3))
w("""
#define LOOM_WGMMA_DEF(N, T)                                                                          \\
  template <int TB>                                                                                   \\
  static __device__ __forceinline__ void loom__wgmma_m64n##N##k16_##T(float *d, uint64_t desc_a,      \\
                                                                      uint64_t desc_b, int scale_d) { \\
    asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, " LOOM_WG_SETP_##N ", 0;\\n"                        \\
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #T "." #T " "                      \\
                 "{" LOOM_WG_REGS_##N "}, " LOOM_WG_TAIL_##N ";\\n}\\n"                                  \\
                 : LOOM_WG_OUTS_##N                                                                   \\
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));                                  \\
  }
""")
for n in SHAPES:
    w("LOOM_WGMMA_DEF(%d, bf16)" % n)
    w("LOOM_WGMMA_DEF(%d, f16)" % n)
w("")
w("#endif /* LOOM_GEMM_SM90_WGMMA_CUH */")
sys.stdout.write("\n".join(out) + "\n")
