#include "cli/opts.h"

#include "cli/cli_num.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void usage_error(lpx_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void usage_error(lpx_opts *o, const char *fmt, ...) {
    fprintf(stderr, "lpx %s: ", o->cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see lpx %s --help)\n", o->cmd);
    o->bad = true;
}

bool lpx_opts_next(lpx_opts *o) {
    if (o->bad || o->help || ++o->i >= o->argc) return false;
    const char *a = o->argv[o->i];
    o->help = !strcmp(a, "-h") || !strcmp(a, "--help");
    return !o->help;
}

bool lpx_opts_flag(lpx_opts *o, const char *name) {
    return !o->bad && !strcmp(o->argv[o->i], name);
}

/* The value after `name` when the argument at hand is `name`; NULL otherwise, or (with a
 * usage error) when it is missing. */
static const char *value(lpx_opts *o, const char *name) {
    if (!lpx_opts_flag(o, name)) return NULL;
    if (o->i + 1 >= o->argc) {
        usage_error(o, "%s needs a value", name);
        return NULL;
    }
    return o->argv[++o->i];
}

bool lpx_opts_str(lpx_opts *o, const char *name, const char **out) {
    const char *v = value(o, name);
    if (v) *out = v;
    return v != NULL;
}

bool lpx_opts_num(lpx_opts *o, const char *name, double lo, double hi, double *out) {
    const char *v = value(o, name);
    if (!v) return false;
    if (!lpx_cli_double(v, lo, hi, out)) {
        usage_error(o, "%s needs a number from %g to %g (got '%s')", name, lo, hi, v);
        return false;
    }
    return true;
}

bool lpx_opts_int(lpx_opts *o, const char *name, int64_t lo, int64_t hi, int64_t *out) {
    const char *v = value(o, name);
    if (!v) return false;
    if (!lpx_cli_i64(v, lo, hi, out)) {
        usage_error(o, "%s needs a whole number from %lld to %lld (got '%s')", name, (long long)lo,
                    (long long)hi, v);
        return false;
    }
    return true;
}

void lpx_opts_unknown(lpx_opts *o) {
    if (!o->bad) usage_error(o, "unknown option '%s'", o->argv[o->i]);
}

int lpx_opts_exit(const lpx_opts *o, void (*usage)(FILE *)) {
    if (o->bad) return 2;
    usage(stdout);
    return 0;
}
