/* The server's Prometheus registry: latency histograms and counters that the
 * server observes, plus gauges read from the engine when /metrics is scraped.
 * Names follow vLLM's with the prefix lpx: (docs/server.md lists them). */
#ifndef LPX_SERVER_METRICS_H
#define LPX_SERVER_METRICS_H

#include "lpx.h"
#include "telemetry/telemetry.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define LPX_HIST_MAX_BUCKETS 24

typedef struct lpx_histogram {
    const double *bounds; /* [n_bounds] upper bounds, ascending; +Inf is implied */
    int n_bounds;
    uint64_t counts[LPX_HIST_MAX_BUCKETS]; /* per bucket, not cumulative */
    uint64_t count;
    double sum;
} lpx_histogram;

typedef struct lpx_metrics {
    pthread_mutex_t mu;
    lpx_histogram ttft, itl, e2e, queue; /* seconds */
    uint64_t success[5];                 /* by lpx_finish_reason */
    uint64_t http[6];                    /* responses by status class 1xx..5xx ([0] unused) */
    /* --fallback-model (server/fallback.h): rendered when `fallback` is set (before the
     * server is ready, read-only after); the rest under mu */
    bool fallback;
    uint64_t fallback_requests; /* requests the overload rule sent to the fallback */
    uint64_t fallback_switches; /* switches either way */
    int fallback_active;        /* 1 while new requests go to the fallback */
    /* the fallback engine as of the scrape: running, waiting, KV blocks used share */
    double fallback_running, fallback_waiting, fallback_kv;
    bool compat_vllm; /* also render vllm:num_requests_* and vllm:kv_cache_usage_perc; set
                         before the server starts, read-only after */
} lpx_metrics;

void lpx_metrics_init(lpx_metrics *m);
void lpx_metrics_destroy(lpx_metrics *m);
void lpx_histogram_observe(lpx_histogram *h, double v); /* caller holds m->mu */
void lpx_metrics_finish(lpx_metrics *m, lpx_finish_reason r, double e2e_s, double queue_s);

/* The Prometheus text exposition (version 0.0.4) as a malloc'd string;
 * model_name labels every series; st[n_engines] (1 or more) give the engine
 * series: the server's figure without an engine label (the sum; the cache usage
 * over every pool) and, when n_engines > 1, each engine's with engine="i" (under
 * lpx's names only; vLLM's compat names carry the server's figure alone);
 * gpus[n_gpus] (index i is GPU i) add the GPU gauges, each reading that is
 * LPX_TEL_NA left out. NULL when out of memory. */
char *lpx_metrics_render(lpx_metrics *m, const lpx_engine_stats *st, int n_engines,
                         const char *model_name, const lpx_gpu_sample *gpus, int n_gpus);

#endif
