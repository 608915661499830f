/* Summary printing, JSON and the HTML report (inline SVG, no external assets). */
#include "bench/bench_report.h"

#include "base/error.h"
#include "bench/bench_html.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void bench_print_summary(FILE *f, const bench_summary *s) {
    fprintf(f, "============ Serving Benchmark Result ============\n");
    fprintf(f, "%-40s %-10lld\n", "Successful requests:", (long long)s->completed);
    fprintf(f, "%-40s %-10lld\n", "Failed requests:", (long long)s->failed);
    fprintf(f, "%-40s %-10.2f\n", "Benchmark duration (s):", s->duration);
    fprintf(f, "%-40s %-10lld\n", "Total input tokens:", (long long)s->total_input);
    fprintf(f, "%-40s %-10lld\n", "Total generated tokens:", (long long)s->total_output);
    fprintf(f, "%-40s %-10.2f\n", "Request throughput (req/s):", s->request_throughput);
    fprintf(f, "%-40s %-10.2f\n", "Output token throughput (tok/s):", s->output_throughput);
    fprintf(f, "%-40s %-10.2f\n", "Total Token throughput (tok/s):", s->total_throughput);
    static const char *head[4] = {"Time to First Token", "Time per Output Token (excl. 1st token)",
                                  "Inter-token Latency", "End-to-end Latency"};
    static const char *abbr[4] = {"TTFT", "TPOT", "ITL", "E2EL"};
    const bench_dist *d[4] = {&s->ttft, &s->tpot, &s->itl, &s->e2e};
    for (int i = 0; i < 4; i++) {
        int pad = 50 - (int)strlen(head[i]);
        fprintf(f, "%.*s%s%.*s\n", pad / 2, "--------------------------", head[i], pad - pad / 2,
                "--------------------------");
        char k[64];
        snprintf(k, sizeof k, "Mean %s (ms):", abbr[i]);
        fprintf(f, "%-40s %-10.2f\n", k, d[i]->mean * 1e3);
        snprintf(k, sizeof k, "Median %s (ms):", abbr[i]);
        fprintf(f, "%-40s %-10.2f\n", k, d[i]->median * 1e3);
        snprintf(k, sizeof k, "P90 %s (ms):", abbr[i]);
        fprintf(f, "%-40s %-10.2f\n", k, d[i]->p90 * 1e3);
        snprintf(k, sizeof k, "P99 %s (ms):", abbr[i]);
        fprintf(f, "%-40s %-10.2f\n", k, d[i]->p99 * 1e3);
    }
    fprintf(f, "==================================================\n");
}

static void fmt_conc(char *b, size_t n, const bench_point *p) {
    if (p->max_concurrency > 0)
        snprintf(b, n, "%d", p->max_concurrency);
    else
        snprintf(b, n, "inf");
}

void bench_print_sweep(FILE *f, const bench_point *p, size_t n) {
    fprintf(f, "| max conc | rate | ok | failed | req/s | out tok/s | median TTFT ms | "
               "P99 TTFT ms | median TPOT ms | median E2EL ms |\n");
    fprintf(f, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (size_t i = 0; i < n; i++) {
        const bench_summary *s = &p[i].sum;
        char c[16], r[32];
        fmt_conc(c, sizeof c, &p[i]);
        if (isfinite(p[i].rate))
            snprintf(r, sizeof r, "%g", p[i].rate);
        else
            snprintf(r, sizeof r, "inf");
        fprintf(f, "| %s | %s | %lld | %lld | %.2f | %.1f | %.1f | %.1f | %.2f | %.1f |\n", c, r,
                (long long)s->completed, (long long)s->failed, s->request_throughput,
                s->output_throughput, s->ttft.median * 1e3, s->ttft.p99 * 1e3, s->tpot.median * 1e3,
                s->e2e.median * 1e3);
    }
}

static void add_dist(cJSON *o, const char *abbr, const bench_dist *d) {
    char k[64];
    static const char *stat[4] = {"mean", "median", "p90", "p99"};
    double v[4] = {d->mean, d->median, d->p90, d->p99};
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof k, "%s_%s_ms", stat[i], abbr);
        cJSON_AddNumberToObject(o, k, v[i] * 1e3);
    }
}

