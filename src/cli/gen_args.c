#include "cli/gen_args.h"

#include "backend/backend.h"
#include "cli/cli_dev_env.h"
#include "cli/cli_sigbus.h"
#include "cli/cli_num.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

const char lpx_backend_args_help[] =
    "  -m, --model PATH        model: .gguf file or Hugging Face directory (required)\n"
    "  --device DEV            cpu, cuda or cuda:N (default: cuda if usable, else cpu)\n"
    "  -t, --threads N         CPU threads, 1 to 4096 (default: all cores)\n"
    "  --kv-cache-dtype D      KV cache: auto (bf16 on cuda, f32 on cpu), bf16 or fp8\n"
    "                          (e4m3 + a scale per head: half the bytes of bf16)\n"
    "  --no-step-ahead         wait for each decode step before queueing the next\n"
    "  --no-device-sampling    copy each decode step's logits to the host and sample there\n";

const char lpx_engine_args_help[] =
    "  -m, --model PATH        model: .gguf file or Hugging Face directory (required)\n"
    "  --device DEV            cpu, cuda or cuda:N (default: cuda if usable, else cpu)\n"
    "  -c, --ctx-size N        max model length: prompt + output, 2 to 2147483647\n"
    "                          (also --max-model-len; default: the model's)\n"
    "  -t, --threads N         CPU threads, 1 to 4096 (default: all cores)\n"
    "  --kv-bytes N            KV cache budget in bytes (default: derived)\n"
    "  --kv-cache-dtype D      KV cache: auto (bf16 on cuda, f32 on cpu), bf16 or fp8\n"
    "                          (e4m3 + a scale per head: half the bytes of bf16)\n"
    "  --no-prefix-caching     compute every prompt in full (default: reuse the cached KV\n"
    "                          blocks of earlier requests' prefixes; --enable-prefix-caching\n"
    "                          is accepted)\n"
    "  --no-step-ahead         wait for each decode step before queueing the next\n"
    "  --no-device-sampling    copy each decode step's logits to the host and sample there\n";

const char lpx_dp_args_help[] =
    "  -dp, --data-parallel-size N  engines of the model in this process, 1 to 64\n"
    "                          (default 1; the model file is opened once): with --device\n"
    "                          cuda on cuda:0..N-1, with cpu each on threads/N threads;\n"
    "                          --device cuda:0,2 (a list) gives one engine per entry\n"
    "                          and sets N\n";

const char lpx_gen_args_help[] =
    "  -n, --max-tokens N      most tokens to generate, -1: up to the context (default:\n"
    "                          run 256, chat -1); a given N past the context is an error\n"
    "                          before any work, as in serve and batch (chat: that turn's,\n"
    "                          and the chat goes on)\n"
    "  --temp T                temperature, 0 = greedy (also --temperature; default: the\n"
    "                          model's, else 0)\n"
    "  --top-k K               keep the K most likely tokens (0 = off)\n"
    "  --top-p P               nucleus sampling, P in (0, 1] (1 = off)\n"
    "  --min-p P               drop tokens below P x the top probability (0 = off)\n"
    "  --repeat-penalty R      repetition penalty (1 = off)\n"
    "  --presence-penalty X    presence penalty (0 = off)\n"
    "  --frequency-penalty X   frequency penalty (0 = off)\n"
    "  -s, --seed S            sampling seed (default: random)\n"
    "  --stop TEXT             stop string (repeatable; never printed)\n"
    "  --ignore-eos            keep going past the end-of-sequence token\n"
    "  --system TEXT           system message (with --chat / in chat)\n";

void lpx_engine_args_init(lpx_engine_args *e) {
    memset(e, 0, sizeof *e);
    lpx_engine_opts_init(&e->eo);
}

bool lpx_engine_args_opt(lpx_opts *o, lpx_engine_args *e) {
    lpx_engine_opts *eo = &e->eo;
    if (lpx_opts_flag(o, "--no-step-ahead"))
        eo->step_ahead = -1;
    else if (lpx_opts_flag(o, "--no-device-sampling"))
        eo->device_sampling = -1;
    else if (!e->backend_only && lpx_opts_flag(o, "--no-prefix-caching"))
        eo->prefix_caching = -1;
    else if (!e->backend_only && lpx_opts_flag(o, "--enable-prefix-caching"))
        eo->prefix_caching = 1; /* vLLM's name; on by default here */
    else if (!lpx_opts_str(o, LPX_OPT_MODEL, &e->model) &&
             !lpx_opts_str(o, "--device", &eo->device) &&
             !lpx_opts_i32(o, LPX_OPT_THREADS, 1, 4096, &eo->n_threads) &&
             !lpx_opts_kv_dtype(o, &eo->kv_cache_dtype) &&
             !(e->data_parallel &&
               lpx_opts_i32(o, "-dp|--data-parallel-size", 1, LPX_DP_MAX, &e->dp)) &&
             /* the engine needs max_model_len > 1 */
             (e->backend_only ||
              (!lpx_opts_i32(o, LPX_OPT_CTX, 2, INT32_MAX, &eo->max_model_len) &&
               !lpx_opts_int(o, "--kv-bytes", 1, INT64_MAX, &eo->kv_cache_bytes))))
        return false;
    return !o->bad;
}

