/* The reports' SVG charts (src/bench/bench_html.c): tick labels at round numbers (a step
 * of 1, 2 or 5 x 10^k, every label a multiple of it, no exponent), axes that cover the
 * data, whole counts on a histogram's count axis, and margins wide enough for the
 * widest label (a label's estimated extent stays inside the chart). */
#include "bench/bench_html.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TICKS 64

typedef struct tick {
    double x, y, v;
    char text[32];
    bool end; /* text-anchor="end": a y tick */
} tick;

/* The <text class="tick"> elements of svg, in order. */
static int ticks(const char *svg, tick *t) {
    int n = 0;
    for (const char *p = svg; (p = strstr(p, "<text class=\"tick\"")) && n < MAX_TICKS; p++) {
        tick *k = &t[n++];
        CHECK(sscanf(p, "<text class=\"tick\" x=\"%lf\" y=\"%lf\"", &k->x, &k->y) == 2);
        k->end = strstr(p, "text-anchor=\"end\"") < strchr(p, '>');
        const char *gt = strchr(p, '>') + 1, *lt = strchr(gt, '<');
        snprintf(k->text, sizeof k->text, "%.*s", (int)(lt - gt), gt);
        k->v = strtod(k->text, NULL);
    }
    return n;
}

/* Whether step is 1, 2 or 5 x 10^k. */
static bool round_step(double step) {
    double m = step / pow(10, floor(log10(step) + 1e-9));
    return fabs(m - 1) < 1e-6 || fabs(m - 2) < 1e-6 || fabs(m - 5) < 1e-6;
}

/* One axis's labels (y: the anchor-end ones): round, evenly spaced, covering lo..hi. */
static void check_axis(const tick *t, int n, bool y, double lo, double hi, bool counts) {
    double v[MAX_TICKS];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].end != y) continue;
        CHECK(!strpbrk(t[i].text, "eE")); /* no 1.68e+03 */
        v[m++] = t[i].v;
        /* the label's extent: 6.5 px a character at font-size 10 */
        double w = 6.5 * (double)strlen(t[i].text);
        double left = y ? t[i].x - w : t[i].x - w / 2, right = y ? t[i].x : t[i].x + w / 2;
        CHECK(left >= 20 && right <= 560); /* 20: the rotated y axis label */
    }
    CHECK(m >= 3 && m <= 12);
    if (m < 2) return;
    const double step = v[1] - v[0];
    CHECK(step > 0 && round_step(step));
    for (int i = 1; i < m; i++)
        CHECK(fabs(v[i] - v[i - 1] - step) < 1e-9 * fmax(1, step));
    for (int i = 0; i < m; i++)
        CHECK(fabs(v[i] / step - round(v[i] / step)) < 1e-6);
    if (counts) CHECK(step >= 1 && step == floor(step));
    CHECK(v[0] <= lo + 1e-9 && v[m - 1] >= hi - 1e-9);
}

static char *render(int kind, const double *x, const double *y, size_t n) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    const char *labels[] = {"pp512", "tg128", "decode B=16", "decode B=64", "decode B=256"};
    bench_series s = {.name = "tok/s", .x = x, .y = y, .n = n};
    if (kind == 0) bench_svg_lines(f, "lines", "batch", "tokens/s", &s, 1, true);
    if (kind == 1) bench_svg_histogram(f, "hist", "ms", y, n);
    if (kind == 2) bench_svg_bars(f, "bars", "tokens/s", labels, y, NULL, n);
    fclose(f);
    return buf;
}

int main(void) {
    tick t[MAX_TICKS];
    /* lines: x 1..256, y up to 1,680 (4 equal parts of 1.1 x max gave 1.68e+03 before) */
    const double bx[] = {1, 16, 64, 256}, by[] = {310.5, 1201.25, 1527.75, 1527.3};
    char *svg = render(0, bx, by, 4);
    int n = ticks(svg, t);
    check_axis(t, n, false, 1, 256, false);
    check_axis(t, n, true, 0, 1527.75, false);
    free(svg);
    /* small fractional values: decimals, still no exponent */
    const double fx[] = {0.5, 1.5, 2.25}, fy[] = {0.0031, 0.0123, 0.0042};
    svg = render(0, fx, fy, 3);
    n = ticks(svg, t);
    check_axis(t, n, false, 0.5, 2.25, false);
    check_axis(t, n, true, 0, 0.0123, false);
    free(svg);
    /* big values: wider left margin, the labels still inside */
    const double gy[] = {123456789.0, 987654321.0, 55555555.0};
    svg = render(0, fx, gy, 3);
    n = ticks(svg, t);
    check_axis(t, n, true, 0, 987654321.0, false);
    free(svg);
    /* histogram of 21 latencies, 7.3 to 41.9 ms: whole counts (no "5.25 requests") */
    double lat[21];
    for (int i = 0; i < 21; i++)
        lat[i] = 7.3 + 34.6 * i / 20.0;
    svg = render(1, NULL, lat, 21);
    n = ticks(svg, t);
    check_axis(t, n, false, 7.3, 41.9, false);
    check_axis(t, n, true, 0, 1, true);
    CHECK(strstr(svg, "class=\"bar\""));
    free(svg);
    /* bars: y ticks only */
    const double bars[] = {5123.4, 41.7, 655.1, 2210.0, 3980.2};
    svg = render(2, NULL, bars, 5);
    n = ticks(svg, t);
    check_axis(t, n, true, 0, 5123.4, false);
    for (int i = 0; i < n; i++)
        CHECK(t[i].end);
    free(svg);
    TEST_DONE();
}
