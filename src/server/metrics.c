#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's bucket bounds, so that a vLLM dashboard's histogram panels read lpx's once its
 * queries say `lpx:` for `vllm:` (the names differ; only the three gauges of
 * --metrics-compat vllm are exported under vLLM's own: docs/server.md). */
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

static void header(buf *b, const char *name, const char *type, const char *help) {
    put(b, "# HELP lpx:%s %s\n# TYPE lpx:%s %s\n", name, help, name, type);
}

static void gauge(buf *b, const char *name, const char *help, const char *model, double v) {
    header(b, name, "gauge", help);
    put(b, "lpx:%s{model_name=\"%s\"} %.17g\n", name, model, v);
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

/* The series read from the engines: each is rendered for the whole server
 * (no engine label) and, with several engines, once per engine (engine="i"). */
enum {
    E_RUNNING,
    E_WAITING,
    E_KV_USE, /* also under vLLM's names */
    E_PROMPT,
    E_GEN,
    E_PREEMPT,
    E_PC_QUERIES,
    E_PC_HITS,
    E_STEPS,
    E_AHEAD, /* counters */
    E_BLK_TOTAL,
    E_BLK_USED,
    E_BLK_CACHED,
    E_TOK_S,
    N_SERIES
};

static const struct {
    const char *name, *help;
    bool counter;
} series[N_SERIES] = {
    [E_RUNNING] = {"num_requests_running", "Requests in the running batch.", false},
    [E_WAITING] = {"num_requests_waiting", "Requests waiting for a batch slot.", false},
    [E_KV_USE] = {"kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).", false},
    [E_PROMPT] = {"prompt_tokens", "Prompt tokens of admitted requests.", true},
    [E_GEN] = {"generation_tokens", "Generated tokens.", true},
    [E_PREEMPT] = {"preemptions", "Requests preempted for KV cache space.", true},
    [E_PC_QUERIES] = {"prefix_cache_queries",
                      "Tokens of admitted requests looked up in the prefix cache (vLLM's name).",
                      true},
    [E_PC_HITS] = {"prefix_cache_hits", "Of those, tokens whose KV came from the prefix cache.",
                   true},
    [E_STEPS] = {"engine_steps", "Engine steps (forward passes over a batch).", true},
    [E_AHEAD] = {"engine_steps_ahead",
                 "Engine steps queued before the previous step's tokens were read (one step "
                 "ahead).",
                 true},
    [E_BLK_TOTAL] = {"kv_cache_blocks_total", "KV cache blocks in the pool.", false},
    [E_BLK_USED] = {"kv_cache_blocks_used", "KV cache blocks in use.", false},
    [E_BLK_CACHED] = {"kv_cache_blocks_cached",
                      "KV cache blocks kept for prefix reuse, held or not.", false},
    [E_TOK_S] = {"engine_tokens_per_second", "Generated tokens per second of engine busy time.",
                 false},
};

static double usage(double used, double total) {
    return total > 0 ? used / total : 0;
}

static double engine_value(const lpx_engine_stats *s, int k) {
    switch (k) {
    case E_RUNNING:
        return (double)s->n_running;
    case E_WAITING:
        return (double)s->n_waiting;
    case E_KV_USE:
        return usage(s->kv_blocks_used, s->kv_blocks_total);
    case E_PROMPT:
        return (double)s->prompt_tokens;
    case E_GEN:
        return (double)s->generated_tokens;
    case E_PREEMPT:
        return (double)s->n_preemptions;
    case E_PC_QUERIES:
        return (double)s->prefix_cache_queries;
    case E_PC_HITS:
        return (double)s->prefix_cache_hits;
    case E_STEPS:
        return (double)s->n_steps;
    case E_AHEAD:
        return (double)s->steps_ahead;
    case E_BLK_TOTAL:
        return s->kv_blocks_total;
    case E_BLK_USED:
        return s->kv_blocks_used;
    case E_BLK_CACHED:
        return s->kv_blocks_cached;
    default:
        return s->tok_s;
    }
}

/* Series k over st[n]: the server's figure is the sum, except the cache usage, which is
 * the blocks in use over the blocks of every pool. Under vLLM's names only the server's
 * figure: a gateway's endpoint picker reads one series per pod. */
static void engine_series(buf *b, const char *ns, int k, const char *model,
                          const lpx_engine_stats *st, int n) {
    bool per_engine = n > 1 && !strcmp(ns, "lpx");
    const char *sfx = series[k].counter ? "_total" : "";
    put(b, "# HELP %s:%s%s %s\n# TYPE %s:%s%s %s\n", ns, series[k].name, sfx, series[k].help, ns,
        series[k].name, sfx, series[k].counter ? "counter" : "gauge");
    double sum = 0, used = 0, total = 0;
    for (int i = 0; i < n; i++) {
        sum += engine_value(&st[i], k);
        used += st[i].kv_blocks_used;
        total += st[i].kv_blocks_total;
    }
    put(b, "%s:%s%s{model_name=\"%s\"} %.17g\n", ns, series[k].name, sfx, model,
        k == E_KV_USE ? usage(used, total) : sum);
    for (int i = 0; per_engine && i < n; i++)
        put(b, "%s:%s%s{engine=\"%d\",model_name=\"%s\"} %.17g\n", ns, series[k].name, sfx, i,
            model, engine_value(&st[i], k));
}

char *lpx_metrics_render(lpx_metrics *m, const lpx_engine_stats *st, int n_engines,
                         const char *model_name, const lpx_gpu_sample *gpus, int n_gpus) {
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
    for (int compat = 0; compat <= (m->compat_vllm ? 1 : 0); compat++)
        for (int k = E_RUNNING; k <= E_KV_USE; k++)
            engine_series(&b, compat ? "vllm" : "lpx", k, model, st, n_engines);
    for (int k = E_PROMPT; k <= E_AHEAD; k++)
        engine_series(&b, "lpx", k, model, st, n_engines);

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
    if (m->fallback) {
        header(&b, "fallback_requests_total", "counter",
               "Requests naming no model that the overload rule sent to the fallback model.");
        put(&b, "lpx:fallback_requests_total{model_name=\"%s\"} %llu\n", model,
            (unsigned long long)m->fallback_requests);
        header(&b, "fallback_switches_total", "counter",
               "Switches of the overload rule, to the fallback model and back.");
        put(&b, "lpx:fallback_switches_total{model_name=\"%s\"} %llu\n", model,
            (unsigned long long)m->fallback_switches);
        gauge(&b, "fallback_active", "1 while new requests go to the fallback model.", model,
              m->fallback_active);
        gauge(&b, "fallback_num_requests_running", "Sequences in the fallback engine's batch.",
              model, m->fallback_running);
        gauge(&b, "fallback_num_requests_waiting", "Sequences waiting in the fallback engine.",
              model, m->fallback_waiting);
        gauge(&b, "fallback_kv_cache_usage_perc",
              "Fraction of the fallback engine's KV blocks "
              "in use.",
              model, m->fallback_kv);
    }
    pthread_mutex_unlock(&m->mu);

    for (int k = E_BLK_TOTAL; k < N_SERIES; k++)
        engine_series(&b, "lpx", k, model, st, n_engines);
    /* One process: every engine reports the same figure. */
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
