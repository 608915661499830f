/* Percentiles (numpy's linear definition, see bench_stats.h) and the run summary. */
#include "bench/bench_stats.h"

#include "base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(const double *sorted, size_t n, double q) {
    if (n == 0) return 0.0;
    double h = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(h);
    if (lo >= n - 1) return sorted[n - 1];
    return sorted[lo] + (h - (double)lo) * (sorted[lo + 1] - sorted[lo]);
}

lpx_status bench_dist_compute(const double *v, size_t n, bench_dist *d) {
    memset(d, 0, sizeof *d);
    if (n == 0) return LPX_OK;
    double *s = malloc(n * sizeof *s);
    if (!s) return lpx_errorf(LPX_ERR_NOMEM, "bench stats: %zu values", n);
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += s[i];
    d->n = (int64_t)n;
    d->mean = sum / (double)n;
    d->median = bench_percentile(s, n, 50);
    d->p90 = bench_percentile(s, n, 90);
    d->p99 = bench_percentile(s, n, 99);
    d->min = s[0];
    d->max = s[n - 1];
    free(s);
    return LPX_OK;
}

lpx_status bench_summarize(const bench_req *reqs, size_t n, double duration, bench_summary *s) {
    memset(s, 0, sizeof *s);
    s->duration = duration;
    size_t n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].ok && reqs[i].n_chunks > 1) n_itl += (size_t)(reqs[i].n_chunks - 1);
    /* One allocation for the four series: ttft[n], tpot[n], e2e[n], itl[n_itl]. */
    double *buf = malloc((3 * n + n_itl + 1) * sizeof *buf);
    if (!buf) return lpx_errorf(LPX_ERR_NOMEM, "bench stats: %zu requests", n);
    double *ttft = buf, *tpot = buf + n, *e2e = buf + 2 * n, *itl = buf + 3 * n;
    size_t nt = 0, np = 0, ni = 0;
    for (size_t i = 0; i < n; i++) {
        const bench_req *r = &reqs[i];
        if (!r->ok) {
            s->failed++;
            continue;
        }
        s->completed++;
        s->total_input += r->input_tokens;
        s->total_output += r->output_tokens;
        ttft[nt] = r->ttft;
        e2e[nt++] = r->e2e;
        if (r->output_tokens > 1) tpot[np++] = (r->e2e - r->ttft) / (double)(r->output_tokens - 1);
        for (int64_t k = 1; k < r->n_chunks; k++)
            itl[ni++] = r->chunk_times[k] - r->chunk_times[k - 1];
    }
    if (duration > 0) {
        s->request_throughput = (double)s->completed / duration;
        s->output_throughput = (double)s->total_output / duration;
        s->total_throughput = (double)(s->total_input + s->total_output) / duration;
    }
    lpx_status st = bench_dist_compute(ttft, nt, &s->ttft);
    if (st == LPX_OK) st = bench_dist_compute(tpot, np, &s->tpot);
    if (st == LPX_OK) st = bench_dist_compute(itl, ni, &s->itl);
    if (st == LPX_OK) st = bench_dist_compute(e2e, nt, &s->e2e);
    free(buf);
    return st;
}
