#include "cli/opts.h"

#include "cli/cli_num.h"

#include <stdio.h>
#include <string.h>

bool lpx_opts_next(lpx_opts *o) {
    if (o->bad || o->help || ++o->i >= o->argc) return false;
    const char *a = o->argv[o->i];
    if (o->i == 1 && !strcmp(a, "--list-options")) return (o->list = true); /* one pass */
    o->help = !strcmp(a, "-h") || !strcmp(a, "--help");
    return !o->help;
}

/* Whether arg is one of the '|'-separated spellings in names. */
static bool is_name(const char *arg, const char *names) {
    size_t n = strlen(arg);
    for (const char *p = names;;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, arg, n)) return true;
        if (!bar) return false;
        p = bar + 1;
    }
}

/* Listing mode: prints each spelling of names; true when it did. */
static bool listed(const lpx_opts *o, const char *names, bool arg) {
    if (!o->list) return false;
    for (const char *p = names; *p;) {
        size_t len = strcspn(p, "|");
        printf("%.*s%s\n", (int)len, p, arg ? " ARG" : "");
        p += len + (p[len] == '|');
    }
    return true;
}

bool lpx_opts_flag(lpx_opts *o, const char *name) {
    return !listed(o, name, false) && !o->bad && o->i < o->argc && is_name(o->argv[o->i], name);
}

/* The value after `name` when the argument at hand is `name`; NULL otherwise, or (with a
 * usage error) when it is missing. */
static const char *value(lpx_opts *o, const char *name) {
    if (listed(o, name, true) || !lpx_opts_flag(o, name)) return NULL;
    if (o->i + 1 >= o->argc) {
        lpx_cli_opt_missing(o->cmd, o->argv[o->i]);
        o->bad = true;
        return NULL;
    }
    return o->argv[++o->i];
}

/* The spelling of the option whose value was just taken. */
static const char *opt(const lpx_opts *o) {
    return o->argv[o->i - 1];
}

bool lpx_opts_str(lpx_opts *o, const char *name, const char **out) {
    const char *v = value(o, name);
    if (v) *out = v;
    return v != NULL;
}

bool lpx_opts_num(lpx_opts *o, const char *name, double lo, double hi, double *out) {
    return lpx_opts_double(o, name, lo, false, hi, out);
}

bool lpx_opts_double(lpx_opts *o, const char *name, double lo, bool above, double hi, double *out) {
    const char *v = value(o, name);
    if (!v) return false;
    o->bad = !lpx_cli_opt_double(o->cmd, opt(o), v, lo, above, hi, out);
    return !o->bad;
}

bool lpx_opts_float(lpx_opts *o, const char *name, float lo, bool above, float hi, float *out) {
    const char *v = value(o, name);
    if (!v) return false;
    o->bad = !lpx_cli_opt_float(o->cmd, opt(o), v, lo, above, hi, out);
    return !o->bad;
}

bool lpx_opts_int(lpx_opts *o, const char *name, int64_t lo, int64_t hi, int64_t *out) {
    const char *v = value(o, name);
    if (!v) return false;
    o->bad = !lpx_cli_opt_i64(o->cmd, opt(o), v, lo, hi, out);
    return !o->bad;
}

bool lpx_opts_i32(lpx_opts *o, const char *name, int32_t lo, int32_t hi, int32_t *out) {
    const char *v = value(o, name);
    if (!v) return false;
    o->bad = !lpx_cli_opt_i32(o->cmd, opt(o), v, lo, hi, out);
    return !o->bad;
}

bool lpx_opts_i32_list(lpx_opts *o, const char *name, int32_t lo, int32_t hi, int32_t *out,
                       int32_t cap, int32_t *n) {
    const char *v = value(o, name);
    if (!v) return false;
    o->bad = !lpx_cli_opt_i32_list(o->cmd, opt(o), v, lo, hi, out, cap, n);
    return !o->bad;
}

bool lpx_opts_arg(lpx_opts *o, const char **out) {
    if (o->bad || o->list || o->i >= o->argc) return false;
    const char *a = o->argv[o->i];
    if (a[0] == '-' && a[1]) return false;
    *out = a;
    return true;
}

bool lpx_opts_kv_dtype(lpx_opts *o, lpx_kv_dtype *out) {
    const char *v;
    if (!lpx_opts_str(o, "--kv-cache-dtype", &v)) return false;
    return lpx_kv_dtype_parse(v, out) == LPX_OK ||
           lpx_opts_bad(o, "auto, bf16 or fp8 (also bfloat16, fp8_e4m3)");
}

bool lpx_opts_bad(lpx_opts *o, const char *what) {
    lpx_cli_opt_bad(o->cmd, opt(o), o->argv[o->i], what);
    o->bad = true;
    return false;
}

bool lpx_opts_fail(lpx_opts *o, const char *msg) {
    fprintf(stderr, "lpx %s: %s: %s\n", o->cmd, opt(o), msg);
    o->bad = true;
    return false;
}

bool lpx_opts_left(lpx_opts *o) {
    o->bad |= o->list;
    return !o->bad;
}

void lpx_opts_unknown(lpx_opts *o) {
    if (!lpx_opts_left(o)) return;
    lpx_cli_opt_unknown(o->cmd, o->argv[o->i]);
    o->bad = true;
}

int lpx_opts_exit(const lpx_opts *o, void (*usage)(FILE *)) {
    if (o->bad) return 2;
    usage(stdout);
    return 0;
}
