/* Options shared by `lpx run` and `lpx chat`: model, device, context and
 * sampling flags, parsed strictly (a bad number is a usage error). */
#ifndef LPX_CLI_GEN_ARGS_H
#define LPX_CLI_GEN_ARGS_H

#include "lpx.h"

#include <stdbool.h>

#define LPX_CLI_MAX_STOPS 16

typedef struct lpx_gen_args {
    const char *model, *device, *system;
    lpx_request req; /* sampling, max_tokens, stop, ignore_eos */
    const char *stops[LPX_CLI_MAX_STOPS];
    int32_t ctx, threads;
    int64_t kv_bytes;
    bool given_temp, given_top_p, given_top_k, given_rep;
} lpx_gen_args;

/* The options text for --help. */
extern const char lpx_gen_args_help[];

void lpx_gen_args_init(lpx_gen_args *g);
/* Consumes argv[*i] (and its value) when it is a shared option: returns 1,
 * 0 when it is not one, -1 on a usage error (already printed as
 * "lpx CMD: ..."). */
int lpx_gen_args_parse(lpx_gen_args *g, const char *cmd, int argc, char **argv, int *i);
/* Checks values that need no model (exit 2 on failure, message printed). */
bool lpx_gen_args_check(const lpx_gen_args *g, const char *cmd);
/* Opens the model and creates a one-sequence engine, filling sampling
 * defaults the command line left open from the model's generation config.
 * Returns 0, or the exit status after printing the error. */
int lpx_gen_args_open(lpx_gen_args *g, const char *cmd, lpx_model **m, lpx_engine **e);
/* Exit status for a failed lpx call: 2 for a bad argument, else 1. */
int lpx_gen_args_fail(const char *cmd, lpx_status st);

#endif
