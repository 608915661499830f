/* The HTML report of lpx bench (the engine benchmark, bench_engine.c): its table
 * (tok/s ± sd, ms per step, bandwidth floor and the share of it reached, effective
 * bandwidth), the clocks and throttle reasons before and after, and charts of tok/s
 * and % of floor per test and of decode tok/s over the batch size. One self-contained
 * file, drawn with bench_html.h like lpx bench serve's report. */
#ifndef LPX_BENCH_ENGINE_REPORT_H
#define LPX_BENCH_ENGINE_REPORT_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>

/* One test of the table, as lpx bench prints it. */
typedef struct bench_engine_row {
    const char *test; /* ppN, tgN, decode B=N; with several depths "... @ dN" */
    int batch;        /* sequences per step */
    int depth;        /* context before the decode test (0: the prefill test) */
    bool prefill;     /* the ppN test (not a decode test) */
    double tok_s, tok_s_sd;
    double ms_per_step, floor_ms_per_step, pct_of_floor;
    int engine;       /* several engines: its index, -1 for the aggregate (and one engine) */
    double one_tok_s; /* an aggregate with --dp-baseline: engine 0 alone; else 0 */
    double vs_one;    /* tok_s / (engines x one_tok_s); 0: not measured */
} bench_engine_row;

typedef struct bench_engine_clocks {
    bool ok; /* read through NVML */
    int sm_mhz, mem_mhz;
    const char *throttle; /* throttle reasons as text; "" when none */
} bench_engine_clocks;

typedef struct bench_engine_meta {
    const char *model, *device, *gpu;
    double read_bandwidth; /* bytes/s, measured at start: the floor's denominator */
    int p, n, reps;        /* the command's -p, -n, -r */
    const char *depths;    /* its -d list: "128" or "128,4096,16384" */
    const char *kv_dtype;  /* what the KV cache stored: "f32", "bf16", "fp8" */
    const char *decode;    /* how decode steps ran: "ahead", "waited" or "host_logits" */
    int n_engines;         /* engines run at once (lpx bench -dp); 1: one */
    const char *engines;   /* their devices, comma-separated */
    bench_engine_clocks before, after;
    bool throttled;
} bench_engine_meta;

lpx_status bench_engine_write_html(const char *path, const bench_engine_meta *m,
                                   const bench_engine_row *rows, size_t n);

#endif
