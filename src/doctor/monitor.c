#include "doctor/monitor.h"

#include "base/error.h"
#include "doctor/server_scrape.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB (1024.0 * 1024.0)

void lpx_monitor_limits_default(lpx_monitor_limits *l) {
    l->util_high = 95;
    l->mem_high = 95;
    l->temp_limit_c = 0;
    l->growth_bytes = 256LL * 1024 * 1024;
    l->growth_window = 30;
}

static void clause(char *text, size_t cap, const char *fmt, ...) LPX_PRINTF(3, 4);
static void clause(char *text, size_t cap, const char *fmt, ...) {
    size_t n = strlen(text);
    if (n && n + 2 < cap) {
        memcpy(text + n, "; ", 3);
        n += 2;
    }
    if (n + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text + n, cap - n, fmt, ap);
    va_end(ap);
}

unsigned lpx_monitor_alerts(const lpx_monitor_limits *l, const lpx_gpu_facts *f,
                            const lpx_gpu_sample *hist, size_t n, char *text, size_t cap) {
    text[0] = '\0';
    if (!n) return 0;
    const lpx_gpu_sample *s = &hist[n - 1];
    unsigned a = 0;
    if (s->util_gpu != LPX_TEL_NA && s->mem_used != LPX_TEL_NA && s->mem_total > 0) {
        int mem_pct = (int)(100 * s->mem_used / s->mem_total);
        if (s->util_gpu >= l->util_high && mem_pct >= l->mem_high) {
            a |= LPX_ALERT_SATURATED;
            clause(text, cap,
                   "saturated: utilisation %d%% and memory %d%% in use (limits %d%%, "
                   "%d%%)",
                   s->util_gpu, mem_pct, l->util_high, l->mem_high);
        }
    }
    int limit = l->temp_limit_c > 0                     ? l->temp_limit_c
                : f && f->temp_slowdown_c != LPX_TEL_NA ? f->temp_slowdown_c - 5
                                                        : 85;
    if (s->temp_c != LPX_TEL_NA && s->temp_c >= limit) {
        a |= LPX_ALERT_TEMP;
        clause(text, cap, "temperature %d C at or over %d C", s->temp_c, limit);
    }
    const int64_t thr = LPX_THR_SW_POWER_CAP | LPX_THR_HW_SLOWDOWN | LPX_THR_SW_THERMAL |
                        LPX_THR_HW_THERMAL | LPX_THR_HW_POWER_BRAKE;
    if (s->throttle != LPX_TEL_NA && (s->throttle & thr)) {
        char why[160];
        lpx_throttle_text(s->throttle & thr, why, sizeof why);
        a |= LPX_ALERT_THROTTLE;
        clause(text, cap, "throttling: %s", why);
    }
    size_t w = l->growth_window < 2 ? 2 : (size_t)l->growth_window;
    if (n >= w) {
        const lpx_gpu_sample *h = hist + n - w;
        bool rising = h[0].mem_used != LPX_TEL_NA;
        for (size_t i = 1; i < w && rising; i++)
            rising = h[i].mem_used != LPX_TEL_NA && h[i].mem_used >= h[i - 1].mem_used;
        int64_t grew = rising ? h[w - 1].mem_used - h[0].mem_used : 0;
        if (rising && grew >= l->growth_bytes) {
            a |= LPX_ALERT_MEM_GROWTH;
            clause(text, cap, "memory grew %.0f MiB over the last %zu samples without falling",
                   (double)grew / MIB, w);
        }
    }
    return a;
}

/* ---- the loop ----------------------------------------------------------------------- */

/* A scrape answers in milliseconds; a server that takes longer is reported as down. */
#define SCRAPE_TIMEOUT_S 5.0

typedef struct gpu_state {
    lpx_gpu_facts facts;
    lpx_gpu_sample *hist; /* [window], oldest first */
    size_t n;
    unsigned alerts;
} gpu_state;

/* The server side of a sample. Rates are taken against the last scrape that answered, so
 * a missed scrape widens the interval instead of losing tokens. */
typedef struct server_state {
    lpx_scrape last;
    bool have_last;
    bool up;    /* the scrape of this sample answered */
    bool rates; /* gen_tok_s, prompt_tok_s and interval_s hold */
    double gen_tok_s, prompt_tok_s, interval_s;
    unsigned alerts; /* 1 while the server does not answer */
    char error[512];
} server_state;

