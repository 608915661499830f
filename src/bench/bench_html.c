/* The reports' page and inline SVG charts (bench_html.h). */
#include "bench/bench_html.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define W 560
#define H 260
#define MB 40 /* bottom margin: x ticks and label */
#define MT 28
#define CHAR_W 6.5 /* a tick label character at font-size 10, at most */

static const char *COLORS[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

void bench_html_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

void bench_html_begin(FILE *f, const char *title) {
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>");
    bench_html_escape(f, title);
    fprintf(f, "</title>\n<style>body{font-family:sans-serif;margin:20px;color:#222}"
               "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;"
               "padding:3px 8px;text-align:right}.charts{display:flex;flex-wrap:wrap;gap:10px}"
               ".warn{color:#b00;font-weight:bold}"
               "svg{background:#fafafa;border:1px solid #ddd}</style></head><body>\n<h1>");
    bench_html_escape(f, title);
    fprintf(f, "</h1>\n");
}

void bench_html_end(FILE *f) {
    fprintf(f, "</body></html>\n");
}

typedef struct axes {
    double x0, x1, y0, y1;
    double xstep, ystep; /* the ticks' steps */
    double ml, mr;       /* left margin (y tick labels, y label), right margin (half the
                            last x tick label) */
} axes;

static double sx(const axes *a, double x) {
    return a->ml + (x - a->x0) / (a->x1 - a->x0) * (W - a->ml - a->mr);
}
static double sy(const axes *a, double y) {
    return H - MB - (y - a->y0) / (a->y1 - a->y0) * (H - MB - MT);
}

/* lo..hi widened to multiples of a round step (1, 2 or 5 x 10^k, at least min_step)
 * that cuts it into at most 5 parts; *step: that step. */
static void round_axis(double *lo, double *hi, double min_step, double *step) {
    if (!(*hi > *lo)) *hi = *lo + (min_step > 0 ? min_step : 1);
    const double raw = (*hi - *lo) / 5, mag = pow(10, floor(log10(raw))), m = raw / mag;
    *step = fmax((m <= 1 + 1e-9 ? 1 : m <= 2 + 1e-9 ? 2 : m <= 5 + 1e-9 ? 5 : 10) * mag, min_step);
    *lo = floor(*lo / *step + 1e-9) * *step;
    *hi = ceil(*hi / *step - 1e-9) * *step;
}

/* A tick label: the value with the decimals its step needs, never an exponent. */
static int tick_label(double v, double step, char *buf, size_t cap) {
    const int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    return snprintf(buf, cap, "%.*f", dec, fabs(v) < step * 1e-6 ? 0.0 : v);
}

/* Rounds both axes (y from 0 up when y0 is 0; counts: whole steps) and sizes the
 * margins to the widest labels, so none is cut off. */
static void round_axes(axes *a, bool xticks, double y_min_step) {
    char buf[64];
    round_axis(&a->x0, &a->x1, 0, &a->xstep);
    round_axis(&a->y0, &a->y1, y_min_step, &a->ystep);
    int wide = 0;
    for (double y = a->y0; y <= a->y1 + a->ystep / 2; y += a->ystep) {
        int n = tick_label(y, a->ystep, buf, sizeof buf);
        wide = n > wide ? n : wide;
    }
    a->ml = fmax(60, 28 + CHAR_W * wide);
    a->mr = xticks ? fmax(10, CHAR_W / 2 * tick_label(a->x1, a->xstep, buf, sizeof buf) + 4) : 10;
}

/* Opens the <svg>: title, axes, y grid and ticks, x ticks when xticks (a bar chart
 * labels its bars instead), axis labels. Tick labels are <text class="tick">. */
static void frame(FILE *f, const char *title, const char *xl, const char *yl, axes *a, bool xticks,
                  double y_min_step) {
    round_axes(a, xticks, y_min_step);
    fprintf(f,
            "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\">\n",
            W, H, W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", a->ml);
    bench_html_escape(f, title);
    fprintf(f, "</text>\n");
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n", a->ml,
            H - MB, W - a->mr, H - MB);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n", a->ml, MT,
            a->ml, H - MB);
    char buf[64];
    for (double x = a->x0; xticks && x <= a->x1 + a->xstep / 2; x += a->xstep) {
        tick_label(x, a->xstep, buf, sizeof buf);
        fprintf(f,
                "<text class=\"tick\" x=\"%.1f\" y=\"%d\" font-size=\"10\" "
                "text-anchor=\"middle\">%s</text>\n",
                sx(a, x), H - MB + 14, buf);
    }
    for (double y = a->y0; y <= a->y1 + a->ystep / 2; y += a->ystep) {
        tick_label(y, a->ystep, buf, sizeof buf);
        fprintf(f,
                "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                "text-anchor=\"end\">%s</text>\n",
                a->ml - 4, sy(a, y) + 3, buf);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                a->ml + 1, sy(a, y), W - a->mr, sy(a, y));
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">",
            (a->ml + W - a->mr) / 2, H - 6);
    bench_html_escape(f, xl);
    fprintf(f,
            "</text>\n<text x=\"12\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 12 %d)\">",
            (H - MB + MT) / 2, (H - MB + MT) / 2);
    bench_html_escape(f, yl);
    fprintf(f, "</text>\n");
}

