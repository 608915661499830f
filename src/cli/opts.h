/* The option parser of every subcommand: one loop, one line per option, one wording for
 * every usage error.
 *
 *     lpx_opts a = {.cmd = "monitor", .argc = argc, .argv = argv};
 *     while (lpx_opts_next(&a)) {
 *         if (lpx_opts_flag(&a, "--json"))
 *             json = true;
 *         else if (lpx_opts_num(&a, "--interval", 0.05, 86400, &v))
 *             interval = v;
 *         else
 *             lpx_opts_unknown(&a);
 *     }
 *     if (a.help || a.bad) return lpx_opts_exit(&a, usage);
 *
 * NAME is one spelling or several separated by '|' ("-c|--ctx-size|--max-model-len"); the
 * messages name the spelling given. A matcher returns true when argv holds its option with
 * a good value, which it then consumes; a missing or bad value prints "lpx CMD: ..."
 * (cli_num.h's wording, as every subcommand words it) and sets `bad`, after which every
 * matcher returns false and the loop ends.
 *
 * `lpx CMD --list-options` (first after CMD) runs the loop once in listing mode: each
 * matcher prints its spellings, a line each ("NAME", or "NAME ARG" when it takes a
 * value), and matches nothing; lpx_opts_unknown (or lpx_opts_left) then ends the loop
 * and the command exits 2, silently. Shell completion (lpx completion bash) is generated
 * from it. */
#ifndef LPX_CLI_OPTS_H
#define LPX_CLI_OPTS_H

#include "lpx.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The spellings of values several commands take, each under its own range (gen_args.h
 * holds the shared flags themselves). */
#define LPX_OPT_MODEL "-m|--model"
#define LPX_OPT_CTX "-c|--ctx-size|--max-model-len"
#define LPX_OPT_THREADS "-t|--threads"
#define LPX_OPT_TEMP "--temp|--temperature"
#define LPX_OPT_MAX_TOKENS "-n|--max-tokens"

typedef struct lpx_opts {
    const char *cmd; /* for messages: "lpx CMD: ..." */
    int argc;
    char **argv;
    int i;     /* argv index of the option at hand; 0 before the first */
    bool help; /* -h or --help was given */
    bool bad;  /* a usage error was printed */
    bool list; /* --list-options: matchers print their names */
} lpx_opts;

/* Steps to the next argument; false at the end, at -h/--help, or after a usage error. */
bool lpx_opts_next(lpx_opts *o);
bool lpx_opts_flag(lpx_opts *o, const char *name);
bool lpx_opts_str(lpx_opts *o, const char *name, const char **out);
/* A number in [lo, hi]. */
bool lpx_opts_num(lpx_opts *o, const char *name, double lo, double hi, double *out);
/* A number in [lo, hi], or (lo, hi] when `above` (cli_num.h's float and double rules). */
bool lpx_opts_double(lpx_opts *o, const char *name, double lo, bool above, double hi, double *out);
bool lpx_opts_float(lpx_opts *o, const char *name, float lo, bool above, float hi, float *out);
/* A whole number in [lo, hi]. */
bool lpx_opts_int(lpx_opts *o, const char *name, int64_t lo, int64_t hi, int64_t *out);
bool lpx_opts_i32(lpx_opts *o, const char *name, int32_t lo, int32_t hi, int32_t *out);
/* "N,N,...": 1 to cap whole numbers in [lo, hi]. */
bool lpx_opts_i32_list(lpx_opts *o, const char *name, int32_t lo, int32_t hi, int32_t *out,
                       int32_t cap, int32_t *n);
/* --kv-cache-dtype auto|bf16|fp8 (lpx_kv_dtype_parse's names). */
bool lpx_opts_kv_dtype(lpx_opts *o, lpx_kv_dtype *out);
/* An argument that is not an option (no leading '-', or "-" alone). */
bool lpx_opts_arg(lpx_opts *o, const char **out);
/* After a matcher took a value its own rules refuse: prints "lpx CMD: OPT: expected WHAT
 * (got 'VALUE')", sets `bad` and returns false. */
bool lpx_opts_bad(lpx_opts *o, const char *what);
/* The same with a message of its own: "lpx CMD: OPT: MSG". */
bool lpx_opts_fail(lpx_opts *o, const char *msg);
/* Whether the argument at hand is left for the caller to report in its own words (no
 * matcher took it); false after a usage error and in listing mode, which it ends. */
bool lpx_opts_left(lpx_opts *o);
/* Reports the argument at hand as unknown (no matcher took it). */
void lpx_opts_unknown(lpx_opts *o);
/* After the loop, on help or a usage error: prints usage(stdout) for help; returns the
 * exit status (0 help, 2 usage error). */
int lpx_opts_exit(const lpx_opts *o, void (*usage)(FILE *));

#endif