static lpx_status server_sample(const char *url, server_state *sv) {
    lpx_scrape s;
    lpx_status st = lpx_scrape_fetch(url, SCRAPE_TIMEOUT_S, &s);
    sv->up = st == LPX_OK;
    sv->rates = false;
    if (!sv->up) {
        snprintf(sv->error, sizeof sv->error, "%s", lpx_last_error());
        return st;
    }
    if (sv->have_last) {
        sv->rates = lpx_scrape_rates(&sv->last, &s, &sv->gen_tok_s, &sv->prompt_tok_s);
        sv->interval_s = s.t - sv->last.t;
    }
    sv->last = s;
    sv->have_last = true;
    return LPX_OK;
}

static void clock_text(char *buf, size_t cap) {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(buf, cap, "%H:%M:%S", &tm);
}

static void print_header(FILE *out, bool server, bool gpus) {
    fprintf(out, "# %-8s", "time");
    if (server) fprintf(out, " %8s %4s %4s %5s", "tok/s", "run", "wait", "kv%");
    if (gpus)
        fprintf(out, " %3s %4s %4s %15s %5s %13s %11s %13s  %s", "gpu", "sm%", "mem%",
                "fb used/total", "temp", "power/limit", "sm/mem MHz", "pcie rx/tx", "throttle");
    fprintf(out, "\n");
    if (!gpus) return; /* the units line: only the GPU columns have units */
    fprintf(out, "# %-8s", "");
    if (server) fprintf(out, " %8s %4s %4s %5s", "", "", "", "");
    fprintf(out, " %3s %4s %4s %15s %5s %13s %11s %13s\n", "", "", "", "GiB", "C", "W", "",
            "MB/s");
}

static void fmt_i(char *b, size_t cap, int64_t v, double scale, const char *f) {
    if (v == LPX_TEL_NA)
        snprintf(b, cap, "-");
    else
        snprintf(b, cap, f, (double)v / scale);
}

static void print_server_cols(FILE *out, const server_state *sv) {
    if (!sv->up) {
        fprintf(out, " %8s %4s %4s %5s", "down", "-", "-", "-");
        return;
    }
    char rate[16] = "-";
    if (sv->rates) snprintf(rate, sizeof rate, "%.1f", sv->gen_tok_s);
    fprintf(out, " %8s %4.0f %4.0f %5.1f", rate, sv->last.running, sv->last.waiting,
            100 * sv->last.kv_usage);
}

static void print_gpu_cols(FILE *out, const gpu_state *g, const lpx_gpu_sample *s) {
    char fb[32], used[16], tot[16], pw[32], p1[16], p2[16], clocks[32], c1[16], c2[16], pcie[32],
        rx[16], tx[16], why[160], sm[8], mu[8], tc[8];
    fmt_i(used, sizeof used, s->mem_used, MIB * 1024, "%.1f");
    fmt_i(tot, sizeof tot, s->mem_total, MIB * 1024, "%.1f");
    snprintf(fb, sizeof fb, "%s/%s", used, tot);
    fmt_i(p1, sizeof p1, s->power_mw, 1000, "%.0f");
    fmt_i(p2, sizeof p2, g->facts.power_limit_mw, 1000, "%.0f");
    snprintf(pw, sizeof pw, "%s/%s", p1, p2);
    fmt_i(c1, sizeof c1, s->sm_clock_mhz, 1, "%.0f");
    fmt_i(c2, sizeof c2, s->mem_clock_mhz, 1, "%.0f");
    snprintf(clocks, sizeof clocks, "%s/%s", c1, c2);
    fmt_i(rx, sizeof rx, s->pcie_rx_kbps, 1000, "%.0f");
    fmt_i(tx, sizeof tx, s->pcie_tx_kbps, 1000, "%.0f");
    snprintf(pcie, sizeof pcie, "%s/%s", rx, tx);
    fmt_i(sm, sizeof sm, s->util_gpu, 1, "%.0f");
    fmt_i(mu, sizeof mu, s->util_mem, 1, "%.0f");
    fmt_i(tc, sizeof tc, s->temp_c, 1, "%.0f");
    lpx_throttle_text(s->throttle & ~(int64_t)(LPX_THR_GPU_IDLE | LPX_THR_SYNC_BOOST), why,
                      sizeof why);
    if (s->throttle == LPX_TEL_NA) snprintf(why, sizeof why, "-");
    fprintf(out, " %3d %4s %4s %15s %5s %13s %11s %13s  %s", g->facts.index, sm, mu, fb, tc, pw,
            clocks, pcie, why);
}

