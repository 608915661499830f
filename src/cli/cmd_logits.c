/* lpx logits: options → the job in src/bench/logits_run.c (a backend driven directly on
 * token ids) → greedy ids on stdout, speeds on stderr. */
#include "bench/logits_run.h"
#include "cli/cli_dev_env.h"
#include "cli/cli_num.h"
#include "cli/commands.h"
#include "cli/opts.h"
#include "lpx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQS 64

static void usage(FILE *f) {
    fprintf(f, "usage: lpx logits -m MODEL --ids ID,ID,... [--ids ...] [options]\n\n"
               "Runs a backend directly on token ids and writes float32 logits\n"
               "[n_tokens][vocab] of every position (sequences in the order given).\n"
               "Each --ids is one sequence; all sequences advance together, one step at a time.\n\n"
               "  -m, --model MODEL     model directory or .gguf file\n"
               "  --ids LIST            comma-separated token ids of one sequence (repeatable)\n"
               "  --device DEV          cpu (default), cuda, cuda:N\n"
               "  --mode MODE           prefill: all ids in one step (default);\n"
               "                        decode: one id per step through the KV cache\n"
               "  --chunk N[,N...]      ids per step for each sequence (overrides --mode)\n"
               "  --tail N              write only each sequence's last N positions (N rows a\n"
               "                        sequence); with --mode decode they are fed one id a step\n"
               "                        (decode at depth), the ids before them in steps of\n"
               "                        --chunk (default all)\n"
               "  --block-size N        KV block size in tokens (default 16)\n"
               "  --kv-cache-dtype D    auto (default), bf16 or fp8 (lpx run --help)\n"
               "  -t, --threads N       CPU threads, 1 to 4096 (default: all cores)\n"
               "  -o, --output FILE     write the logits there (raw little-endian float32)\n"
               "  --greedy N            then generate N tokens greedily (all sequences batched);\n"
               "                        prints one line of comma-separated ids per sequence\n"
               "  --time                print prefill and decode speed to stderr\n");
}

/* --chunk N[,N...]; *arg keeps the text for the check against the sequences. */
static bool chunk_opt(lpx_opts *a, int32_t *chunks, int32_t *n, const char **arg) {
    if (!lpx_opts_i32_list(a, "--chunk", 1, INT32_MAX, chunks, MAX_SEQS, n)) return false;
    *arg = a->argv[a->i];
    return true;
}

