/* The Prometheus text exposition format (0.0.4), one sample line at a time: what monitor
 * and bench serve read from a server's /metrics. */
#ifndef LPX_TELEMETRY_PROM_TEXT_H
#define LPX_TELEMETRY_PROM_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* One sample line of a Prometheus text exposition: `name{label="value",...} value
 * [timestamp]`. series_len covers the name and its labels. */
typedef struct lpx_prom_sample {
    size_t name_len, series_len;
    bool has_value; /* a number follows the series on the same line */
    double value;
} lpx_prom_sample;

/* Splits the line [line, eol) of a NUL-terminated text; false for a comment or labels that do not
 * close. The one line parser of /metrics text (monitor's lpx_scrape_parse, bench serve's gauge
 * scrape). */
bool lpx_prom_line(const char *line, const char *eol, lpx_prom_sample *out);

#endif
