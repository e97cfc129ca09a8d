/*
 * cg_device.cuh - what every generated kernel includes (the root of the
 * headers embedded for NVRTC: codegen/rtc.h): loom's signals with their
 * bounded waits, element access of every dtype, the pointwise epilogue's
 * dropout mask and the collectives' building blocks.
 */
#ifndef LOOM_CODEGEN_CG_DEVICE_CUH
#define LOOM_CODEGEN_CG_DEVICE_CUH

#include "core/pointwise.h"
#include "core/signal.cuh"
#include "core/vec8.cuh"
#include "ops/common/coll_device.cuh"

#endif /* LOOM_CODEGEN_CG_DEVICE_CUH */