int cmd_logits(int argc, char **argv) {
    const char *model_path = NULL, *device = "cpu", *out_path = NULL, *mode = "prefill",
               *chunk_arg = NULL;
    const char *ids_arg[MAX_SEQS];
    int32_t chunks[MAX_SEQS], n_chunks = 0;
    int32_t n_seqs = 0, n_greedy = 0, threads = 0, block_size = 16, tail = 0;
    bool timing = false;
    lpx_kv_dtype kv = LPX_KV_AUTO;
    lpx_opts a = {.cmd = "logits", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        const char *ids;
        if (lpx_opts_flag(&a, "--time"))
            timing = true;
        else if (lpx_opts_str(&a, "--ids", &ids)) {
            if (n_seqs == MAX_SEQS) {
                fprintf(stderr, "lpx logits: at most %d sequences\n", MAX_SEQS);
                return 2;
            }
            ids_arg[n_seqs++] = ids;
        } else if (!chunk_opt(&a, chunks, &n_chunks, &chunk_arg) &&
                   !lpx_opts_str(&a, LPX_OPT_MODEL, &model_path) &&
                   !lpx_opts_str(&a, "--device", &device) && !lpx_opts_str(&a, "--mode", &mode) &&
                   !lpx_opts_str(&a, "-o|--output", &out_path) &&
                   !lpx_opts_i32(&a, "--block-size", 1, 1000000, &block_size) &&
                   !lpx_opts_kv_dtype(&a, &kv) &&
                   !lpx_opts_i32(&a, LPX_OPT_THREADS, 1, 4096, &threads) &&
                   !lpx_opts_i32(&a, "--greedy", 0, 1000000, &n_greedy) &&
                   !lpx_opts_i32(&a, "--tail", 1, INT32_MAX, &tail))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (!model_path || !n_seqs) {
        fprintf(stderr, "lpx logits: -m MODEL and --ids are required (see --help)\n");
        return 2;
    }
    if (strcmp(mode, "prefill") && strcmp(mode, "decode")) {
        fprintf(stderr, "lpx logits: --mode must be prefill or decode, not '%s'\n", mode);
        return 2;
    }
    if (chunk_arg && n_chunks != 1 && n_chunks != n_seqs) {
        lpx_cli_opt_bad("logits", "--chunk", chunk_arg, "one size or one per sequence");
        return 2;
    }
    logits_run_opts o = {.model = model_path,
                         .n_seqs = n_seqs,
                         .chunks = n_chunks ? chunks : NULL,
                         .n_chunks = n_chunks,
                         .decode = !strcmp(mode, "decode"),
                         .tail = tail,
                         .n_greedy = n_greedy,
                         .n_threads = threads,
                         .block_size = block_size,
                         .kv_dtype = kv,
                         .out_path = out_path};
    if (lpx_backend_select(device, &o.ops, &o.ordinal) != LPX_OK) {
        fprintf(stderr, "lpx logits: %s\n", lpx_last_error());
        return 2;
    }
    lpx_cli_dev_env(device, &o.tune, &o.trace);
    /* commas + 1 bounds each sequence's ids */
    size_t n_items = 0;
    for (int32_t s = 0; s < n_seqs; s++)
        for (const char *c = ids_arg[s]; *c; c++)
            n_items += *c == ',';
    size_t n_cap = n_items + (size_t)n_seqs; /* n_seqs >= 1; bounded for the int32 count */
    int32_t *all = n_cap <= INT32_MAX ? malloc(n_cap * sizeof *all) : NULL, n_ids[MAX_SEQS];
    const int32_t *ids[MAX_SEQS];
    if (!all) {
        fprintf(stderr, "lpx logits: out of memory\n");
        return 1;
    }
    for (int32_t s = 0, at = 0; s < n_seqs; at += n_ids[s++]) {
        ids[s] = all + at;
        if (!lpx_cli_opt_i32_list("logits", "--ids", ids_arg[s], 0, INT32_MAX, all + at,
                                  (int32_t)n_cap - at, &n_ids[s])) {
            free(all);
            return 2;
        }
    }
    o.ids = ids;
    o.n_ids = n_ids;
    logits_run_result r;
    lpx_status st = logits_run(&o, &r);
    free(all);
    if (st != LPX_OK) {
        fprintf(stderr, "lpx logits: %s\n", lpx_last_error());
        return 1;
    }
    if (timing)
        fprintf(stderr,
                "lpx logits: prefill %lld tokens in %lld steps, %.1f ms, %.1f tok/s (cpu time "
                "%.1f ms)\n",
                (long long)r.prefill_tokens, (long long)r.prefill_steps, 1e3 * r.prefill_s,
                (double)r.prefill_tokens / r.prefill_s, 1e3 * r.prefill_cpu_s);
    if (timing && n_greedy > 1)
        fprintf(stderr,
                "lpx logits: decode %lld tokens in %d steps of %d, %.1f ms, %.1f tok/s (cpu time "
                "%.1f ms)\n",
                (long long)r.decode_tokens, n_greedy - 1, n_seqs, 1e3 * r.decode_s,
                (double)r.decode_tokens / r.decode_s, 1e3 * r.decode_cpu_s);
    for (int32_t s = 0; s < n_seqs && n_greedy; s++) {
        for (int32_t g = 0; g < n_greedy; g++)
            printf("%s%d", g ? "," : "", r.greedy[(int64_t)s * n_greedy + g]);
        printf("\n");
    }
    free(r.greedy);
    return 0;
}
