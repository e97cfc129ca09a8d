/*
 * vector.h - the vector width of the op families' element loops: element
 * loops move LOOM_COLL_VEC elements per access (16 bytes of a 16-bit type,
 * two 16-byte accesses of fp32) where the position and the buffers allow.
 * The collectives cut flat vectors into units of this many elements
 * (ops/coll/coll_schedule.h), and the device building blocks
 * (coll_device.cuh) vectorise by it.
 */
#ifndef LOOM_OPS_COMMON_VECTOR_H
#define LOOM_OPS_COMMON_VECTOR_H

#define LOOM_COLL_VEC 8 /* elements per vector access */

#endif /* LOOM_OPS_COMMON_VECTOR_H */
