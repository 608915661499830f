#include "cli/gen_args.h"

#include "backend/backend.h"
#include "cli/cli_num.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

const char lpx_gen_args_help[] =
    "  -m, --model PATH        model: .gguf file or Hugging Face directory (required)\n"
    "  -n, --max-tokens N      most tokens to generate (default 256; -1: up to the context)\n"
    "  --temp T                temperature, 0 = greedy (default: model's, else 0)\n"
    "  --top-k K               keep the K most likely tokens (0 = off)\n"
    "  --top-p P               nucleus sampling, P in (0, 1] (1 = off)\n"
    "  --min-p P               drop tokens below P x the top probability (0 = off)\n"
    "  --repeat-penalty R      repetition penalty (1 = off)\n"
    "  --presence-penalty X    presence penalty (0 = off)\n"
    "  --frequency-penalty X   frequency penalty (0 = off)\n"
    "  -s, --seed S            sampling seed (default: random)\n"
    "  --stop TEXT             stop string (repeatable; never printed)\n"
    "  --ignore-eos            keep going past the end-of-sequence token\n"
    "  --system TEXT           system message (with --chat / in chat)\n"
    "  --device DEV            cpu, cuda or cuda:N (default: cuda if usable, else cpu)\n"
    "  -c, --ctx-size N        max model length: prompt + output (default: the model's)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  --kv-bytes N            KV cache budget in bytes (default: derived)\n";

void lpx_gen_args_init(lpx_gen_args *g) {
    memset(g, 0, sizeof *g);
    lpx_request_init(&g->req);
    g->req.max_tokens = 256;
    g->req.stop = g->stops;
}

/* A usage error about option `opt`, worded as cli_num's: "lpx CMD: OPT: ...". */
static int usage(const char *cmd, const char *opt, const char *msg) {
    fprintf(stderr, "lpx %s: %s: %s\n", cmd, opt, msg);
    return -1;
}

int lpx_gen_args_parse(lpx_gen_args *g, const char *cmd, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    static const char *const with_value[] = {"-m",
                                             "--model",
                                             "-n",
                                             "--max-tokens",
                                             "--temp",
                                             "--top-k",
                                             "--top-p",
                                             "--min-p",
                                             "--repeat-penalty",
                                             "--presence-penalty",
                                             "--frequency-penalty",
                                             "-s",
                                             "--seed",
                                             "--stop",
                                             "--system",
                                             "--device",
                                             "-c",
                                             "--ctx-size",
                                             "-t",
                                             "--threads",
                                             "--kv-bytes"};
    if (!strcmp(a, "--ignore-eos")) {
        g->req.ignore_eos = true;
        return 1;
    }
    bool known = false;
    for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
        known |= !strcmp(a, with_value[k]);
    if (!known) return 0;
    if (*i + 1 >= argc) return usage(cmd, a, "needs a value");
    const char *v = argv[++*i];
    lpx_sampling_params *sp = &g->req.sampling;
    bool ok = true;
    if (!strcmp(a, "-m") || !strcmp(a, "--model"))
        g->model = v;
    else if (!strcmp(a, "--system"))
        g->system = v;
    else if (!strcmp(a, "--device"))
        g->device = v;
    else if (!strcmp(a, "--stop")) {
        if (!*v) return usage(cmd, a, "must not be empty");
        if (g->req.n_stop == LPX_CLI_MAX_STOPS) return usage(cmd, a, "given too often");
        g->stops[g->req.n_stop++] = v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
        int32_t n;
        ok = (lpx_cli_i32(v, -1, INT32_MAX, &n) && n != 0) ||
             lpx_cli_opt_bad(cmd, a, v, "a positive number of tokens, or -1");
        if (ok) g->req.max_tokens = n;
    } else if (!strcmp(a, "-s") || !strcmp(a, "--seed"))
        ok = lpx_cli_opt_i64(cmd, a, v, 0, INT64_MAX, &sp->seed);
    else if (!strcmp(a, "--top-k"))
        ok = g->given_top_k = lpx_cli_opt_i32(cmd, a, v, 0, INT32_MAX, &sp->top_k);
    else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
        ok = lpx_cli_opt_i32(cmd, a, v, 1, INT32_MAX, &g->ctx);
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        ok = lpx_cli_opt_i32(cmd, a, v, 1, INT32_MAX, &g->threads);
    else if (!strcmp(a, "--kv-bytes"))
        ok = lpx_cli_opt_i64(cmd, a, v, 1, INT64_MAX, &g->kv_bytes);
    else if (!strcmp(a, "--temp"))
        ok = g->given_temp = lpx_cli_opt_float(cmd, a, v, 0, false, FLT_MAX, &sp->temperature);
    else if (!strcmp(a, "--top-p"))
        ok = g->given_top_p = lpx_cli_opt_float(cmd, a, v, 0, true, 1, &sp->top_p);
    else if (!strcmp(a, "--min-p"))
        ok = lpx_cli_opt_float(cmd, a, v, 0, false, 1, &sp->min_p);
    else if (!strcmp(a, "--repeat-penalty"))
        ok = g->given_rep = lpx_cli_opt_float(cmd, a, v, 0, true, FLT_MAX, &sp->repetition_penalty);
    else if (!strcmp(a, "--presence-penalty"))
        ok = lpx_cli_opt_float(cmd, a, v, -FLT_MAX, false, FLT_MAX, &sp->presence_penalty);
    else
        ok = lpx_cli_opt_float(cmd, a, v, -FLT_MAX, false, FLT_MAX, &sp->frequency_penalty);
    return ok ? 1 : -1;
}

bool lpx_gen_args_check(const lpx_gen_args *g, const char *cmd) {
    if (!g->model) {
        fprintf(stderr, "lpx %s: -m MODEL is required (lpx %s --help)\n", cmd, cmd);
        return false;
    }
    const lpx_backend_ops *ops;
    int ordinal;
    if (g->device && lpx_backend_select(g->device, &ops, &ordinal) == LPX_ERR_INVALID_ARG) {
        fprintf(stderr, "lpx %s: %s\n", cmd, lpx_last_error());
        return false;
    }
    return true;
}

int lpx_gen_args_fail(const char *cmd, lpx_status st) {
    fprintf(stderr, "lpx %s: %s\n", cmd, lpx_last_error());
    return st == LPX_ERR_INVALID_ARG ? 2 : 1;
}

int lpx_gen_args_open(lpx_gen_args *g, const char *cmd, lpx_model **m, lpx_engine **e) {
    *m = NULL;
    *e = NULL;
    lpx_status st = lpx_model_open(g->model, m);
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
    lpx_engine_opts o;
    lpx_engine_opts_init(&o);
    o.device = g->device;
    o.max_num_seqs = 1;
    o.max_model_len = g->ctx;
    o.n_threads = g->threads;
    o.kv_cache_bytes = g->kv_bytes;
    st = lpx_engine_create(*m, &o, e);
    if (st != LPX_OK) {
        int rc = lpx_gen_args_fail(cmd, st);
        lpx_model_close(*m);
        *m = NULL;
        return rc;
    }
    return 0;
}