static void bar(FILE *f, double x, double y, double w, double h, const char *col) {
    fprintf(f,
            "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
            "fill=\"%s\"/>\n",
            x, y, w, h, col);
}

void bench_svg_histogram(FILE *f, const char *title, const char *xl, const double *v, size_t n) {
    enum { BINS = 20 };
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        lo = fmin(lo, v[i]);
        hi = fmax(hi, v[i]);
    }
    if (n == 0) lo = 0, hi = 1;
    if (hi <= lo) hi = lo + 1e-3;
    double step;
    round_axis(&lo, &hi, 0, &step); /* bins over the axis the ticks show */
    int cnt[BINS] = {0}, top = 1;
    for (size_t i = 0; i < n; i++) {
        int b = (int)((v[i] - lo) / (hi - lo) * BINS);
        b = b < 0 ? 0 : b >= BINS ? BINS - 1 : b;
        if (++cnt[b] > top) top = cnt[b];
    }
    axes a = {.x0 = lo, .x1 = hi, .y0 = 0, .y1 = top};
    frame(f, title, xl, "count", &a, true, 1);
    double bw = (W - a.ml - a.mr) / (double)BINS;
    for (int b = 0; b < BINS; b++)
        if (cnt[b])
            bar(f, a.ml + b * bw + 1, sy(&a, cnt[b]), bw - 2, sy(&a, 0) - sy(&a, cnt[b]),
                COLORS[0]);
    fprintf(f, "</svg>\n");
}

void bench_svg_lines(FILE *f, const char *title, const char *xl, const char *yl,
                     const bench_series *s, size_t ns, bool dots) {
    axes a = {.x0 = INFINITY, .x1 = -INFINITY, .y0 = 0, .y1 = -INFINITY};
    for (size_t k = 0; k < ns; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            a.x0 = fmin(a.x0, s[k].x[i]);
            a.x1 = fmax(a.x1, s[k].x[i]);
            a.y1 = fmax(a.y1, s[k].y[i] * 1.1);
            a.y0 = fmin(a.y0, s[k].y[i]);
        }
    if (!isfinite(a.x0)) a.x0 = 0, a.x1 = 1, a.y1 = 1;
    frame(f, title, xl, yl, &a, true, 0);
    for (size_t k = 0; k < ns; k++) {
        const char *col = COLORS[k % 6];
        fprintf(f,
                "<polyline class=\"line\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
                col);
        for (size_t i = 0; i < s[k].n; i++)
            fprintf(f, "%.1f,%.1f ", sx(&a, s[k].x[i]), sy(&a, s[k].y[i]));
        fprintf(f, "\"/>\n");
        if (dots)
            for (size_t i = 0; i < s[k].n; i++)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n",
                        sx(&a, s[k].x[i]), sy(&a, s[k].y[i]), col);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"%s\" text-anchor=\"end\">",
                W - 12, MT + 12 * (int)(k + 1), col);
        bench_html_escape(f, s[k].name);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}

void bench_svg_bars(FILE *f, const char *title, const char *yl, const char *const *labels,
                    const double *v, const double *err, size_t n) {
    axes a = {.x0 = 0, .x1 = 1, .y0 = 0, .y1 = 0};
    for (size_t i = 0; i < n; i++)
        a.y1 = fmax(a.y1, 1.1 * (v[i] + (err ? err[i] : 0)));
    frame(f, title, "", yl, &a, false, 0);
    const double slot = (W - a.ml - a.mr) / (double)(n ? n : 1), w = slot * 0.6;
    for (size_t i = 0; i < n; i++) {
        const double cx = a.ml + slot * (i + 0.5);
        bar(f, cx - w / 2, sy(&a, v[i]), w, sy(&a, 0) - sy(&a, v[i]), COLORS[i % 6]);
        if (err && err[i] > 0) {
            const double lo = sy(&a, fmax(v[i] - err[i], 0)), hi = sy(&a, v[i] + err[i]);
            fprintf(f,
                    "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fh8M%.1f %.1fh8\" stroke=\"#222\" "
                    "fill=\"none\"/>\n",
                    cx, lo, hi, cx - 4, lo, cx - 4, hi);
        }
        /* The value above the bar (above its whisker). */
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%.4g</text>\n",
                cx, sy(&a, v[i] + (err ? fmax(err[i], 0) : 0)) - 4, v[i]);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">", cx,
                H - MB + 14);
        bench_html_escape(f, labels[i]);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}
