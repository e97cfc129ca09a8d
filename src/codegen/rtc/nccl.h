/* nccl.h for NVRTC: the one NCCL type loom.h's declarations name. */
#ifndef LOOM_RTC_NCCL_H
#define LOOM_RTC_NCCL_H
typedef struct ncclComm *ncclComm_t;
#endif /* LOOM_RTC_NCCL_H */
