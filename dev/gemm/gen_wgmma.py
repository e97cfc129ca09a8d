#!/usr/bin/env python3
"""gen_wgmma.py - writes src/gemm/sm90_wgmma.cuh: one inline-PTX wrapper per
wgmma shape (m64nNk16, N in 64/128/192/224/256) and input type (bf16, f16), fp32
accumulators, A and B from shared memory (descriptors), B's transpose bit a
template constant. The N/2 accumulator operands are too many to write by hand.
Run: python3 dev/gemm/gen_wgmma.py > src/gemm/sm90_wgmma.cuh
"""
import sys

out = []
w = out.append
w("""/*
 * sm90_wgmma.cuh - inline-PTX wrappers of wgmma.mma_async (sm_90a), generated
 * by dev/gemm/gen_wgmma.py (do not edit by hand).
 *
 *   loom_wgmma_m64n{N}k16_{t}<TB>(d, desc_a, desc_b, scale_d)
 *     d [N/2] fp32 accumulators of this thread (64 x N tile of the warpgroup),
 *     desc_a / desc_b shared-memory matrix descriptors (A K-major; B K-major
 *     when TB = 0, MN-major when TB = 1), scale_d 0: D = A B, 1: D += A B.
 * Only for sm_90a: callers guard with LOOM_SM90A.
 */
#ifndef LOOM_GEMM_SM90_WGMMA_CUH
#define LOOM_GEMM_SM90_WGMMA_CUH

#include <stdint.h>
""")
for n in (64, 128, 192, 224, 256):
    nreg = n // 2
    for t, ptx in (("bf16", "bf16"), ("f16", "f16")):
        regs = ", ".join("%%%d" % i for i in range(nreg))
        w("template <int TB>")
        w("static __device__ __forceinline__ void loom_wgmma_m64n%dk16_%s(float *d, uint64_t desc_a, uint64_t desc_b, int scale_d) {" % (n, t))
        w("  asm volatile(")
        w('      "{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"' % (nreg + 2))
        w('      "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s "' % (n, ptx, ptx))
        # split the register list over lines
        parts = ["%%%d" % i for i in range(nreg)]
        lines = [", ".join(parts[i:i + 16]) for i in range(0, nreg, 16)]
        w('      "{"')
        for j, l in enumerate(lines):
            w('      "%s%s"' % (l, ", " if j + 1 < len(lines) else ""))
        w('      "}, %%%d, %%%d, p, 1, 1, 0, %%%d;\\n}\\n"' % (nreg, nreg + 1, nreg + 3))
        outs = ", ".join('"+f"(d[%d])' % i for i in range(nreg))
        # wrap outputs 8 per line
        ol = ['"+f"(d[%d])' % i for i in range(nreg)]
        w("      : " + ",\n        ".join(", ".join(ol[i:i + 8]) for i in range(0, nreg, 8)))
        w('      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));')
        w("}")
        w("")
w("#endif /* LOOM_GEMM_SM90_WGMMA_CUH */")
sys.stdout.write("\n".join(out) + "\n")
