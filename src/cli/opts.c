#include "cli/opts.h"

#include "cli/cli_num.h"

#include <stdio.h>
#include <string.h>

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
        lpx_cli_opt_missing(o->cmd, name);
        o->bad = true;
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
    o->bad = !lpx_cli_opt_double(o->cmd, name, v, lo, false, hi, out);
    return !o->bad;
}

bool lpx_opts_int(lpx_opts *o, const char *name, int64_t lo, int64_t hi, int64_t *out) {
    const char *v = value(o, name);
    if (!v) return false;
    o->bad = !lpx_cli_opt_i64(o->cmd, name, v, lo, hi, out);
    return !o->bad;
}

void lpx_opts_unknown(lpx_opts *o) {
    if (o->bad) return;
    lpx_cli_opt_unknown(o->cmd, o->argv[o->i]);
    o->bad = true;
}

int lpx_opts_exit(const lpx_opts *o, void (*usage)(FILE *)) {
    if (o->bad) return 2;
    usage(stdout);
    return 0;
}
