/*
 * comm_error.c - a comm's asynchronous error: a device-side wait that
 * expired sets the comm's host-mapped error record; the next call that
 * checks the comm (loom__comm_check, every entry that takes one, and
 * loom_comm_get_async_error) reads it, formats it once into the comm's
 * message and fails with LOOM_ERR_TIMEOUT from then on. Apart from comm.c
 * so that the memory calls (memory.c), which comm.c's creation uses, can
 * check a comm without depending on comm.c.
 */
#include "comm.h"
#include "error.h"
#include "handle.h"
#include "log.h"

#include <stdio.h>

void loom__format_timeout(const loom_error_record_t *rec, int timeout_ms, char *buf, size_t size) {
  char setter[48];
  if (rec->peer >= 0) snprintf(setter, sizeof setter, "set by rank %d", rec->peer);
  else snprintf(setter, sizeof setter, "(setter not known to the waiter)");
  snprintf(buf, size,
           "rank %d: device-side wait expired after %.0f ms (timeout %d ms) at the %s wait on "
           "signal %u %s: expected >= %u, saw %u; the comm is unusable now: destroy it and "
           "create a new one",
           rec->rank, (double)rec->waited_ns / 1e6, timeout_ms, loom__wait_site_name(rec->site),
           rec->signal, setter, rec->expected, rec->seen);
}

loom_result_t loom__comm_check(loom_comm_t comm, const char *fn) {
  LOOM_TRY(loom__check_comm(comm, fn));
  if (comm->async_err == LOOM_SUCCESS && comm->err_host) {
    volatile loom_error_record_t *rec = comm->err_host;
    if (rec->valid) {
      __atomic_thread_fence(__ATOMIC_ACQUIRE);
      comm->async_err = LOOM_ERR_TIMEOUT;
      loom__format_timeout((const loom_error_record_t *)rec, comm->timeout_ms, comm->async_msg,
                           sizeof comm->async_msg);
      LOOM_WARN("%s", comm->async_msg);
    }
  }
  if (comm->async_err != LOOM_SUCCESS) return loom__fail(comm->async_err, "%s: %s", fn, comm->async_msg);
  return LOOM_SUCCESS;
}

loom_result_t loom_comm_get_async_error(loom_comm_t comm) {
  return loom__comm_check(comm, "loom_comm_get_async_error");
}