static cJSON *point_json(const bench_point *p) {
    const bench_summary *s = &p->sum;
    cJSON *o = cJSON_CreateObject();
    if (p->max_concurrency > 0)
        cJSON_AddNumberToObject(o, "max_concurrency", p->max_concurrency);
    else
        cJSON_AddNullToObject(o, "max_concurrency");
    if (isfinite(p->rate))
        cJSON_AddNumberToObject(o, "request_rate", p->rate);
    else
        cJSON_AddStringToObject(o, "request_rate", "inf");
    cJSON_AddNumberToObject(o, "completed", (double)s->completed);
    cJSON_AddNumberToObject(o, "failed", (double)s->failed);
    cJSON_AddNumberToObject(o, "duration", s->duration);
    cJSON_AddNumberToObject(o, "total_input_tokens", (double)s->total_input);
    cJSON_AddNumberToObject(o, "total_output_tokens", (double)s->total_output);
    cJSON_AddNumberToObject(o, "request_throughput", s->request_throughput);
    cJSON_AddNumberToObject(o, "output_throughput", s->output_throughput);
    cJSON_AddNumberToObject(o, "total_token_throughput", s->total_throughput);
    if (p->prefix_hit_rate >= 0)
        cJSON_AddNumberToObject(o, "prefix_cache_hit_rate", p->prefix_hit_rate);
    else
        cJSON_AddNullToObject(o, "prefix_cache_hit_rate");
    add_dist(o, "ttft", &s->ttft);
    add_dist(o, "tpot", &s->tpot);
    add_dist(o, "itl", &s->itl);
    add_dist(o, "e2el", &s->e2e);
    /* The trace: enough to recompute every statistic (tests/fixtures/bench/). */
    cJSON *reqs = cJSON_AddArrayToObject(o, "requests");
    for (size_t i = 0; i < p->run.n; i++) {
        const bench_req *r = &p->run.reqs[i];
        cJSON *q = cJSON_CreateObject();
        cJSON_AddBoolToObject(q, "ok", r->ok);
        cJSON_AddNumberToObject(q, "http_status", r->http_status);
        if (r->error[0]) cJSON_AddStringToObject(q, "error", r->error);
        cJSON_AddNumberToObject(q, "start", r->start);
        cJSON_AddNumberToObject(q, "ttft", r->ttft);
        cJSON_AddNumberToObject(q, "e2e", r->e2e);
        cJSON_AddNumberToObject(q, "input_tokens", (double)r->input_tokens);
        cJSON_AddNumberToObject(q, "output_tokens", (double)r->output_tokens);
        /* cJSON makes no array from a NULL pointer: a failed request has no chunks. */
        cJSON_AddItemToObject(q, "chunk_times",
                              r->n_chunks
                                  ? cJSON_CreateDoubleArray(r->chunk_times, (int)r->n_chunks)
                                  : cJSON_CreateArray());
        cJSON_AddItemToArray(reqs, q);
    }
    cJSON *gpu = cJSON_AddArrayToObject(o, "gpu_metrics");
    for (size_t i = 0; i < p->run.n_samples; i++) {
        const bench_sample *g = &p->run.samples[i];
        cJSON *q = cJSON_CreateObject();
        cJSON_AddNumberToObject(q, "t", g->t);
        cJSON_AddStringToObject(q, "series", g->name);
        cJSON_AddNumberToObject(q, "value", g->value);
        cJSON_AddItemToArray(gpu, q);
    }
    return o;
}

