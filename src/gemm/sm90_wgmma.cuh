/*
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

/* the accumulators' register names, 16 at a time */
#define LOOM_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define LOOM_WG_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define LOOM_WG_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define LOOM_WG_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define LOOM_WG_R4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define LOOM_WG_R5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define LOOM_WG_R6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define LOOM_WG_R7 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

/* their output operands, 8 at a time */
#define LOOM_WG_D8(i) "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])

/* per N: the register list, the operands, the predicate's operand and the rest */
#define LOOM_WG_REGS_64 LOOM_WG_R0 ", " LOOM_WG_R1
#define LOOM_WG_OUTS_64 LOOM_WG_D8(0), LOOM_WG_D8(8), LOOM_WG_D8(16), LOOM_WG_D8(24)
#define LOOM_WG_SETP_64 "%34"
#define LOOM_WG_TAIL_64 "%32, %33, p, 1, 1, 0, %35"
#define LOOM_WG_REGS_128 LOOM_WG_R0 ", " LOOM_WG_R1 ", " LOOM_WG_R2 ", " LOOM_WG_R3
#define LOOM_WG_OUTS_128 LOOM_WG_D8(0), LOOM_WG_D8(8), LOOM_WG_D8(16), LOOM_WG_D8(24), LOOM_WG_D8(32), LOOM_WG_D8(40), LOOM_WG_D8(48), LOOM_WG_D8(56)
#define LOOM_WG_SETP_128 "%66"
#define LOOM_WG_TAIL_128 "%64, %65, p, 1, 1, 0, %67"
#define LOOM_WG_REGS_192 LOOM_WG_R0 ", " LOOM_WG_R1 ", " LOOM_WG_R2 ", " LOOM_WG_R3 ", " LOOM_WG_R4 ", " LOOM_WG_R5
#define LOOM_WG_OUTS_192 LOOM_WG_D8(0), LOOM_WG_D8(8), LOOM_WG_D8(16), LOOM_WG_D8(24), LOOM_WG_D8(32), LOOM_WG_D8(40), LOOM_WG_D8(48), LOOM_WG_D8(56), LOOM_WG_D8(64), LOOM_WG_D8(72), LOOM_WG_D8(80), LOOM_WG_D8(88)
#define LOOM_WG_SETP_192 "%98"
#define LOOM_WG_TAIL_192 "%96, %97, p, 1, 1, 0, %99"
#define LOOM_WG_REGS_224 LOOM_WG_R0 ", " LOOM_WG_R1 ", " LOOM_WG_R2 ", " LOOM_WG_R3 ", " LOOM_WG_R4 ", " LOOM_WG_R5 ", " LOOM_WG_R6
#define LOOM_WG_OUTS_224 LOOM_WG_D8(0), LOOM_WG_D8(8), LOOM_WG_D8(16), LOOM_WG_D8(24), LOOM_WG_D8(32), LOOM_WG_D8(40), LOOM_WG_D8(48), LOOM_WG_D8(56), LOOM_WG_D8(64), LOOM_WG_D8(72), LOOM_WG_D8(80), LOOM_WG_D8(88), LOOM_WG_D8(96), LOOM_WG_D8(104)
#define LOOM_WG_SETP_224 "%114"
#define LOOM_WG_TAIL_224 "%112, %113, p, 1, 1, 0, %115"
#define LOOM_WG_REGS_256 LOOM_WG_R0 ", " LOOM_WG_R1 ", " LOOM_WG_R2 ", " LOOM_WG_R3 ", " LOOM_WG_R4 ", " LOOM_WG_R5 ", " LOOM_WG_R6 ", " LOOM_WG_R7
#define LOOM_WG_OUTS_256 LOOM_WG_D8(0), LOOM_WG_D8(8), LOOM_WG_D8(16), LOOM_WG_D8(24), LOOM_WG_D8(32), LOOM_WG_D8(40), LOOM_WG_D8(48), LOOM_WG_D8(56), LOOM_WG_D8(64), LOOM_WG_D8(72), LOOM_WG_D8(80), LOOM_WG_D8(88), LOOM_WG_D8(96), LOOM_WG_D8(104), LOOM_WG_D8(112), LOOM_WG_D8(120)
#define LOOM_WG_SETP_256 "%130"
#define LOOM_WG_TAIL_256 "%128, %129, p, 1, 1, 0, %131"

#define LOOM_WGMMA_DEF(N, T)                                                                          \
  template <int TB>                                                                                   \
  static __device__ __forceinline__ void loom__wgmma_m64n##N##k16_##T(float *d, uint64_t desc_a,      \
                                                                      uint64_t desc_b, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " LOOM_WG_SETP_##N ", 0;\n"                        \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #T "." #T " "                      \
                 "{" LOOM_WG_REGS_##N "}, " LOOM_WG_TAIL_##N ";\n}\n"                                  \
                 : LOOM_WG_OUTS_##N                                                                   \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));                                  \
  }

LOOM_WGMMA_DEF(64, bf16)
LOOM_WGMMA_DEF(64, f16)
LOOM_WGMMA_DEF(128, bf16)
LOOM_WGMMA_DEF(128, f16)
LOOM_WGMMA_DEF(192, bf16)
LOOM_WGMMA_DEF(192, f16)
LOOM_WGMMA_DEF(224, bf16)
LOOM_WGMMA_DEF(224, f16)
LOOM_WGMMA_DEF(256, bf16)
LOOM_WGMMA_DEF(256, f16)

#endif /* LOOM_GEMM_SM90_WGMMA_CUH */
