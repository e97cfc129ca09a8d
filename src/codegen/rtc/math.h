/* math.h for NVRTC: the device math functions (sqrtf, tanhf, ...) are built in. */
#ifndef LOOM_RTC_MATH_H
#define LOOM_RTC_MATH_H
#endif /* LOOM_RTC_MATH_H */
