/*
 * test_gemm_sm90_layout.c - host tests of the sm90 GEMM kernel's shapes
 * (src/gemm/sm90_layout.h):
 *   - every tile shape the kernel is built for (bm 128 x bn 128/192/224/256, and the
 *     decode variant bm 64 x bn 128/256) fits the 227 KiB of shared memory a
 *     block may opt into, with and without hooks, and one more stage would
 *     not fit (the pipelines are as deep as shared memory allows);
 *   - the decode variant keeps more B bytes in flight per SM than the
 *     128-row tiles of the same width;
 *   - the two consumer warpgroups' parts partition the tile (every element
 *     once) and read disjoint parts of the stage that together cover it:
 *     A rows (bm 128) or B columns (bm 64), for both B layouts;
 *   - the epilogue's buffers of a warpgroup hold whole 128-byte chunks of
 *     its columns (bf16/fp16: 64 columns, fp32: 32 columns per chunk), but
 *     for a tail of whole 8-column groups (bn 224 in bf16/fp16).
 * Runs on any machine.
 */
#include <stdint.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/sm90_layout.h"

static const int shapes[6][2] = {{128, 128}, {128, 192}, {128, 224}, {128, 256}, {64, 128}, {64, 256}};

LOOM_TEST(gemm_sm90_layout_shapes_fit_and_pipelines_are_full) {
  for (int i = 0; i < 6; ++i) {
    const int bm = shapes[i][0], bn = shapes[i][1];
    const int st = LOOM_SM90_STAGES(bm, bn), bufs = LOOM_SM90_EPI_BUFS(bm, bn);
    CHECK(st >= 4);
    CHECK(bufs == 1 || bufs == 2);
    for (int hooks = 0; hooks <= 1; ++hooks) {
      if (bm == 64 && hooks) continue; /* the decode variant has no hooked kernels */
      const size_t bytes = loom__sm90_smem_bytes(bm, bn, st, bufs, hooks);
      CHECK(bytes <= LOOM_SM90_SMEM_MAX);
      /* the plain kernel (epilogue buffers) sets the depth: one more stage
       * must not fit there */
      if (!hooks) CHECK(loom__sm90_smem_bytes(bm, bn, st + 1, bufs, 0) > LOOM_SM90_SMEM_MAX);
      /* the epilogue's bytes are the buffers the kernel addresses */
      CHECK_EQ_INT(LOOM_SM90_EPI_BYTES(bm, bn, hooks), hooks ? 0 : 2 * bufs * LOOM_SM90_EPI_BUF);
    }
    /* one buffer per warpgroup only where two would cost a stage */
    if (bufs == 1) CHECK(loom__sm90_smem_bytes(bm, bn, st, 2, 0) > LOOM_SM90_SMEM_MAX);
    /* stages start 1024-aligned (128B swizzle atoms) */
    CHECK(LOOM_SM90_A_BYTES(bm) % 1024 == 0 && LOOM_SM90_B_BYTES(bn) % 1024 == 0);
  }
  /* the shapes of docs/perf/gemm.md, "sm90 kernel: structure and resources": 225 KiB at bm 128, 4 / 6 stages */
  CHECK_EQ_INT(LOOM_SM90_STAGES(128, 256), 4);
  CHECK_EQ_INT(LOOM_SM90_STAGES(128, 128), 6);
  CHECK_EQ_INT(LOOM_SM90_STAGES(128, 192), 4);
  CHECK_EQ_INT(LOOM_SM90_STAGES(128, 224), 4);
  /* a 224-wide stage holds 4 boxes of B [k, n]; B [n, k] fills 224 rows */
  CHECK_EQ_INT(LOOM_SM90_B_BYTES(224), 4 * 8192);
  CHECK_EQ_INT(LOOM_SM90_B_TX(224, 1), 4 * 8192);
  CHECK_EQ_INT(LOOM_SM90_B_TX(224, 0), 224 * 128);
  CHECK(LOOM_SM90_B_TX(256, 0) == LOOM_SM90_B_BYTES(256) && LOOM_SM90_B_TX(192, 1) == LOOM_SM90_B_BYTES(192));
  CHECK(loom__sm90_smem_bytes(128, 256, 4, 2, 0) / 1024 == 225);
  /* the decode variant: more B in flight per SM than 128-row tiles of the
   * same width (stages x B stage) */
  for (int bn = 128; bn <= 256; bn *= 2)
    CHECK(LOOM_SM90_STAGES(64, bn) * LOOM_SM90_B_BYTES(bn) > LOOM_SM90_STAGES(128, bn) * LOOM_SM90_B_BYTES(bn));
  CHECK_EQ_INT(LOOM_SM90_STAGES(64, 256) * LOOM_SM90_B_BYTES(256), 160 * 1024);
}

