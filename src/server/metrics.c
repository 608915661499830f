#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's buckets, so dashboards built for vLLM read lpx unchanged. */
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double e2e_bounds[] = {0.3,  0.5,  1.0,  2.5,   5.0,   10.0,  15.0,  20.0,   30.0,
                                    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define NB(a) ((int)(sizeof(a) / sizeof *(a)))

void lpx_metrics_init(lpx_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft = (lpx_histogram){.bounds = ttft_bounds, .n_bounds = NB(ttft_bounds)};
    m->itl = (lpx_histogram){.bounds = itl_bounds, .n_bounds = NB(itl_bounds)};
    m->e2e = (lpx_histogram){.bounds = e2e_bounds, .n_bounds = NB(e2e_bounds)};
    m->queue = (lpx_histogram){.bounds = e2e_bounds, .n_bounds = NB(e2e_bounds)};
}

void lpx_metrics_destroy(lpx_metrics *m) {
    pthread_mutex_destroy(&m->mu);
}

void lpx_histogram_observe(lpx_histogram *h, double v) {
    int b = 0;
    while (b < h->n_bounds && v > h->bounds[b])
        b++;
    h->counts[b]++;
    h->count++;
    h->sum += v;
}

void lpx_metrics_finish(lpx_metrics *m, lpx_finish_reason r, double e2e_s, double queue_s) {
    pthread_mutex_lock(&m->mu);
    if ((unsigned)r < 5) m->success[r]++;
    lpx_histogram_observe(&m->e2e, e2e_s);
    if (queue_s >= 0) lpx_histogram_observe(&m->queue, queue_s);
    pthread_mutex_unlock(&m->mu);
}

typedef struct buf {
    char *p;
    size_t n, cap;
    int failed;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int k = b->failed ? 0 : vsnprintf(b->p + b->n, room, fmt, ap);
        va_end(ap);
        if (b->failed || k < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)k;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static void header_in(buf *b, const char *ns, const char *name, const char *type,
                      const char *help) {
    put(b, "# HELP %s:%s %s\n# TYPE %s:%s %s\n", ns, name, help, ns, name, type);
}

static void header(buf *b, const char *name, const char *type, const char *help) {
    header_in(b, "lpx", name, type, help);
}

/* ns: "lpx", or "vllm" for the names --metrics-compat vllm adds (docs/deploy.md). */
static void gauge_in(buf *b, const char *ns, const char *name, const char *help, const char *model,
                     double v) {
    header_in(b, ns, name, "gauge", help);
    put(b, "%s:%s{model_name=\"%s\"} %.17g\n", ns, name, model, v);
}

static void gauge(buf *b, const char *name, const char *help, const char *model, double v) {
    gauge_in(b, "lpx", name, help, model, v);
}

/* The text format names a counter's family with its _total suffix. */
static void counter(buf *b, const char *name, const char *help, const char *model, double v) {
    put(b, "# HELP lpx:%s_total %s\n# TYPE lpx:%s_total counter\n", name, help, name);
    put(b, "lpx:%s_total{model_name=\"%s\"} %.17g\n", name, model, v);
}

static void histogram(buf *b, const char *name, const char *help, const char *model,
                      const lpx_histogram *h) {
    header(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        put(b, "lpx:%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", name, h->bounds[i], model,
            (unsigned long long)cum);
    }
    put(b, "lpx:%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", name, model,
        (unsigned long long)h->count);
    put(b, "lpx:%s_count{model_name=\"%s\"} %llu\n", name, model, (unsigned long long)h->count);
    put(b, "lpx:%s_sum{model_name=\"%s\"} %.17g\n", name, model, h->sum);
}

/* One gauge family over every GPU; get returns LPX_TEL_NA for a missing reading. */
static void gpu_gauge(buf *b, const char *name, const char *help, const char *model,
                      const lpx_gpu_sample *g, int n, double scale,
                      int64_t (*get)(const lpx_gpu_sample *)) {
    bool any = false;
    for (int i = 0; i < n; i++)
        any |= get(&g[i]) != LPX_TEL_NA;
    if (!any) return;
    header(b, name, "gauge", help);
    for (int i = 0; i < n; i++)
        if (get(&g[i]) != LPX_TEL_NA)
            put(b, "lpx:%s{gpu=\"%d\",model_name=\"%s\"} %.17g\n", name, i, model,
                (double)get(&g[i]) * scale);
}

static int64_t g_util(const lpx_gpu_sample *g) {
    return g->util_gpu;
}
static int64_t g_mem_used(const lpx_gpu_sample *g) {
    return g->mem_used;
}
static int64_t g_mem_total(const lpx_gpu_sample *g) {
    return g->mem_total;
}
static int64_t g_temp(const lpx_gpu_sample *g) {
    return g->temp_c;
}
static int64_t g_power(const lpx_gpu_sample *g) {
    return g->power_mw;
}
static int64_t g_sm_clock(const lpx_gpu_sample *g) {
    return g->sm_clock_mhz;
}
static int64_t g_mem_clock(const lpx_gpu_sample *g) {
    return g->mem_clock_mhz;
}

/* The text format's label-value escapes: backslash, double quote and newline;
 * a served model name may hold any of them. NULL when out of memory. */
static char *escape_label(const char *v) {
    size_t n = strlen(v);
    if (n > (SIZE_MAX - 1) / 2) return NULL;
    char *e = malloc(2 * n + 1), *o = e;
    if (!e) return NULL;
    for (const char *c = v; *c; c++) {
        if (*c == '\\' || *c == '"' || *c == '\n') *o++ = '\\';
        *o++ = *c == '\n' ? 'n' : *c;
    }
    *o = '\0';
    return e;
}

char *lpx_metrics_render(lpx_metrics *m, const lpx_engine_stats *st, const char *model_name,
                         const lpx_gpu_sample *gpus, int n_gpus) {
    char *model = escape_label(model_name);
    if (!model) return NULL;
    buf b = {.cap = 16384};
    if (!(b.p = malloc(b.cap))) {
        free(model);
        return NULL;
    }
    b.p[0] = '\0';
    /* The Gateway API Inference Extension's endpoint pickers scrape these three under vLLM's
     * names by default; the compat names carry the same values. */
    double kv_use = st->kv_blocks_total > 0 ? (double)st->kv_blocks_used / st->kv_blocks_total : 0;
    for (int compat = 0; compat <= (m->compat_vllm ? 1 : 0); compat++) {
        const char *ns = compat ? "vllm" : "lpx";
        gauge_in(&b, ns, "num_requests_running", "Requests in the running batch.", model,
                 (double)st->n_running);
        gauge_in(&b, ns, "num_requests_waiting", "Requests waiting for a batch slot.", model,
                 (double)st->n_waiting);
        gauge_in(&b, ns, "kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).",
                 model, kv_use);
    }
    counter(&b, "prompt_tokens", "Prompt tokens of admitted requests.", model,
            (double)st->prompt_tokens);
    counter(&b, "generation_tokens", "Generated tokens.", model, (double)st->generated_tokens);
    counter(&b, "preemptions", "Requests preempted for KV cache space.", model,
            (double)st->n_preemptions);
    counter(&b, "prefix_cache_queries",
            "Tokens of admitted requests looked up in the prefix cache (vLLM's name).", model,
            (double)st->prefix_cache_queries);
    counter(&b, "prefix_cache_hits", "Of those, tokens whose KV came from the prefix cache.", model,
            (double)st->prefix_cache_hits);
    counter(&b, "engine_steps", "Engine steps (forward passes over a batch).", model,
            (double)st->n_steps);
    counter(&b, "engine_steps_ahead",
            "Engine steps queued before the previous step's tokens were read (one step ahead).",
            model, (double)st->steps_ahead);

    pthread_mutex_lock(&m->mu);
    header(&b, "request_success_total", "counter", "Finished requests by finish reason.");
    static const char *const reasons[] = {"stop", "length", "abort", "error"};
    for (int r = LPX_FINISH_STOP; r <= LPX_FINISH_ERROR; r++)
        put(&b, "lpx:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %llu\n",
            reasons[r - 1], model, (unsigned long long)m->success[r]);
    header(&b, "http_responses_total", "counter", "HTTP responses by status class.");
    for (int c = 1; c <= 5; c++)
        put(&b, "lpx:http_responses_total{status=\"%dxx\",model_name=\"%s\"} %llu\n", c, model,
            (unsigned long long)m->http[c]);
    histogram(&b, "time_to_first_token_seconds", "Time from arrival to the first token.", model,
              &m->ttft);
    histogram(&b, "inter_token_latency_seconds", "Time between consecutive output tokens.", model,
              &m->itl);
    histogram(&b, "e2e_request_latency_seconds", "Time from arrival to the end of a request.",
              model, &m->e2e);
    histogram(&b, "request_queue_time_seconds",
              "Time from arrival to the first scheduling of a request.", model, &m->queue);
    pthread_mutex_unlock(&m->mu);

    gauge(&b, "kv_cache_blocks_total", "KV cache blocks in the pool.", model,
          (double)st->kv_blocks_total);
    gauge(&b, "kv_cache_blocks_used", "KV cache blocks in use.", model, (double)st->kv_blocks_used);
    gauge(&b, "kv_cache_blocks_cached", "KV cache blocks kept for prefix reuse, held or not.",
          model, (double)st->kv_blocks_cached);
    gauge(&b, "engine_tokens_per_second", "Generated tokens per second of engine busy time.", model,
          st->tok_s);
    gauge(&b, "process_peak_rss_bytes", "Peak resident memory of the server process.", model,
          (double)st->peak_rss);
    gpu_gauge(&b, "gpu_utilization_perc", "GPU busy percent over the driver's sample period.",
              model, gpus, n_gpus, 1, g_util);
    gpu_gauge(&b, "gpu_memory_used_bytes", "GPU memory in use (all processes).", model, gpus,
              n_gpus, 1, g_mem_used);
    gpu_gauge(&b, "gpu_memory_total_bytes", "GPU memory.", model, gpus, n_gpus, 1, g_mem_total);
    gpu_gauge(&b, "gpu_temperature_celsius", "GPU temperature.", model, gpus, n_gpus, 1, g_temp);
    gpu_gauge(&b, "gpu_power_watts", "GPU power draw.", model, gpus, n_gpus, 1e-3, g_power);
    gpu_gauge(&b, "gpu_sm_clock_mhz", "GPU SM clock.", model, gpus, n_gpus, 1, g_sm_clock);
    gpu_gauge(&b, "gpu_memory_clock_mhz", "GPU memory clock.", model, gpus, n_gpus, 1, g_mem_clock);
    free(model);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
