/*
 * test_core.c - host tests of src/core: errors, settings, handles, argument
 * checks, workspace accounting and the signal/barrier protocol. No GPU.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/param.h"
#include "core/plan.h"
#include "core/signal.h"
#include "gemm/gemm.h"
#include "core/workspace.h"
#include "testing/hooks.h"

LOOM_TEST(result_strings_are_distinct) {
  for (int a = 0; a <= LOOM_ERR_INTERNAL; ++a) {
    CHECK(strncmp(loom_result_string((loom_result_t)a), "LOOM_", 5) == 0);
    for (int b = a + 1; b <= LOOM_ERR_INTERNAL; ++b)
      CHECK(strcmp(loom_result_string((loom_result_t)a), loom_result_string((loom_result_t)b)) != 0);
  }
  CHECK(strcmp(loom_result_string((loom_result_t)99), "LOOM_ERR_UNKNOWN") == 0);
  CHECK(strcmp(loom_result_string(LOOM_ERR_TIMEOUT), "LOOM_ERR_TIMEOUT") == 0);
}

LOOM_TEST(last_error_is_thread_message) {
  CHECK_RESULT(loom__fail(LOOM_ERR_INVALID_ARGUMENT, "m=%d: must be >= 1", -3), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(loom_last_error(), "m=-3: must be >= 1") == 0);
  loom__fail_append(" (in %s)", "test");
  CHECK_MSG("must be >= 1 (in test)");
}

LOOM_TEST(version_and_dtypes) {
  int v = 0;
  CHECK_RESULT(loom_get_version(&v), LOOM_SUCCESS);
  CHECK_EQ_INT(v, LOOM_VERSION_CODE);
  CHECK_RESULT(loom_get_version(NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(loom_dtype_size(LOOM_FP32), 4);
  CHECK_EQ_INT(loom_dtype_size(LOOM_BF16), 2);
  CHECK_EQ_INT(loom_dtype_size(LOOM_FP16), 2);
  CHECK_EQ_INT(loom_dtype_size((loom_dtype_t)7), 0);
}

LOOM_TEST(param_parse_int) {
  int64_t v = 0;
  CHECK(loom__parse_int("123", &v) == 0 && v == 123);
  CHECK(loom__parse_int("64M", &v) == 0 && v == 64LL << 20);
  CHECK(loom__parse_int("2G", &v) == 0 && v == 2LL << 30);
  CHECK(loom__parse_int("4k", &v) == 0 && v == 4096);
  CHECK(loom__parse_int("", &v) != 0);
  CHECK(loom__parse_int("12x", &v) != 0);
  CHECK(loom__parse_int("-5", &v) != 0);
  CHECK(loom__parse_int("abc", &v) != 0);
}

LOOM_TEST(param_table_is_complete) {
  size_t n = 0;
  const loom_param_desc_t *t = loom__param_table(&n);
  CHECK(n >= 4);
  int have_timeout = 0, have_ws = 0;
  for (size_t i = 0; i < n; ++i) {
    CHECK(t[i].name && *t[i].name && t[i].meaning && *t[i].meaning && t[i].default_text);
    if (t[i].kind == LOOM_PARAM_INT) {
      int64_t v;
      CHECK(loom__parse_int(t[i].default_text, &v) == 0);
    }
    have_timeout |= !strcmp(t[i].name, "TIMEOUT_MS");
    have_ws |= !strcmp(t[i].name, "WORKSPACE_BYTES");
    for (size_t j = i + 1; j < n; ++j) CHECK(strcmp(t[i].name, t[j].name) != 0);
  }
  CHECK(have_timeout && have_ws);
  CHECK(loom__param_TIMEOUT_MS() > 0);
}

LOOM_TEST(log_levels_parse) {
  CHECK_EQ_INT(loom__log_parse_level("WARN"), LOOM_LOG_WARN);
  CHECK_EQ_INT(loom__log_parse_level("info"), LOOM_LOG_INFO);
  CHECK_EQ_INT(loom__log_parse_level("TRACE"), LOOM_LOG_TRACE);
  CHECK_EQ_INT(loom__log_parse_level("NONE"), LOOM_LOG_NONE);
  CHECK_EQ_INT(loom__log_parse_level("loud"), -1);
}

LOOM_TEST(nccl_older_than_2_28_is_unsupported) {
  CHECK_RESULT(loom__check_nccl_version(22703), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("NCCL 2.27.3 is too old");
  CHECK_MSG(">= 2.28.0");
  CHECK_RESULT(loom__check_nccl_version(21903), LOOM_ERR_UNSUPPORTED);
  CHECK_RESULT(loom__check_nccl_version(22800), LOOM_SUCCESS);
  CHECK_RESULT(loom__check_nccl_version(22903), LOOM_SUCCESS);
}

LOOM_TEST(null_comm_is_rejected_everywhere) {
  loom_comm_info_t info = LOOM_COMM_INFO_INIT;
  void *p = NULL;
  CHECK_RESULT(loom_comm_get_info(NULL, &info), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("comm=NULL");
  CHECK_RESULT(loom_comm_destroy(NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_comm_destroy: comm=NULL");
  CHECK_RESULT(loom_comm_get_async_error(NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_malloc(NULL, 64, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_malloc: comm=NULL");
  CHECK_RESULT(loom_free(NULL, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_peer_ptr(NULL, &p, 0, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_plan_destroy(NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("plan=NULL");
}

LOOM_TEST(comm_create_checks_its_arguments) {
  loom_comm_t c = (loom_comm_t)0x1;
  CHECK_RESULT(loom_comm_create(NULL, NULL, &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("nccl=NULL");
  CHECK(c == NULL);
  CHECK_RESULT(loom_comm_create((ncclComm_t)0x1, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("out=NULL");
  /* A config from another header version is caught before NCCL is touched. */
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.struct_size = 8;
  CHECK_RESULT(loom_comm_create((ncclComm_t)0x1, &cfg, &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("cfg->struct_size=8");
  loom_config_t neg = LOOM_CONFIG_INIT;
  neg.timeout_ms = -1;
  CHECK_RESULT(loom_comm_create((ncclComm_t)0x1, &neg, &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("timeout_ms=-1");
}

LOOM_TEST(double_destroy_is_an_error_not_a_crash) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(0, 2, 1 << 20, &c), LOOM_SUCCESS);
  loom_comm_info_t info = LOOM_COMM_INFO_INIT;
  CHECK_RESULT(loom_comm_get_info(c, &info), LOOM_SUCCESS);
  CHECK_EQ_INT(info.size, 2);
  CHECK_RESULT(loom_comm_get_info(c, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("info=NULL");
  info.struct_size = 3;
  CHECK_RESULT(loom_comm_get_info(c, &info), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("info->struct_size=3");
  info.struct_size = sizeof info;
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("is not a live loom comm");
  CHECK_RESULT(loom_comm_get_info(c, &info), LOOM_ERR_INVALID_ARGUMENT);
  /* a pointer that never was a comm */
  int junk = 0;
  CHECK_RESULT(loom_comm_destroy((loom_comm_t)&junk), LOOM_ERR_INVALID_ARGUMENT);
}

LOOM_TEST(plan_double_destroy_and_comm_with_plans) {
  loom_comm_t c = NULL;
  loom_plan_t p = NULL;
  CHECK_RESULT(loom__comm_create_detached(1, 4, 1 << 20, &c), LOOM_SUCCESS);
  CHECK_RESULT(loom__test_plan(c, 16, 4096, &p), LOOM_SUCCESS);
  CHECK(p && p->nsignals == 16 && p->staging_offset >= p->slice_offset + 64);
  CHECK_EQ_INT(loom__plan_next_epoch(p), 1);
  CHECK_EQ_INT(loom__plan_next_epoch(p), 2);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("still has 1 plan(s)");
  CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  CHECK_RESULT(loom_plan_destroy(p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("is not a live loom plan");
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

LOOM_TEST(malloc_free_argument_checks) {
  loom_comm_t c = NULL;
  void *p = (void *)0x1;
  CHECK_RESULT(loom__comm_create_detached(0, 2, 1 << 20, &c), LOOM_SUCCESS);
  CHECK_RESULT(loom_malloc(c, 0, &p), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("bytes=0");
  CHECK(p == NULL);
  CHECK_RESULT(loom_malloc(c, 64, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("ptr=NULL");
  CHECK_RESULT(loom_free(c, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_free: ptr=NULL");
  int foreign = 0;
  CHECK_RESULT(loom_free(c, &foreign), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("was not returned by loom_malloc on this comm");
  void *q = NULL;
  CHECK_RESULT(loom_peer_ptr(c, &foreign, 1, &q), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("is not inside memory from loom_malloc");
  CHECK_RESULT(loom_peer_ptr(c, &foreign, 2, &q), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("peer=2");
  CHECK_RESULT(loom_peer_ptr(c, &foreign, -1, &q), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_peer_ptr(c, NULL, 0, &q), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_peer_ptr(c, &foreign, 0, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

LOOM_TEST(workspace_request_larger_than_configured) {
  loom_comm_t c = NULL;
  loom_plan_t p = NULL, q = NULL;
  CHECK_RESULT(loom__comm_create_detached(0, 2, 1 << 20, &c), LOOM_SUCCESS);
  CHECK_RESULT(loom__test_plan(c, 64, (size_t)2 << 20, &p), LOOM_ERR_OUT_OF_MEMORY);
  CHECK_MSG("a test plan needs 2097664 bytes of symmetric workspace");
  CHECK_MSG("LOOM_WORKSPACE_BYTES");
  CHECK(p == NULL);
  /* fits, then the next one does not, then fits again after a release */
  CHECK_RESULT(loom__test_plan(c, 0, 700 << 10, &p), LOOM_SUCCESS);
  CHECK_RESULT(loom__test_plan(c, 0, 700 << 10, &q), LOOM_ERR_OUT_OF_MEMORY);
  CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  CHECK_RESULT(loom__test_plan(c, 0, 700 << 10, &q), LOOM_SUCCESS);
  loom_comm_info_t info = LOOM_COMM_INFO_INIT;
  CHECK_RESULT(loom_comm_get_info(c, &info), LOOM_SUCCESS);
  CHECK(info.workspace_free < info.workspace_bytes - (700 << 10));
  CHECK_RESULT(loom_plan_destroy(q), LOOM_SUCCESS);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
}

/* Random reserve/release: ranges aligned, inside capacity, never overlapping;
 * two allocators fed the same sequence agree (symmetric offsets). */
LOOM_TEST(workspace_allocator_random) {
  srand(1234);
  for (int trial = 0; trial < 50; ++trial) {
    loom_ws_alloc_t a, b;
    size_t cap = 4096 + (size_t)(rand() % 100000);
    loom__ws_init(&a, cap);
    loom__ws_init(&b, cap);
    size_t live[64];
    int nlive = 0;
    for (int step = 0; step < 400; ++step) {
      if (nlive < 64 && (nlive == 0 || rand() % 3)) {
        size_t bytes = 1 + (size_t)(rand() % 5000), align = (size_t)1 << (rand() % 9), oa = 0, ob = 0;
        loom_result_t ra = loom__ws_reserve(&a, bytes, align, "t", &oa);
        loom_result_t rb = loom__ws_reserve(&b, bytes, align, "t", &ob);
        CHECK(ra == rb);
        if (ra == LOOM_SUCCESS) {
          CHECK(oa == ob);
          CHECK(oa % align == 0);
          CHECK(oa + bytes <= cap);
          live[nlive++] = oa;
        } else {
          CHECK(ra == LOOM_ERR_OUT_OF_MEMORY);
        }
      } else {
        int k = rand() % nlive;
        CHECK_RESULT(loom__ws_release(&a, live[k]), LOOM_SUCCESS);
        CHECK_RESULT(loom__ws_release(&b, live[k]), LOOM_SUCCESS);
        live[k] = live[--nlive];
      }
      for (size_t i = 0; i + 1 < a.count; ++i)
        CHECK(a.used[i].offset + a.used[i].bytes <= a.used[i + 1].offset);
    }
    CHECK_RESULT(loom__ws_release(&a, cap + 1), LOOM_ERR_INTERNAL);
    CHECK_RESULT(loom__ws_reserve(&a, 0, 8, "t", &live[0]), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_RESULT(loom__ws_reserve(&a, 8, 3, "t", &live[0]), LOOM_ERR_INVALID_ARGUMENT);
    loom__ws_fini(&a);
    loom__ws_fini(&b);
  }
}

LOOM_TEST(epochs_compare_wrap_safe) {
  CHECK(loom__epoch_reached(5, 5));
  CHECK(loom__epoch_reached(6, 5));
  CHECK(!loom__epoch_reached(4, 5));
  CHECK(loom__epoch_reached(0u, 0xffffffffu));  /* wrapped past */
  CHECK(loom__epoch_reached(3u, 0xfffffffeu));
  CHECK(!loom__epoch_reached(0xfffffffeu, 3u));
  CHECK(!loom__epoch_reached(0u, 1u));
}

/* The comm barrier's protocol (signal.cu) for W = 1..64 under random
 * interleavings: rank r's call e stores e into slot[r] of every rank, then
 * waits until every slot of its own array reached e. Check: no rank leaves
 * call e before every rank entered it, and no schedule deadlocks. */
LOOM_TEST(barrier_protocol_many_world_sizes) {
  srand(99);
  for (int w = 1; w <= 64; w = w < 8 ? w + 1 : w * 2) {
    uint32_t *slot = (uint32_t *)calloc((size_t)w * w, sizeof(uint32_t)); /* slot[owner*w + src] */
    int *epoch = (int *)calloc((size_t)w, sizeof(int));   /* call the rank is in (1-based) */
    int *stored = (int *)calloc((size_t)w, sizeof(int));  /* stores done in this call */
    int *entered = (int *)calloc(64, sizeof(int));        /* ranks that entered call e (e < 64) */
    const int rounds = 6;
    for (int r = 0; r < w; ++r) epoch[r] = 1, entered[1]++;
    int done = 0, steps = 0;
    while (done < w && steps < 1000000) {
      ++steps;
      int r = rand() % w;
      if (epoch[r] > rounds) continue;
      uint32_t e = (uint32_t)epoch[r];
      if (stored[r] < w) { /* one store into peer stored[r]'s slot[r] */
        slot[stored[r] * w + r] = e;
        stored[r]++;
        continue;
      }
      int ok = 1;
      for (int p = 0; p < w; ++p) ok &= loom__epoch_reached(slot[r * w + p], e);
      if (!ok) continue;
      CHECK_EQ_INT(entered[e], w); /* leaving e: everyone entered e */
      epoch[r]++;
      stored[r] = 0;
      if (epoch[r] > rounds) done++;
      else entered[epoch[r]]++;
    }
    CHECK_EQ_INT(done, w);
    free(slot); free(epoch); free(stored); free(entered);
  }
}

LOOM_TEST(wait_sites_have_names_and_no_layer_clashes) {
  const uint32_t core[] = {LOOM_SITE_TEST, LOOM_SITE_BARRIER, LOOM_SITE_STREAM_WAIT, LOOM_SITE_CONSUMED};
  for (size_t i = 0; i < sizeof core / sizeof core[0]; ++i)
    CHECK(strcmp(loom__wait_site_name(core[i]), "unknown") != 0);
  CHECK(strcmp(loom__wait_site_name(LOOM_SITE_GEMM_PROLOGUE), "GEMM prologue tile wait") == 0);
  CHECK(strcmp(loom__wait_site_name(999), "unknown") == 0);
  /* every layer's constructor registered without a clash */
  CHECK_EQ_INT(loom__wait_site_clashes(), 0);
  /* the same name again is fine; another name for a taken id is refused */
  CHECK_EQ_INT(loom__wait_site_register(LOOM_SITE_BARRIER, "comm barrier"), LOOM_SUCCESS);
  CHECK_EQ_INT(loom__wait_site_register(LOOM_SITE_BARRIER, "something else"), LOOM_ERR_INTERNAL);
  CHECK(strcmp(loom__wait_site_name(LOOM_SITE_BARRIER), "comm barrier") == 0);
  CHECK_EQ_INT(loom__wait_site_register(LOOM_SITE_MAX, "out of range"), LOOM_ERR_INTERNAL);
  CHECK_EQ_INT(loom__wait_site_clashes(), 2);
}

LOOM_TEST(timeout_message_names_rank_peer_signal_and_values) {
  loom_error_record_t rec;
  memset(&rec, 0, sizeof rec);
  rec.rank = 3;
  rec.peer = 5;
  rec.signal = 17;
  rec.expected = 9;
  rec.seen = 8;
  rec.site = LOOM_SITE_GEMM_PROLOGUE;
  rec.waited_ns = 2500000000ull;
  char msg[512];
  loom__format_timeout(&rec, 2500, msg, sizeof msg);
  CHECK(strstr(msg, "rank 3:") && strstr(msg, "set by rank 5") && strstr(msg, "signal 17"));
  CHECK(strstr(msg, "expected >= 9, saw 8") && strstr(msg, "GEMM prologue") && strstr(msg, "2500 ms"));
  rec.peer = -1;
  loom__format_timeout(&rec, 2500, msg, sizeof msg);
  CHECK(strstr(msg, "setter not known") != NULL);
}

/* A memory backend of host memory whose release fails on demand. */
static int g_fail_release, g_live_allocs;
static loom_result_t host_alloc(loom_comm_t comm, size_t bytes, loom_alloc_t *a) {
  a->ptr = malloc(bytes);
  if (!a->ptr) return LOOM_ERR_OUT_OF_MEMORY;
  for (int p = 0; p < comm->size; ++p) a->peer_ptrs[p] = p == comm->rank ? a->ptr : NULL;
  g_live_allocs++;
  return LOOM_SUCCESS;
}
static loom_result_t host_release(loom_comm_t comm, loom_alloc_t *a) {
  (void)comm;
  free(a->ptr);
  g_live_allocs--;
  if (g_fail_release) return loom__fail(LOOM_ERR_NCCL, "injected release failure");
  return LOOM_SUCCESS;
}
static const loom_mem_backend_t g_host_backend = {host_alloc, host_release};

LOOM_TEST(failed_release_drops_the_entry_once_and_destroy_survives) {
  loom_comm_t c = NULL;
  CHECK_RESULT(loom__comm_create_detached(0, 2, 1 << 20, &c), LOOM_SUCCESS);
  void *p = NULL, *q = NULL;
  CHECK_RESULT(loom_malloc(c, 1024, &p), LOOM_ERR_UNSUPPORTED); /* no backend: no memory */
  loom__comm_set_mem_backend(c, &g_host_backend);
  g_live_allocs = 0;
  CHECK_RESULT(loom_malloc(c, 1024, &p), LOOM_SUCCESS);
  CHECK_RESULT(loom_malloc(c, 4096, &q), LOOM_SUCCESS);
  CHECK_EQ_INT(c->nallocs, 2);
  /* a release that fails: the error names what is lost, the entry is gone */
  g_fail_release = 1;
  CHECK_RESULT(loom_free(c, p), LOOM_ERR_NCCL);
  CHECK_MSG("are lost");
  CHECK_EQ_INT(c->nallocs, 1);
  CHECK_RESULT(loom_free(c, p), LOOM_ERR_INVALID_ARGUMENT); /* not twice */
  CHECK_EQ_INT(c->nallocs, 1);
  /* destroy with one allocation left whose release fails: no wrap-around,
   * every entry released exactly once */
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  CHECK_EQ_INT(g_live_allocs, 0);
  g_fail_release = 0;
  (void)q;
}

/* The plan agreement at W = 2..64, the all-reduce (max) done here: equal
 * hashes agree on every rank; any rank with another hash (largest,
 * smallest or in between) makes every rank see the difference; a rank that
 * failed sees its own failure and every other rank "another rank failed". */
LOOM_TEST(plan_agreement_verdicts_at_any_world_size) {
  const int worlds[] = {2, 3, 4, 8, 16, 64};
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; ++wi) {
    const int W = worlds[wi];
    for (int trial = 0; trial < 40; ++trial) {
      uint64_t h[64];
      int failed[64];
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t base = seed;
      for (int p = 0; p < W; ++p) h[p] = base, failed[p] = 0;
      const int odd = trial % 4; /* 0: all equal; 1: one hash above; 2: one below; 3: one failed */
      const int who = (int)((seed >> 33) % (uint64_t)W);
      if (odd == 1) h[who] = base + 1 + (seed >> 40);
      if (odd == 2) h[who] = base - 1 - (seed >> 40);
      if (odd == 3) failed[who] = 1, h[who] = 0;
      uint64_t m[3] = {0, 0, 0};
      for (int p = 0; p < W; ++p) {
        uint64_t w[3];
        loom__agree_words(h[p], failed[p], w);
        for (int i = 0; i < 3; ++i) m[i] = w[i] > m[i] ? w[i] : m[i];
      }
      for (int p = 0; p < W; ++p) {
        const int v = loom__agree_verdict(h[p], failed[p], m);
        const int want = odd == 0 ? LOOM_AGREE_OK
                         : odd == 3 ? (p == who ? LOOM_AGREE_SELF_FAILED : LOOM_AGREE_OTHER_FAILED)
                                    : LOOM_AGREE_DIFFER;
        if (v != want) {
          printf("    W=%d trial %d rank %d: verdict %d, expected %d\n", W, trial, p, v, want);
          CHECK(0);
          return;
        }
      }
    }
  }
  CHECK(loom__fnv64(LOOM_FNV64_INIT, "a", 1) != loom__fnv64(LOOM_FNV64_INIT, "b", 1));
  CHECK(loom__fnv64(LOOM_FNV64_INIT, "", 0) == LOOM_FNV64_INIT);
}