/* One table row: the server's columns (with --url), then one GPU's (when there is one). */
static void print_row(FILE *out, const char *clk, const server_state *sv, const gpu_state *g,
                      const lpx_gpu_sample *s) {
    fprintf(out, "  %-8s", clk);
    if (sv) print_server_cols(out, sv);
    if (g) print_gpu_cols(out, g, s);
    fprintf(out, "\n");
}

static void json_num(cJSON *o, const char *k, int64_t v) {
    if (v == LPX_TEL_NA)
        cJSON_AddNullToObject(o, k);
    else
        cJSON_AddNumberToObject(o, k, (double)v);
}

static void json_opt(cJSON *o, const char *k, bool have, double v) {
    if (have)
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

/* The server's figures; the counters as read, so a reader can check the rates. */
static void server_json(cJSON *o, const char *url, const server_state *sv) {
    cJSON *j = cJSON_AddObjectToObject(o, "server");
    if (!j) return;
    const lpx_scrape *s = &sv->last;
    bool up = sv->up;
    cJSON_AddStringToObject(j, "url", url);
    cJSON_AddBoolToObject(j, "up", up);
    if (!up) cJSON_AddStringToObject(j, "error", sv->error);
    json_opt(j, "generation_tokens_total", up, s->generation_tokens);
    json_opt(j, "prompt_tokens_total", up, s->prompt_tokens);
    json_opt(j, "interval_s", sv->rates, sv->interval_s);
    json_opt(j, "generation_tokens_per_s", sv->rates, sv->gen_tok_s);
    json_opt(j, "prompt_tokens_per_s", sv->rates, sv->prompt_tok_s);
    json_opt(j, "requests_running", up, s->running);
    json_opt(j, "requests_waiting", up, s->waiting);
    json_opt(j, "kv_cache_usage_perc", up, s->kv_usage);
    json_opt(j, "kv_cache_blocks_used", up && s->kv_blocks_used >= 0, s->kv_blocks_used);
    json_opt(j, "kv_cache_blocks_total", up && s->kv_blocks_total >= 0, s->kv_blocks_total);
}

/* One JSON object a line: a GPU's sample (g set) and/or the server's (url set). */
static void print_json(FILE *out, const char *url, const server_state *sv, const gpu_state *g,
                       const lpx_gpu_sample *s, const char *alerts) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddNumberToObject(o, "time", (double)time(NULL));
    if (g) {
        cJSON_AddNumberToObject(o, "gpu", g->facts.index);
        json_num(o, "utilization_gpu_pct", s->util_gpu);
        json_num(o, "utilization_memory_pct", s->util_mem);
        json_num(o, "memory_used_bytes", s->mem_used);
        json_num(o, "memory_total_bytes", s->mem_total);
        json_num(o, "temperature_c", s->temp_c);
        json_num(o, "power_mw", s->power_mw);
        json_num(o, "power_limit_mw", g->facts.power_limit_mw);
        json_num(o, "sm_clock_mhz", s->sm_clock_mhz);
        json_num(o, "mem_clock_mhz", s->mem_clock_mhz);
        json_num(o, "pcie_rx_kbps", s->pcie_rx_kbps);
        json_num(o, "pcie_tx_kbps", s->pcie_tx_kbps);
        json_num(o, "throttle_reasons", s->throttle);
    }
    if (url) server_json(o, url, sv);
    /* The alerts holding now, a list of texts (the clauses that clause() joined
     * with "; ", which no clause contains). */
    cJSON *list = cJSON_AddArrayToObject(o, "alerts");
    for (const char *a = alerts; *a;) {
        const char *end = strstr(a, "; ");
        size_t len = end ? (size_t)(end - a) : strlen(a);
        char one[512];
        snprintf(one, sizeof one, "%.*s", (int)len, a);
        cJSON_AddItemToArray(list, cJSON_CreateString(one));
        a += len + (end ? 2 : 0);
    }
    char *txt = cJSON_PrintUnformatted(o);
    if (txt) fprintf(out, "%s\n", txt);
    free(txt);
    cJSON_Delete(o);
}

static void sleep_s(double s, volatile sig_atomic_t *stop) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR && !(stop && *stop)) {
    }
}

/* Prints the alerts of `who` ("gpu0", "server") when one starts and a note when one
 * ends, not at every sample. */