lpx_status bench_write_json(const char *path, const bench_point *p, size_t n, const bench_meta *m) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "url", m->url);
    cJSON_AddStringToObject(root, "model", m->model);
    cJSON_AddStringToObject(root, "endpoint", m->endpoint);
    cJSON_AddBoolToObject(root, "approximate_prompt_lengths", m->approx_prompts);
    cJSON *pts = cJSON_AddArrayToObject(root, "runs");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(pts, point_json(&p[i]));
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) return lpx_errorf(LPX_ERR_NOMEM, "%s: JSON", path);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(s);
        return lpx_errorf(LPX_ERR_IO, "%s: cannot write", path);
    }
    bool ok = fputs(s, f) >= 0 && fputc('\n', f) != EOF;
    ok = (fclose(f) == 0) && ok;
    free(s);
    return ok ? LPX_OK : lpx_errorf(LPX_ERR_IO, "%s: write failed", path);
}

/* ---- HTML ---------------------------------------------------------------------- */

static void summary_table(FILE *f, const bench_summary *s) {
    fprintf(f,
            "<table><tr><th>successful</th><td>%lld</td><th>failed</th><td>%lld</td>"
            "<th>duration s</th><td>%.2f</td></tr>\n",
            (long long)s->completed, (long long)s->failed, s->duration);
    fprintf(f,
            "<tr><th>input tokens</th><td>%lld</td><th>output tokens</th><td>%lld</td>"
            "<th>req/s</th><td>%.2f</td></tr>\n",
            (long long)s->total_input, (long long)s->total_output, s->request_throughput);
    fprintf(f,
            "<tr><th>output tok/s</th><td>%.1f</td><th>total "
            "tok/s</th><td>%.1f</td><td></td><td></td></tr></table>\n",
            s->output_throughput, s->total_throughput);
    fprintf(f, "<table><tr><th>ms</th><th>mean</th><th>median</th><th>P90</th><th>P99</th></tr>\n");
    const char *nm[4] = {"TTFT", "TPOT", "ITL", "E2EL"};
    const bench_dist *d[4] = {&s->ttft, &s->tpot, &s->itl, &s->e2e};
    for (int i = 0; i < 4; i++)
        fprintf(f, "<tr><th>%s</th><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td></tr>\n",
                nm[i], d[i]->mean * 1e3, d[i]->median * 1e3, d[i]->p90 * 1e3, d[i]->p99 * 1e3);
    fprintf(f, "</table>\n");
}

