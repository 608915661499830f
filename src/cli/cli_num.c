/* Strict command-line numbers (cli_num.h). */
#include "cli/cli_num.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

bool lpx_cli_opt_bad(const char *cmd, const char *opt, const char *value, const char *what) {
    fprintf(stderr, "lpx %s: %s: expected %s (got '%s')\n", cmd, opt, what, value);
    return false;
}

bool lpx_cli_opt_missing(const char *cmd, const char *opt) {
    fprintf(stderr, "lpx %s: %s: needs a value\n", cmd, opt);
    return false;
}

bool lpx_cli_opt_unknown(const char *cmd, const char *arg) {
    fprintf(stderr, "lpx %s: unknown option '%s' (see lpx %s --help)\n", cmd, arg, cmd);
    return false;
}

bool lpx_cli_opt_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi,
                     int64_t *out) {
    if (lpx_cli_i64(s, lo, hi, out)) return true;
    char what[96];
    snprintf(what, sizeof what, "a whole number from %lld to %lld", (long long)lo, (long long)hi);
    return lpx_cli_opt_bad(cmd, opt, s, what);
}

bool lpx_cli_opt_i32(const char *cmd, const char *opt, const char *s, int32_t lo, int32_t hi,
                     int32_t *out) {
    int64_t v;
    if (!lpx_cli_opt_i64(cmd, opt, s, lo, hi, &v)) return false;
    *out = (int32_t)v;
    return true;
}

/* The message for a number outside [lo, hi] ((lo, hi] when `above`); a bound at +-FLT_MAX
 * is left out. */
static bool bad_number(const char *cmd, const char *opt, const char *s, double lo, bool above,
                       double hi) {
    char what[96];
    if (lo <= -FLT_MAX && hi >= FLT_MAX)
        snprintf(what, sizeof what, "a number");
    else if (hi >= FLT_MAX)
        snprintf(what, sizeof what, "a number %s %g", above ? ">" : ">=", lo);
    else if (above)
        snprintf(what, sizeof what, "a number above %g, up to %g", lo, hi);
    else
        snprintf(what, sizeof what, "a number from %g to %g", lo, hi);
    return lpx_cli_opt_bad(cmd, opt, s, what);
}

bool lpx_cli_opt_float(const char *cmd, const char *opt, const char *s, float lo, bool above,
                       float hi, float *out) {
    double v;
    /* the float, not the double, must clear an open bound: 1e-50 is 0 as a float */
    if (lpx_cli_double(s, lo, hi, &v) && !(above && (float)v <= lo)) {
        *out = (float)v;
        return true;
    }
    return bad_number(cmd, opt, s, lo, above, hi);
}

bool lpx_cli_opt_double(const char *cmd, const char *opt, const char *s, double lo, bool above,
                        double hi, double *out) {
    double v;
    if (lpx_cli_double(s, lo, hi, &v) && !(above && v <= lo)) {
        *out = v;
        return true;
    }
    return bad_number(cmd, opt, s, lo, above, hi);
}

bool lpx_cli_opt_i32_list(const char *cmd, const char *opt, const char *s, int32_t lo, int32_t hi,
                          int32_t *out, int32_t cap, int32_t *n) {
    int32_t k = 0;
    for (const char *p = s; k < cap;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < lo || v > hi || (*end && *end != ',')) break;
        out[k++] = (int32_t)v;
        if (!*end) {
            *n = k;
            return true;
        }
        p = end + 1;
    }
    char what[128];
    snprintf(what, sizeof what, "a comma-separated list of at most %d whole numbers from %d to %d",
             (int)cap, (int)lo, (int)hi);
    return lpx_cli_opt_bad(cmd, opt, s, what);
}
