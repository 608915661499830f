/* Strict command-line numbers (cli_num.h). */
#include "cli/cli_num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

bool lpx_cli_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

bool lpx_cli_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool lpx_cli_i32(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    int64_t v;
    if (!lpx_cli_i64(s, lo, hi, &v)) return false;
    *out = (int32_t)v;
    return true;
}
