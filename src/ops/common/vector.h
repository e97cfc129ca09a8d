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

#include <stdint.h>

#include "core/util.h" /* LOOM_HD */

#define LOOM_COLL_VEC 8 /* elements per vector access */

/* fp32 vectors as two quads (4 elements, one 16-byte access each): vector v
 * of nv takes quads *q0 and *q1 of its tile of 64 quads. Tile t = v / 32
 * holds T = min(32, nv - 32 t) vectors; vector l = v % 32 of it takes quads
 * l and T + l, so the 32 lanes of a warp (32 consecutive vectors) access
 * 512 contiguous bytes per instruction, and the vectors 0 .. nv-1 take the
 * quads 0 .. 2 nv - 1 once each (a sum without an epilogue does not mind
 * the order of a vector's elements; coll_device.cuh). */
LOOM_HD void loom__coll_quads(int64_t v, int64_t nv, int64_t *q0, int64_t *q1) {
  const int64_t t = v >> 5, l = v & 31, T = nv - (t << 5) < 32 ? nv - (t << 5) : 32;
  *q0 = (t << 6) + l;
  *q1 = (t << 6) + T + l;
}

#endif /* LOOM_OPS_COMMON_VECTOR_H */