LOOM_TEST(gemm_sm90_layout_warpgroup_parts_partition_tile_and_stage) {
  for (int i = 0; i < 6; ++i)
    for (int tb = 0; tb <= 1; ++tb) {
      const int bm = shapes[i][0], bn = shapes[i][1];
      static uint8_t tile[128][256];
      static uint8_t a_seen[128 * 128], b_seen[256 * 128];
      memset(tile, 0, sizeof tile);
      memset(a_seen, 0, sizeof a_seen);
      memset(b_seen, 0, sizeof b_seen);
      const int a_bytes = LOOM_SM90_A_BYTES(bm), b_bytes = LOOM_SM90_B_BYTES(bn);
      for (int cw = 0; cw < 2; ++cw) {
        const loom_sm90_wg_part_t p = loom__sm90_wg_part(bm, bn, tb, cw);
        /* a wgmma m64nN: N in {64, 128, 192, 256}, rows 64 */
        CHECK(p.cols == 64 || p.cols == 128 || p.cols == 192 || p.cols == 224 || p.cols == 256);
        CHECK(p.row >= 0 && p.row + 64 <= bm && p.col >= 0 && p.col + p.cols <= bn);
        for (int r = 0; r < 64; ++r)
          for (int c = 0; c < p.cols; ++c) tile[p.row + r][p.col + c]++;
        /* A: 64 rows of 128 bytes from a_off */
        CHECK(p.a_off % 1024 == 0 && p.a_off + 64 * 128 <= (uint32_t)a_bytes);
        for (uint32_t x = 0; x < 64 * 128; ++x) a_seen[p.a_off + x]++;
        /* B: p.cols columns of 128 bytes (K-major), or p.cols / 64 boxes of
         * 8 KiB (MN-major); each must be the bytes of its own columns */
        CHECK(p.b_off % 1024 == 0 && p.b_off + (uint32_t)p.cols * 128u <= (uint32_t)b_bytes);
        const uint32_t col_byte = tb ? (uint32_t)(p.col / 64) * 8192u : (uint32_t)p.col * 128u;
        CHECK_EQ_INT(p.b_off, col_byte);
        if (tb) CHECK(p.col % 64 == 0);
        for (uint32_t x = 0; x < (uint32_t)p.cols * 128u; ++x) b_seen[p.b_off + x]++;
        /* the TMA epilogue: whole chunks of 32 fp32 columns; of 64 bf16/fp16
         * columns, the tail (224: 32 columns) stored from registers in whole
         * 8-column fragment groups */
        CHECK(p.cols % 32 == 0 && (p.cols % 64) % 8 == 0);
      }
      int once = 1;
      for (int r = 0; r < bm; ++r)
        for (int c = 0; c < bn; ++c) once &= tile[r][c] == 1;
      CHECK(once);
      /* bm 128: the warpgroups split A and share B; bm 64: share A, split B */
      int a_ok = 1, b_ok = 1;
      for (int x = 0; x < a_bytes; ++x) a_ok &= a_seen[x] == (bm == 128 ? 1 : 2);
      /* (the columns past bn of a stage rounded up to whole boxes: unread) */
      for (int x = 0; x < b_bytes; ++x) b_ok &= b_seen[x] == (x >= bn * 128 ? 0 : bm == 128 ? 2 : 1);
      CHECK(a_ok);
      CHECK(b_ok);
    }
}
