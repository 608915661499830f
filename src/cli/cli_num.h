/* Strict numbers for command-line options: the whole string is the number
 * (no trailing text, no overflow, finite) and it lies in [lo, hi]; false
 * otherwise, with *out untouched. One copy for every subcommand (opts.h's
 * matchers parse with these). */
#ifndef LPX_CLI_NUM_H
#define LPX_CLI_NUM_H

#include <stdbool.h>
#include <stdint.h>

bool lpx_cli_double(const char *s, double lo, double hi, double *out);
bool lpx_cli_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool lpx_cli_i32(const char *s, int32_t lo, int32_t hi, int32_t *out);

#endif