bool lpx_engine_args_check(const lpx_engine_args *e, const char *cmd) {
    if (!e->model) {
        fprintf(stderr, "lpx %s: -m MODEL is required (see lpx %s --help)\n", cmd, cmd);
        return false;
    }
    const lpx_backend_ops *ops;
    int ordinal;
    bool list = e->data_parallel && e->eo.device && strchr(e->eo.device, ','); /* plan's */
    if (e->eo.device && !list &&
        lpx_backend_select(e->eo.device, &ops, &ordinal) == LPX_ERR_INVALID_ARG) {
        fprintf(stderr, "lpx %s: %s\n", cmd, lpx_last_error());
        return false;
    }
    return true;
}

int lpx_engine_args_plan(const lpx_engine_args *e, const char *cmd, lpx_dp_plan *plan) {
    lpx_status st = lpx_dp_plan_make(e->eo.device, e->dp, e->eo.n_threads, plan);
    return st == LPX_OK ? 0 : lpx_gen_args_fail(cmd, st);
}

void lpx_engine_args_env(lpx_engine_args *e) {
    lpx_cli_dev_env(e->eo.device, &e->eo.dev_tune, &e->eo.dev_trace);
    lpx_cli_sigbus_model(e->model);
}

void lpx_gen_args_init(lpx_gen_args *g) {
    memset(g, 0, sizeof *g);
    lpx_engine_args_init(&g->e);
    lpx_request_init(&g->req);
    g->req.max_tokens = 256;
    g->req.stop = g->stops;
}

/* --stop TEXT: not empty, at most LPX_CLI_MAX_STOPS. */
static bool stop_opt(lpx_opts *o, lpx_gen_args *g) {
    const char *v;
    if (!lpx_opts_str(o, "--stop", &v)) return false;
    if (!*v) return lpx_opts_fail(o, "must not be empty");
    if (g->req.n_stop == LPX_CLI_MAX_STOPS) return lpx_opts_fail(o, "given too often");
    g->stops[g->req.n_stop++] = v;
    return true;
}

/* -n N: a positive count, or -1 for up to the context. */
static bool max_tokens_opt(lpx_opts *o, lpx_gen_args *g) {
    const char *v;
    int32_t n;
    if (!lpx_opts_str(o, LPX_OPT_MAX_TOKENS, &v)) return false;
    if (!lpx_cli_i32(v, -1, INT32_MAX, &n) || n == 0)
        return lpx_opts_bad(o, "a positive number of tokens, or -1");
    g->req.max_tokens = n;
    g->given_max = n > 0;
    return true;
}

bool lpx_gen_args_opt(lpx_opts *o, lpx_gen_args *g) {
    lpx_sampling_params *sp = &g->req.sampling;
    if (lpx_engine_args_opt(o, &g->e) || o->bad) return !o->bad;
    if (lpx_opts_flag(o, "--ignore-eos"))
        g->req.ignore_eos = true;
    else if (lpx_opts_float(o, LPX_OPT_TEMP, 0, false, FLT_MAX, &sp->temperature))
        g->given_temp = true;
    else if (lpx_opts_i32(o, "--top-k", 0, INT32_MAX, &sp->top_k))
        g->given_top_k = true;
    else if (lpx_opts_float(o, "--top-p", 0, true, 1, &sp->top_p))
        g->given_top_p = true;
    else if (lpx_opts_float(o, "--repeat-penalty", 0, true, FLT_MAX, &sp->repetition_penalty))
        g->given_rep = true;
    else if (!stop_opt(o, g) && !max_tokens_opt(o, g) && !lpx_opts_str(o, "--system", &g->system) &&
             !lpx_opts_int(o, "-s|--seed", 0, INT64_MAX, &sp->seed) &&
             !lpx_opts_float(o, "--min-p", 0, false, 1, &sp->min_p) &&
             !lpx_opts_float(o, "--presence-penalty", -FLT_MAX, false, FLT_MAX,
                             &sp->presence_penalty) &&
             !lpx_opts_float(o, "--frequency-penalty", -FLT_MAX, false, FLT_MAX,
                             &sp->frequency_penalty))
        return false;
    return !o->bad;
}

int lpx_gen_args_fail(const char *cmd, lpx_status st) {
    fprintf(stderr, "lpx %s: %s\n", cmd, lpx_last_error());
    return st == LPX_ERR_INVALID_ARG ? 2 : 1;
}

int lpx_gen_args_open(lpx_gen_args *g, const char *cmd, lpx_model **m, lpx_engine **e) {
    *m = NULL;
    *e = NULL;
    lpx_status st = lpx_model_open(g->e.model, m);
    if (st != LPX_OK) {
        fprintf(stderr, "lpx %s: %s\n", cmd, lpx_last_error());
        return 1;
    }
    const lpx_gen_defaults *d = &(*m)->gen;
    lpx_sampling_params *sp = &g->req.sampling;
    if (!g->given_temp && d->temperature >= 0) sp->temperature = d->temperature;
    if (!g->given_top_p && d->top_p > 0 && d->top_p <= 1) sp->top_p = d->top_p;
    if (!g->given_top_k && d->top_k >= 0) sp->top_k = d->top_k;
    if (!g->given_rep && d->repetition_penalty > 0) sp->repetition_penalty = d->repetition_penalty;
    lpx_engine_args_env(&g->e);
    lpx_engine_opts o = g->e.eo;
    o.max_num_seqs = 1;
    st = lpx_engine_create(*m, &o, e);
    if (st != LPX_OK) {
        int rc = lpx_gen_args_fail(cmd, st);
        lpx_model_close(*m);
        *m = NULL;
        return rc;
    }
    return 0;
}
