/* Data parallel: N engines of one model in one process (lpx serve
 * --data-parallel-size, docs/server.md). The model is opened once and shared
 * read-only: lpx_engine_create takes a const model, and each engine holds its
 * own backend, KV pool, scheduler and thread, so engines share no mutable state. */
#ifndef LPX_ENGINE_DATA_PARALLEL_H
#define LPX_ENGINE_DATA_PARALLEL_H

#include "lpx.h"

#include <stdatomic.h>
#include <stdint.h>

#define LPX_DP_MAX 64

typedef struct lpx_dp_plan {
    int32_t n;                      /* engines, 1..LPX_DP_MAX */
    const char *device[LPX_DP_MAX]; /* engine i's device; NULL: the engine's default */
    char names[LPX_DP_MAX][16];     /* storage of the device names made here */
    int32_t n_threads;              /* each engine's CPU threads (0 = all cores, n == 1) */
} lpx_dp_plan;

/* The engines for --device `device` (NULL: the default; "cuda:0,2,...": a list, one
 * engine per entry), --data-parallel-size dp (0: not given, then the list's length or 1)
 * and --threads n_threads (0: all cores). One engine keeps device and threads as
 * given. With n > 1: "cuda" means cuda:0..n-1; "cpu" n CPU engines of n_threads / n
 * threads each (all cores / n when 0, at least 1). INVALID_ARG naming the flags for a
 * dp outside 1..LPX_DP_MAX, a list whose length contradicts dp, "cuda:K" with dp > 1,
 * fewer threads than engines; each entry of a list is checked by lpx_backend_select
 * (UNSUPPORTED for cuda in a build without CUDA). device points into the caller's
 * string or into names. */
lpx_status lpx_dp_plan_make(const char *device, int32_t dp, int32_t n_threads, lpx_dp_plan *out);

/* Creates and starts plan->n engines of m with options eo (device and n_threads
 * taken from the plan) into e[plan->n]; on failure none is left. */
lpx_status lpx_dp_engines_start(const lpx_model *m, const lpx_engine_opts *eo,
                                const lpx_dp_plan *plan, lpx_engine **e);
/* The engine for new work (serve's requests, batch's lines): the fewest in flight
 * (waiting + running, as the caller counts them: submitted and not finished, so that
 * one submitted a moment ago counts), ties to the lowest index. load[n]. */
int32_t lpx_dp_place(const atomic_int *load, int32_t n);
/* Stops and destroys e[0..n) (NULL entries are skipped) and clears them. */
void lpx_dp_engines_destroy(lpx_engine **e, int32_t n);

#endif
