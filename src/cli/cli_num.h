/* Strict numbers for command-line options: the whole string is the number
 * (no trailing text, no overflow, finite) and it lies in [lo, hi]; false
 * otherwise, with *out untouched. One copy for every subcommand (opts.h's
 * matchers parse with these).
 *
 * The lpx_cli_opt_* forms take the value of option OPT of `lpx CMD` and, on a
 * bad value, print the one message every subcommand uses,
 *     lpx CMD: OPT: expected WHAT (got 'VALUE')
 * and return false; the caller then exits with 2. An option without its value and
 * an unknown option are reported as
 *     lpx CMD: OPT: needs a value
 *     lpx CMD: unknown option 'ARG' (see lpx CMD --help) */
#ifndef LPX_CLI_NUM_H
#define LPX_CLI_NUM_H

#include <stdbool.h>
#include <stdint.h>

bool lpx_cli_double(const char *s, double lo, double hi, double *out);
bool lpx_cli_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool lpx_cli_i32(const char *s, int32_t lo, int32_t hi, int32_t *out);

/* Print the messages above and return false. */
bool lpx_cli_opt_bad(const char *cmd, const char *opt, const char *value, const char *what);
bool lpx_cli_opt_missing(const char *cmd, const char *opt);
bool lpx_cli_opt_unknown(const char *cmd, const char *arg);
bool lpx_cli_opt_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi,
                     int64_t *out);
bool lpx_cli_opt_i32(const char *cmd, const char *opt, const char *s, int32_t lo, int32_t hi,
                     int32_t *out);
/* A float in [lo, hi], or in (lo, hi] when `above`; hi <= FLT_MAX keeps it finite as a
 * float, and the message leaves out a bound at +-FLT_MAX. */
bool lpx_cli_opt_float(const char *cmd, const char *opt, const char *s, float lo, bool above,
                       float hi, float *out);
/* The same for a double (the message leaves out a bound at +-FLT_MAX as well). */
bool lpx_cli_opt_double(const char *cmd, const char *opt, const char *s, double lo, bool above,
                        double hi, double *out);
/* "N,N,...": 1 to cap whole numbers in [lo, hi] into out[0 .. *n). */
bool lpx_cli_opt_i32_list(const char *cmd, const char *opt, const char *s, int32_t lo, int32_t hi,
                          int32_t *out, int32_t cap, int32_t *n);

#endif
