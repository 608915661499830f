/* Building blocks of the self-contained HTML reports of lpx bench and lpx bench serve:
 * the page, HTML escaping and inline SVG charts (no scripts, no external assets).
 * Every chart is an <svg class="chart">; its marks are rect.bar (bars) and
 * polyline.line (lines), which the report tests look for. */
#ifndef LPX_BENCH_HTML_H
#define LPX_BENCH_HTML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Writes s with <, >, & and " escaped. */
void bench_html_escape(FILE *f, const char *s);

/* The page head (title escaped, the reports' style sheet) and <h1>title</h1>. */
void bench_html_begin(FILE *f, const char *title);
void bench_html_end(FILE *f);

/* One line of a line chart: n points (x[i], y[i]). */
typedef struct bench_series {
    const char *name;
    const double *x, *y;
    size_t n;
} bench_series;

/* A line chart of ns series, with a dot on every point when dots is set. */
void bench_svg_lines(FILE *f, const char *title, const char *xl, const char *yl,
                     const bench_series *s, size_t ns, bool dots);

/* A histogram of v[n] in 20 bins (x axis label xl). */
void bench_svg_histogram(FILE *f, const char *title, const char *xl, const double *v, size_t n);

/* A bar chart: bar i has height v[i] and its label under it; err, when given, draws
 * a ± err[i] whisker on each bar. */
void bench_svg_bars(FILE *f, const char *title, const char *yl, const char *const *labels,
                    const double *v, const double *err, size_t n);

#endif
