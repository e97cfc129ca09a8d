/*
 * stdint.h for NVRTC - the fixed-width integer types of the C library, for
 * the loom headers that generated kernels include (NVRTC has no C library
 * headers). Device code only; the sizes are CUDA's (LP64).
 */
#ifndef LOOM_RTC_STDINT_H
#define LOOM_RTC_STDINT_H
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long long intptr_t;
typedef unsigned long long uintptr_t;
#define INT32_MAX 2147483647
#define INT64_MAX 9223372036854775807LL
#define UINT32_MAX 4294967295U
#define UINT64_MAX 18446744073709551615ULL
#endif /* LOOM_RTC_STDINT_H */
