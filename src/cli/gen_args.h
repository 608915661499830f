/* The flags every command that runs a model shares, defined once:
 *   engine flags (run, chat, serve, batch, bench): model, device, threads, context size,
 *     KV budget, --kv-cache-dtype, --no-prefix-caching, --no-step-ahead,
 *     --no-device-sampling;
 *   sampling flags (run, chat): max tokens, temperature and the rest of lpx_sampling_params,
 *     stop strings, --ignore-eos, --system.
 * Each matcher takes the argument at hand of an lpx_opts loop (opts.h) when it is one of
 * its flags. */
#ifndef LPX_CLI_GEN_ARGS_H
#define LPX_CLI_GEN_ARGS_H

#include "cli/opts.h"
#include "engine/data_parallel.h"
#include "lpx.h"

#include <stdbool.h>

#define LPX_CLI_MAX_STOPS 16

typedef struct lpx_engine_args {
    const char *model;
    lpx_engine_opts eo; /* device, max_model_len, n_threads, kv_cache_bytes, kv_cache_dtype,
                           prefix_caching,
                           step_ahead, device_sampling; dev_tune/dev_trace from
                           lpx_engine_args_env */
    bool backend_only;  /* bench: no engine, so no context size or KV budget */
    bool data_parallel; /* serve, batch, bench: -dp|--data-parallel-size N is taken */
    int32_t dp;         /* its N; 0: not given */
} lpx_engine_args;

typedef struct lpx_gen_args {
    lpx_engine_args e;
    const char *system;
    lpx_request req; /* sampling, max_tokens, stop, ignore_eos */
    const char *stops[LPX_CLI_MAX_STOPS];
    bool given_temp, given_top_p, given_top_k, given_rep, given_max;
} lpx_gen_args;

/* The options texts for --help. */
extern const char lpx_engine_args_help[];
extern const char lpx_backend_args_help[]; /* the backend_only subset */
extern const char lpx_gen_args_help[];     /* sampling flags */
extern const char lpx_dp_args_help[];      /* -dp (data_parallel) */

void lpx_engine_args_init(lpx_engine_args *e);
bool lpx_engine_args_opt(lpx_opts *o, lpx_engine_args *e);
/* Checks what needs no model: -m given, a device name that parses. False after printing
 * "lpx CMD: ..." (exit 2). */
bool lpx_engine_args_check(const lpx_engine_args *e, const char *cmd);
/* The engines of --device, -dp and --threads (lpx_dp_plan_make) into plan. 0, or the exit
 * status after printing "lpx CMD: ..." (2 for a usage error). */
int lpx_engine_args_plan(const lpx_engine_args *e, const char *cmd, lpx_dp_plan *plan);
/* The developer strings of the environment into e->eo (cli_dev_env.h), and the SIGBUS
 * message naming e->model (cli_sigbus.h): every command that serves a model calls it. */
void lpx_engine_args_env(lpx_engine_args *e);

void lpx_gen_args_init(lpx_gen_args *g);
/* The engine flags and the sampling flags. */
bool lpx_gen_args_opt(lpx_opts *o, lpx_gen_args *g);
/* Opens the model and creates a one-sequence engine, filling sampling
 * defaults the command line left open from the model's generation config.
 * Returns 0, or the exit status after printing the error. */
int lpx_gen_args_open(lpx_gen_args *g, const char *cmd, lpx_model **m, lpx_engine **e);
/* Exit status for a failed lpx call: 2 for a bad argument, else 1. */
int lpx_gen_args_fail(const char *cmd, lpx_status st);

#endif
