#include "cli/gen_args.h"

#include "backend/backend.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

static int usage(const char *cmd, const char *msg, const char *opt, const char *val) {
    fprintf(stderr, "lpx %s: %s %s%s%s%s\n", cmd, opt, msg, val ? " (got '" : "", val ? val : "",
            val ? "')" : "");
    return -1;
}

static bool to_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno) return false;
    *out = v;
    return true;
}

static bool to_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (!*s || *end || errno || !isfinite(v)) return false;
    *out = v;
    return true;
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
    if (*i + 1 >= argc) return usage(cmd, "needs a value", a, NULL);
    const char *v = argv[++*i];
    int64_t n;
    float f;
    lpx_sampling_params *sp = &g->req.sampling;
    if (!strcmp(a, "-m") || !strcmp(a, "--model"))
        g->model = v;
    else if (!strcmp(a, "--system"))
        g->system = v;
    else if (!strcmp(a, "--device"))
        g->device = v;
    else if (!strcmp(a, "--stop")) {
        if (!*v) return usage(cmd, "must not be empty", a, NULL);
        if (g->req.n_stop == LPX_CLI_MAX_STOPS) return usage(cmd, "given too often", a, NULL);
        g->stops[g->req.n_stop++] = v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
        if (!to_i64(v, &n) || n == 0 || n < -1 || n > INT32_MAX)
            return usage(cmd, "expects a positive number of tokens (or -1)", a, v);
        g->req.max_tokens = (int32_t)n;
    } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
        if (!to_i64(v, &n) || n < 0) return usage(cmd, "expects an integer >= 0", a, v);
        sp->seed = n;
    } else if (!strcmp(a, "--top-k")) {
        if (!to_i64(v, &n) || n < 0 || n > INT32_MAX)
            return usage(cmd, "expects an integer >= 0", a, v);
        sp->top_k = (int32_t)n;
        g->given_top_k = true;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size") || !strcmp(a, "-t") ||
               !strcmp(a, "--threads")) {
        if (!to_i64(v, &n) || n <= 0 || n > INT32_MAX)
            return usage(cmd, "expects a positive integer", a, v);
        if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            g->ctx = (int32_t)n;
        else
            g->threads = (int32_t)n;
    } else if (!strcmp(a, "--kv-bytes")) {
        if (!to_i64(v, &n) || n <= 0) return usage(cmd, "expects a positive byte count", a, v);
        g->kv_bytes = n;
    } else {
        if (!to_float(v, &f)) return usage(cmd, "expects a number", a, v);
        if (!strcmp(a, "--temp")) {
            if (f < 0) return usage(cmd, "must be >= 0", a, v);
            sp->temperature = f;
            g->given_temp = true;
        } else if (!strcmp(a, "--top-p")) {
            if (!(f > 0 && f <= 1)) return usage(cmd, "must be in (0, 1]", a, v);
            sp->top_p = f;
            g->given_top_p = true;
        } else if (!strcmp(a, "--min-p")) {
            if (!(f >= 0 && f <= 1)) return usage(cmd, "must be in [0, 1]", a, v);
            sp->min_p = f;
        } else if (!strcmp(a, "--repeat-penalty")) {
            if (!(f > 0)) return usage(cmd, "must be > 0", a, v);
            sp->repetition_penalty = f;
            g->given_rep = true;
        } else if (!strcmp(a, "--presence-penalty"))
            sp->presence_penalty = f;
        else
            sp->frequency_penalty = f;
    }
    return 1;
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