static lpx_status point_html(FILE *f, const bench_point *p) {
    const bench_run *r = &p->run;
    size_t n = r->n, ni = 0;
    for (size_t i = 0; i < n; i++)
        if (r->reqs[i].ok && r->reqs[i].n_chunks > 1) ni += (size_t)r->reqs[i].n_chunks - 1;
    double *ttft = malloc((3 * n + ni + 1) * sizeof *ttft);
    if (!ttft) return lpx_errorf(LPX_ERR_NOMEM, "bench report: %zu requests", n);
    double *tpot = ttft + n, *e2e = ttft + 2 * n, *itl = ttft + 3 * n;
    size_t a = 0, b = 0, c = 0;
    for (size_t i = 0; i < n; i++) {
        const bench_req *q = &r->reqs[i];
        if (!q->ok) continue;
        ttft[a] = q->ttft * 1e3;
        e2e[a++] = q->e2e * 1e3;
        if (q->output_tokens > 1)
            tpot[b++] = (q->e2e - q->ttft) / (double)(q->output_tokens - 1) * 1e3;
        for (int64_t k = 1; k < q->n_chunks; k++)
            itl[c++] = (q->chunk_times[k] - q->chunk_times[k - 1]) * 1e3;
    }
    char conc[16];
    fmt_conc(conc, sizeof conc, p);
    fprintf(f, "<h2>max concurrency %s</h2>\n", conc);
    summary_table(f, &p->sum);
    fprintf(f, "<div class=\"charts\">\n");
    bench_svg_histogram(f, "TTFT distribution", "ms", ttft, a);
    bench_svg_histogram(f, "TPOT distribution", "ms", tpot, b);
    bench_svg_histogram(f, "ITL distribution", "ms", itl, c);
    bench_svg_histogram(f, "E2E latency distribution", "ms", e2e, a);
    /* Output tokens per time bucket: each token chunk counted at its arrival. */
    enum { NB = 30 };
    double dur = p->run.duration > 0 ? p->run.duration : 1, bx[NB], by[NB];
    for (int i = 0; i < NB; i++) {
        bx[i] = dur * (i + 0.5) / NB;
        by[i] = 0;
    }
    for (size_t i = 0; i < n; i++) {
        const bench_req *q = &r->reqs[i];
        for (int64_t k = 0; q->ok && k < q->n_chunks; k++) {
            int bi = (int)((q->start + q->chunk_times[k]) / dur * NB);
            by[bi < 0 ? 0 : bi >= NB ? NB - 1 : bi] += NB / dur;
        }
    }
    bench_series ts = {"output tokens/s", bx, by, NB};
    bench_svg_lines(f, "Throughput over time", "s since start", "tokens/s", &ts, 1, false);
    /* GPU gauges: one line per series. */
    if (r->n_samples) {
        double *gx = malloc(2 * r->n_samples * sizeof *gx);
        bench_series *gs = calloc(r->n_samples, sizeof *gs);
        if (!gx || !gs) {
            free(gx);
            free(gs);
            free(ttft);
            return lpx_errorf(LPX_ERR_NOMEM, "bench report: metrics");
        }
        double *gy = gx + r->n_samples;
        size_t ns = 0, used = 0;
        for (size_t i = 0; i < r->n_samples; i++) {
            bool seen = false;
            for (size_t k = 0; k < ns; k++)
                seen |= strcmp(gs[k].name, r->samples[i].name) == 0;
            if (seen) continue;
            gs[ns].name = r->samples[i].name;
            gs[ns].x = gx + used;
            gs[ns].y = gy + used;
            for (size_t j = i; j < r->n_samples; j++)
                if (strcmp(r->samples[j].name, gs[ns].name) == 0) {
                    gx[used] = r->samples[j].t;
                    gy[used++] = r->samples[j].value;
                    gs[ns].n++;
                }
            ns++;
        }
        bench_svg_lines(f, "Server GPU metrics (lpx:gpu_*)", "s since start", "value", gs, ns,
                        true);
        free(gx);
        free(gs);
    }
    fprintf(f, "</div>\n");
    free(ttft);
    return LPX_OK;
}

lpx_status bench_write_html(const char *path, const bench_point *p, size_t n, const bench_meta *m) {
    FILE *f = fopen(path, "w");
    if (!f) return lpx_errorf(LPX_ERR_IO, "%s: cannot write", path);
    bench_html_begin(f, "lpx bench serve");
    fprintf(f, "<p>server <code>");
    bench_html_escape(f, m->url);
    fprintf(f, "</code>, model <code>");
    bench_html_escape(f, m->model);
    fprintf(f, "</code>, endpoint <code>");
    bench_html_escape(f, m->endpoint);
    fprintf(f, "</code>%s</p>\n",
            m->approx_prompts ? " (prompt lengths approximate: the server has no /tokenize)" : "");
    if (n > 1) {
        fprintf(f, "<h2>Sweep</h2>\n<div class=\"charts\">\n");
        double *x = malloc(3 * n * sizeof *x);
        if (!x) {
            fclose(f);
            return lpx_errorf(LPX_ERR_NOMEM, "bench report: sweep");
        }
        double *y1 = x + n, *y2 = x + 2 * n;
        for (size_t i = 0; i < n; i++) {
            x[i] = p[i].sum.output_throughput;
            y1[i] = p[i].sum.e2e.median * 1e3;
            y2[i] = p[i].sum.ttft.median * 1e3;
        }
        bench_series s[2] = {{"median E2E latency", x, y1, n}, {"median TTFT", x, y2, n}};
        bench_svg_lines(f, "Latency vs throughput (one point per sweep value)", "output tokens/s",
                        "ms", s, 2, true);
        free(x);
        fprintf(f, "</div>\n");
    }
    lpx_status st = LPX_OK;
    for (size_t i = 0; i < n && st == LPX_OK; i++)
        st = point_html(f, &p[i]);
    bench_html_end(f);
    if (fclose(f) != 0 && st == LPX_OK) st = lpx_errorf(LPX_ERR_IO, "%s: write failed", path);
    return st;
}
