/*
 * handle.h - the registry of live handles.
 *
 * Every comm and plan is registered when created and removed when destroyed,
 * so that a call with a destroyed (or never created) handle is answered with
 * LOOM_ERR_INVALID_ARGUMENT instead of a use after free. The registry only
 * compares addresses; it never dereferences a dead handle.
 */
#ifndef LOOM_CORE_HANDLE_H
#define LOOM_CORE_HANDLE_H

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_handle_kind { LOOM_HANDLE_COMM = 1, LOOM_HANDLE_PLAN = 2, LOOM_HANDLE_WORLD = 3 } loom_handle_kind_t;

loom_result_t loom__handle_add(const void *h, loom_handle_kind_t kind);
/* 1 if h is a live handle of that kind. */
int loom__handle_alive(const void *h, loom_handle_kind_t kind);
/* Removes h; 0 if it was not there. */
int loom__handle_remove(const void *h, loom_handle_kind_t kind);

/* Checks a handle argument: NULL or not live gives INVALID_ARGUMENT naming `arg`. */
loom_result_t loom__check_comm(loom_comm_t comm, const char *fn);
loom_result_t loom__check_plan(loom_plan_t plan, const char *fn);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_HANDLE_H */
