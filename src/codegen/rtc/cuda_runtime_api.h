/* cuda_runtime_api.h for NVRTC: the one runtime type loom.h's declarations name. */
#ifndef LOOM_RTC_CUDA_RUNTIME_API_H
#define LOOM_RTC_CUDA_RUNTIME_API_H
typedef struct CUstream_st *cudaStream_t;
#endif /* LOOM_RTC_CUDA_RUNTIME_API_H */
