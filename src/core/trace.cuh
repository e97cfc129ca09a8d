/*
 * trace.cuh - a kernel's phase stamps (trace.h): thread 0 of the calling
 * block stores %globaltimer into stamp i of the words the op got from
 * loom__trace_stamps (NULL below LOOM_DEBUG=TRACE: nothing is stored).
 * What each index means is the op's table of names.
 */
#ifndef LOOM_CORE_TRACE_CUH
#define LOOM_CORE_TRACE_CUH

static __device__ __forceinline__ void loom__trace_stamp(unsigned long long *stamps, int i) {
  if (stamps && threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    stamps[i] = t;
  }
}

#endif /* LOOM_CORE_TRACE_CUH */