static void report_alerts(const lpx_monitor_opts *o, FILE *out, const char *who, unsigned *was,
                          unsigned now, const char *text, const char *clk) {
    if (now == *was) return;
    FILE *dst[2] = {o->json ? stderr : out, o->log};
    for (int k = 0; k < 2; k++) {
        if (!dst[k]) continue;
        if (now & ~*was)
            fprintf(dst[k], "! %s %s ALERT %s\n", clk, who, text);
        else
            fprintf(dst[k], "! %s %s alert cleared; now: %s\n", clk, who, now ? text : "no alerts");
        fflush(dst[k]);
    }
    *was = now;
}

/* One sample of the server (with --url) and of every GPU; *status set on failure. */
static void sample_once(const lpx_monitor_opts *o, FILE *out, lpx_telemetry *t, gpu_state *g, int n,
                        size_t w, server_state *sv, long k, lpx_status *status) {
    char clk[16], down[600] = "";
    clock_text(clk, sizeof clk);
    const char *url = o->metrics_url;
    if (url && k > 0) { /* sample 0's scrape was lpx_monitor_run's */
        server_sample(url, sv);
        if (!sv->up) snprintf(down, sizeof down, "unreachable: %s", sv->error);
        report_alerts(o, out, "server", &sv->alerts, sv->up ? 0 : 1, down, clk);
    }
    if (!o->json && k % 20 == 0) print_header(out, url != NULL, n > 0);
    if (n == 0) {
        if (o->json)
            print_json(out, url, sv, NULL, NULL, down);
        else
            print_row(out, clk, sv, NULL, NULL);
    }
    for (int i = 0; i < n && *status == LPX_OK; i++) {
        gpu_state *gs = &g[i];
        if (gs->n == w) memmove(gs->hist, gs->hist + 1, (w - 1) * sizeof *gs->hist), gs->n--;
        *status = lpx_telemetry_sample(t, i, &gs->hist[gs->n]);
        if (*status != LPX_OK) break;
        gs->n++;
        const lpx_gpu_sample *s = &gs->hist[gs->n - 1];
        char text[512], who[16];
        unsigned a = lpx_monitor_alerts(&o->limits, &gs->facts, gs->hist, gs->n, text, sizeof text);
        if (o->json)
            print_json(out, url, sv, gs, s, text);
        else
            print_row(out, clk, url ? sv : NULL, gs, s);
        snprintf(who, sizeof who, "gpu%d", gs->facts.index);
        report_alerts(o, out, who, &gs->alerts, a, text, clk);
    }
    fflush(out);
}

lpx_status lpx_monitor_run(const lpx_monitor_opts *o, FILE *out) {
    lpx_telemetry *t;
    LPX_TRY(lpx_telemetry_open(0, &t));
    const lpx_telemetry_state *st = lpx_telemetry_get_state(t);
    int n = st->nvml_ready ? st->nvml_device_count : 0;
    const char *why = st->nvml_ready ? "the driver reports 0 GPUs" : st->nvml_error;
    server_state sv = {0};
    lpx_status status = LPX_OK;
    /* A first scrape that fails is the user's error (wrong URL), not an alert. */
    if (n == 0 && !o->metrics_url)
        status = lpx_errorf(LPX_ERR_DEVICE, "no NVIDIA GPU to monitor (%s)", why);
    else if (o->metrics_url)
        status = server_sample(o->metrics_url, &sv);
    if (status != LPX_OK) {
        lpx_telemetry_close(t);
        return status;
    }
    if (n == 0)
        fprintf(o->json ? stderr : out, "# no NVIDIA GPU to monitor (%s): the server only\n", why);
    size_t w = o->limits.growth_window < 2 ? 2 : (size_t)o->limits.growth_window;
    gpu_state *g = n ? calloc((size_t)n, sizeof *g) : NULL;
    if (n && !g) status = lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && status == LPX_OK; i++) {
        g[i].hist = calloc(w, sizeof *g[i].hist);
        if (!g[i].hist)
            status = lpx_errorf(LPX_ERR_NOMEM, "out of memory");
        else
            status = lpx_telemetry_facts(t, i, &g[i].facts);
    }
    for (long k = 0; status == LPX_OK && (o->count <= 0 || k < o->count); k++) {
        if (o->stop && *o->stop) break;
        sample_once(o, out, t, g, n, w, &sv, k, &status);
        if (status == LPX_OK && (o->count <= 0 || k + 1 < o->count))
            sleep_s(o->interval_s, o->stop);
    }
    for (int i = 0; g && i < n; i++)
        free(g[i].hist);
    free(g);
    lpx_telemetry_close(t);
    return status;
}
