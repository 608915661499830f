/* lpx bench's engine benchmark: drives a backend directly (no engine) on random token
 * ids and measures llama-bench style figures: prefill (pp), batch-1 decode (tg) and
 * decode at B sequences, each with ms per step, the bandwidth floor of that step (weight
 * + KV bytes over the read bandwidth measured at start) and the share of it reached. GPU
 * clocks and throttle reasons are read before and after; a throttled run is flagged. */
#ifndef LPX_BENCH_ENGINE_H
#define LPX_BENCH_ENGINE_H

#include "bench/bench_engine_report.h"
#include "engine/data_parallel.h"
#include "lpx.h"

#include <stdint.h>
#include <stdio.h>

#define BENCH_MAX_BATCHES 16
#define BENCH_MAX_DEPTHS 8
#define BENCH_MAX_ROWS (BENCH_MAX_BATCHES * BENCH_MAX_DEPTHS + 1)

typedef struct bench_engine_opts {
    const char *model;
    const char *device;               /* "cpu", "cuda", "cuda:N"; NULL: cuda when a GPU is usable */
    int32_t n_threads;                /* cpu; 0 = all cores */
    int32_t p;                        /* prompt tokens of the prefill test; 0: none */
    int32_t n;                        /* decode steps per test */
    int32_t depths[BENCH_MAX_DEPTHS]; /* contexts before decoding starts: each decode test
                                         runs at each (llama-bench's -d list) */
    int32_t n_depths;
    int32_t reps;                       /* timed repetitions, 1 to 64 */
    int32_t batches[BENCH_MAX_BATCHES]; /* decode batch sizes; 1 is the tg test */
    int32_t n_batches;
    int32_t step_ahead, device_sampling; /* 1 on, -1 off, 0 default (on) */
    const char *tune, *trace;            /* lpx_backend_opts' developer strings; may be NULL */
    lpx_kv_dtype kv_dtype;               /* the KV cache's; auto: the backend's own */
    /* Several engines (data parallel, lpx bench -dp): n > 1 runs every test on each of
     * the plan's devices at once, one thread and backend each (device and n_threads
     * above are then unused); NULL or n 1: one backend. */
    const lpx_dp_plan *dp;
    bool dp_baseline; /* with n > 1: first engine 0 alone, for each aggregate's vs_one */
} bench_engine_opts;

typedef struct bench_engine_result {
    bench_engine_meta meta;                /* points into this result */
    bench_engine_row rows[BENCH_MAX_ROWS]; /* per test; several engines: the aggregate */
    int n_rows;
    int n_engines;
    bench_engine_row *engine_rows; /* n_engines > 1: engine i's rows at [i * BENCH_MAX_ROWS] */
    char engines[LPX_DP_MAX * 17]; /* the engines' devices, comma-separated */
    char names[BENCH_MAX_ROWS][32];
    char gpu[512], throttle_before[128], throttle_after[128], depths[BENCH_MAX_DEPTHS * 8];
} bench_engine_result;

void bench_engine_opts_init(bench_engine_opts *o);
/* Fills r (free it with bench_engine_result_free after LPX_OK). */
lpx_status bench_engine_run(const bench_engine_opts *o, bench_engine_result *r);
void bench_engine_result_free(bench_engine_result *r);
/* The table as lpx bench prints it, fmt "md", "json" or "csv" (bench_engine_text.c). */
void bench_engine_print(FILE *f, const char *fmt, const bench_engine_result *r);

#endif
