/* lpx bench's HTML report (bench_engine_report.h). */
#include "bench/bench_engine_report.h"

#include "base/error.h"
#include "bench/bench_html.h"

#include <stdio.h>
#include <stdlib.h>

static void clocks_row(FILE *f, const char *when, const bench_engine_clocks *c) {
    fprintf(f, "<tr><th>%s</th>", when);
    if (c->ok) {
        fprintf(f, "<td>%d</td><td>%d</td><td>", c->sm_mhz, c->mem_mhz);
        bench_html_escape(f, c->throttle && c->throttle[0] ? c->throttle : "none");
        fprintf(f, "</td></tr>\n");
    } else {
        fprintf(f, "<td colspan=\"3\">not available (no NVML)</td></tr>\n");
    }
}

lpx_status bench_engine_write_html(const char *path, const bench_engine_meta *m,
                                   const bench_engine_row *rows, size_t n) {
    /* Chart data: labels and values per test, and the decode tests over B. */
    const char **labels = malloc((n + 1) * sizeof *labels);
    double *v = malloc((6 * n + 1) * sizeof *v);
    if (!labels || !v) {
        free(labels);
        free(v);
        return lpx_errorf(LPX_ERR_NOMEM, "%s: %zu tests", path, n);
    }
    double *sd = v + n, *pct = v + 2 * n, *bx = v + 3 * n, *by = v + 4 * n, *bms = v + 5 * n;
    size_t nd = 0;
    int depth = -1; /* the over-B charts: decode tests at the first depth */
    for (size_t i = 0; i < n; i++) {
        labels[i] = rows[i].test;
        v[i] = rows[i].tok_s;
        sd[i] = rows[i].tok_s_sd;
        pct[i] = rows[i].pct_of_floor;
        if (!rows[i].prefill && depth < 0) depth = rows[i].depth;
        if (!rows[i].prefill && rows[i].depth == depth) {
            bx[nd] = rows[i].batch;
            by[nd] = rows[i].tok_s;
            bms[nd++] = rows[i].ms_per_step;
        }
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        free(labels);
        free(v);
        return lpx_errorf(LPX_ERR_IO, "%s: cannot write", path);
    }
    bench_html_begin(f, "lpx bench");
    fprintf(f, "<p>model <code>");
    bench_html_escape(f, m->model);
    fprintf(f, "</code>, device <code>");
    bench_html_escape(f, m->device);
    fprintf(f, "</code> (");
    bench_html_escape(f, m->gpu);
    fprintf(f,
            "), read bandwidth %.1f GB/s; -p %d -n %d -d %s, KV cache %s, median of %d "
            "repetitions after one warm-up; decode steps: %s</p>\n",
            m->read_bandwidth / 1e9, m->p, m->n, m->depths, m->kv_dtype, m->reps, m->decode);
    if (m->throttled)
        fprintf(f, "<p class=\"warn\">THROTTLED during the run: these timings are not a "
                   "result.</p>\n");
    fprintf(f, "<table id=\"results\"><tr><th>test</th><th>batch</th><th>tok/s</th><th>± sd</th>"
               "<th>ms/step</th><th>floor ms/step</th><th>%% of floor</th><th>effective GB/s</th>"
               "</tr>\n");
    for (size_t i = 0; i < n; i++) {
        const bench_engine_row *r = &rows[i];
        fprintf(f, "<tr><td>");
        bench_html_escape(f, r->test);
        /* Bytes the floor counts, over the time taken: pct_of_floor of the bandwidth. */
        fprintf(f,
                "</td><td>%d</td><td>%.2f</td><td>%.2f</td><td>%.4f</td><td>%.4f</td><td>%.1f"
                "</td><td>%.2f</td></tr>\n",
                r->batch, r->tok_s, r->tok_s_sd, r->ms_per_step, r->floor_ms_per_step,
                r->pct_of_floor, r->pct_of_floor / 100 * m->read_bandwidth / 1e9);
    }
    fprintf(f, "</table>\n<table id=\"clocks\"><tr><th>clocks</th><th>SM MHz</th><th>memory "
               "MHz</th><th>throttle reasons</th></tr>\n");
    clocks_row(f, "before", &m->before);
    clocks_row(f, "after", &m->after);
    fprintf(f, "</table>\n<div class=\"charts\">\n");
    bench_svg_bars(f, "Tokens/s per test (± sd)", "tokens/s", labels, v, sd, n);
    bench_svg_bars(f, "Share of the bandwidth floor", "% of floor", labels, pct, NULL, n);
    if (nd > 1) {
        bench_series s = {"decode tokens/s", bx, by, nd}, t = {"ms per step", bx, bms, nd};
        bench_svg_lines(f, "Decode tokens/s over the batch size", "batch size (sequences)",
                        "tokens/s", &s, 1, true);
        bench_svg_lines(f, "Decode step time over the batch size", "batch size (sequences)", "ms",
                        &t, 1, true);
    }
    fprintf(f, "</div>\n");
    bench_html_end(f);
    free(labels);
    free(v);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    return ok ? LPX_OK : lpx_errorf(LPX_ERR_IO, "%s: write failed", path);
}
