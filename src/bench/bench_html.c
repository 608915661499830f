/* The reports' page and inline SVG charts (bench_html.h). */
#include "bench/bench_html.h"

#include <math.h>

#define W 560
#define H 260
#define ML 60 /* left margin: y tick labels */
#define MB 40 /* bottom margin: x ticks and label */
#define MT 28

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
} axes;

static double sx(const axes *a, double x) {
    return ML + (x - a->x0) / (a->x1 - a->x0) * (W - ML - 10);
}
static double sy(const axes *a, double y) {
    return H - MB - (y - a->y0) / (a->y1 - a->y0) * (H - MB - MT);
}

/* Opens the <svg>: title, axes, y grid and ticks, x ticks when xticks (a bar chart
 * labels its bars instead), axis labels. */
static void frame(FILE *f, const char *title, const char *xl, const char *yl, axes *a,
                  bool xticks) {
    if (!(a->x1 > a->x0)) a->x1 = a->x0 + 1;
    if (!(a->y1 > a->y0)) a->y1 = a->y0 + 1;
    fprintf(f,
            "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\">\n",
            W, H, W, H);
    fprintf(f, "<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", ML);
    bench_html_escape(f, title);
    fprintf(f, "</text>\n");
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", ML, H - MB,
            W - 10, H - MB);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", ML, MT, ML,
            H - MB);
    for (int i = 0; i <= 4; i++) {
        double xv = a->x0 + (a->x1 - a->x0) * i / 4, yv = a->y0 + (a->y1 - a->y0) * i / 4;
        if (xticks)
            fprintf(
                f,
                "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%.3g</text>\n",
                sx(a, xv), H - MB + 14, xv);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.3g</text>\n",
                ML - 4, sy(a, yv) + 3, yv);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>\n", ML + 1,
                sy(a, yv), W - 10, sy(a, yv));
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">", (ML + W) / 2,
            H - 6);
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
    int cnt[BINS] = {0}, top = 1;
    for (size_t i = 0; i < n; i++) {
        int b = (int)((v[i] - lo) / (hi - lo) * BINS);
        b = b < 0 ? 0 : b >= BINS ? BINS - 1 : b;
        if (++cnt[b] > top) top = cnt[b];
    }
    axes a = {lo, hi, 0, top};
    frame(f, title, xl, "count", &a, true);
    double bw = (W - ML - 10) / (double)BINS;
    for (int b = 0; b < BINS; b++)
        if (cnt[b])
            bar(f, ML + b * bw + 1, sy(&a, cnt[b]), bw - 2, sy(&a, 0) - sy(&a, cnt[b]), COLORS[0]);
    fprintf(f, "</svg>\n");
}

void bench_svg_lines(FILE *f, const char *title, const char *xl, const char *yl,
                     const bench_series *s, size_t ns, bool dots) {
    axes a = {INFINITY, -INFINITY, 0, -INFINITY};
    for (size_t k = 0; k < ns; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            a.x0 = fmin(a.x0, s[k].x[i]);
            a.x1 = fmax(a.x1, s[k].x[i]);
            a.y1 = fmax(a.y1, s[k].y[i] * 1.1);
            a.y0 = fmin(a.y0, s[k].y[i]);
        }
    if (!isfinite(a.x0)) a.x0 = 0, a.x1 = 1, a.y1 = 1;
    frame(f, title, xl, yl, &a, true);
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
    axes a = {0, 1, 0, 0};
    for (size_t i = 0; i < n; i++)
        a.y1 = fmax(a.y1, 1.1 * (v[i] + (err ? err[i] : 0)));
    frame(f, title, "", yl, &a, false);
    const double slot = (W - ML - 10) / (double)(n ? n : 1), w = slot * 0.6;
    for (size_t i = 0; i < n; i++) {
        const double cx = ML + slot * (i + 0.5);
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
