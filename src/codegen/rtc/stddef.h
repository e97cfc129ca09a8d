/* stddef.h for NVRTC: size_t is built in; NULL and offsetof. */
#ifndef LOOM_RTC_STDDEF_H
#define LOOM_RTC_STDDEF_H
#ifndef NULL
#define NULL 0
#endif
#define offsetof(t, m) __builtin_offsetof(t, m)
#endif /* LOOM_RTC_STDDEF_H */
