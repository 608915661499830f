/* lpx logits: a developer tool that drives a backend directly, without the
 * engine: it feeds token ids through one or more sequences (all of them in
 * each step), writes the float32 logits of every position, and can continue
 * greedily. Used by the backend conformance tests. */
#include "backend/backend.h"
#include "cli/cli_dev_env.h"
#include "cli/cli_num.h"
#include "cli/commands.h"
#include "cli/opts.h"
#include "lpx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* "lpx logits: WHAT: the error" (what "": the error alone, which names its file). */
static int fail(const char *what) {
    fprintf(stderr, "lpx logits: %s%s%s\n", what, *what ? ": " : "", lpx_last_error());
    return 1;
}

static double now_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct seq {
    int32_t *ids; /* prompt ids, then generated ones: [n_ids + n_greedy] */
    int32_t n_ids, chunk, done, *blocks;
    int32_t keep; /* first position whose logits are kept (--tail) */
    int32_t fed;  /* ids the last step fed */
} seq;

typedef struct run {
    lpx_backend *b;
    int32_t n_seqs, vocab, max_blocks;
    bool tail_decode; /* --tail with --mode decode: kept positions fed one a step */
    seq *seqs;
    int32_t *tokens, *positions, *seq_start, *seq_len, *table, *rows;
    float *logits; /* [max batch tokens][vocab] */
} run;

/* One step: each sequence in `active` feeds its next `want` ids (clamped to
 * what is left of `upto`); logits for every fed token land in r->logits in
 * batch order. Returns the number of tokens fed (0: nothing left). */
static lpx_status step(run *r, int32_t upto_greedy, int32_t *n_fed) {
    int32_t n = 0, ns = 0, nl = 0;
    for (int32_t s = 0; s < r->n_seqs; s++) {
        seq *q = &r->seqs[s];
        int32_t end = q->n_ids + upto_greedy, take = end - q->done;
        q->fed = 0;
        if (take <= 0) continue;
        if (take > q->chunk) take = q->chunk;
        if (r->tail_decode) { /* the ids before keep in chunks, those from it one a step */
            if (q->done < q->keep && take > q->keep - q->done) take = q->keep - q->done;
            if (q->done >= q->keep) take = 1;
        }
        q->fed = take;
        r->seq_start[ns] = n;
        for (int32_t i = 0; i < take; i++, n++) {
            r->tokens[n] = q->ids[q->done + i];
            r->positions[n] = q->done + i;
            if (q->done + i >= q->keep) r->rows[nl++] = n;
        }
        r->seq_len[ns] = q->done + take;
        memcpy(r->table + (int64_t)ns * r->max_blocks, q->blocks,
               (size_t)r->max_blocks * sizeof(int32_t));
        ns++;
    }
    *n_fed = n;
    if (!n) return LPX_OK;
    r->seq_start[ns] = n;
    lpx_batch bt = {n,          r->tokens, r->positions,  ns, r->seq_start,
                    r->seq_len, r->table,  r->max_blocks, nl, r->rows};
    return lpx_backend_run(r->b, &(lpx_step){.batch = &bt, .logits = r->logits});
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
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
    const lpx_backend_ops *ops;
    int ordinal;
    if (lpx_backend_select(device, &ops, &ordinal) != LPX_OK) {
        fprintf(stderr, "lpx logits: %s\n", lpx_last_error());
        return 2;
    }

    int rc = 1;
    run r = {0};
    r.n_seqs = n_seqs;
    const bool decode = !strcmp(mode, "decode");
    r.tail_decode = tail > 0 && decode;
    r.seqs = calloc((size_t)n_seqs, sizeof *r.seqs);
    lpx_model *m = NULL;
    FILE *out = NULL;
    if (!r.seqs) goto oom;
    int64_t total_ids = 0, max_step = 0;
    for (int32_t s = 0; s < n_seqs; s++) {
        seq *q = &r.seqs[s];
        int32_t n_items = 1; /* commas + 1 bounds the ids; the greedy ones go after them */
        for (const char *c = ids_arg[s]; *c; c++)
            n_items += *c == ',';
        q->ids = malloc(((size_t)n_items + (size_t)n_greedy) * sizeof *q->ids);
        if (!q->ids) goto oom;
        if (!lpx_cli_opt_i32_list("logits", "--ids", ids_arg[s], 0, INT32_MAX, q->ids, n_items,
                                  &q->n_ids)) {
            rc = 2;
            goto done;
        }
        q->chunk = n_chunks               ? chunks[n_chunks == 1 ? 0 : s]
                   : decode && !r.tail_decode ? 1
                                              : q->n_ids;
        q->keep = tail && tail < q->n_ids ? q->n_ids - tail : 0;
        total_ids += q->n_ids;
        max_step += q->chunk < q->n_ids ? q->chunk : q->n_ids;
    }

    if (lpx_model_open(model_path, &m) != LPX_OK) {
        rc = fail("");
        goto done;
    }
    r.vocab = m->cfg.vocab_size;
    /* Each sequence gets its own blocks, interleaved with the others' and in
     * descending order, so the block table is really followed. */
    int64_t longest = 0, n_blocks = 0;
    for (int s = 0; s < n_seqs; s++)
        if (r.seqs[s].n_ids + n_greedy > longest) longest = r.seqs[s].n_ids + n_greedy;
    r.max_blocks = (int32_t)((longest + block_size - 1) / block_size);
    n_blocks = (int64_t)r.max_blocks * n_seqs;
    if (n_blocks > INT32_MAX / 2) {
        fprintf(stderr, "lpx logits: %lld KV blocks: too many\n", (long long)n_blocks);
        goto done;
    }
    for (int s = 0; s < n_seqs; s++) {
        r.seqs[s].blocks = malloc((size_t)r.max_blocks * sizeof(int32_t));
        if (!r.seqs[s].blocks) goto oom;
        for (int32_t i = 0; i < r.max_blocks; i++)
            r.seqs[s].blocks[i] = (int32_t)(n_blocks - 1 - ((int64_t)i * n_seqs + s));
    }
    if (max_step < n_seqs) max_step = n_seqs;
    lpx_backend_opts o = {.device = ordinal,
                          .n_threads = threads,
                          .block_size = block_size,
                          .n_blocks = (int32_t)n_blocks,
                          .max_batch_tokens = (int32_t)max_step,
                          .max_seqs = n_seqs,
                          .kv_dtype = kv};
    lpx_cli_dev_env(device, &o.tune, &o.trace);
    r.tokens = malloc((size_t)max_step * sizeof(int32_t));
    r.positions = malloc((size_t)max_step * sizeof(int32_t));
    r.rows = malloc((size_t)max_step * sizeof(int32_t));
    r.seq_start = malloc(((size_t)n_seqs + 1) * sizeof(int32_t));
    r.seq_len = malloc((size_t)n_seqs * sizeof(int32_t));
    r.table = malloc((size_t)n_blocks * sizeof(int32_t));
    /* --tail with --mode decode: a step keeps one row a sequence at most */
    r.logits = malloc((size_t)(r.tail_decode ? n_seqs : max_step) * (size_t)r.vocab *
                      sizeof(float));
    if (!r.tokens || !r.positions || !r.rows || !r.seq_start || !r.seq_len || !r.table || !r.logits)
        goto oom;
    if (ops->create(m, &o, &r.b) != LPX_OK) {
        rc = fail("creating the backend");
        goto done;
    }
    if (out_path && !(out = fopen(out_path, "wb"))) {
        fprintf(stderr, "lpx logits: cannot write %s: %s\n", out_path, strerror(errno));
        goto done;
    }

    /* The prompt ids. Rows come back in batch order; each sequence's rows go
     * to its place in the output file. */
    /* CPU time next to wall time: on a shared machine the wall time says how
     * busy the neighbours were, the CPU time what the work cost. */
    double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    int64_t steps = 0;
    for (;;) {
        int32_t fed;
        if (step(&r, 0, &fed) != LPX_OK) {
            rc = fail("step");
            goto done;
        }
        if (!fed) break;
        steps++;
        int32_t row = 0;
        int64_t before = 0;
        for (int s = 0; s < n_seqs; s++) {
            seq *q = &r.seqs[s];
            /* what step() fed this sequence, and of it the rows kept */
            const int32_t take = q->fed;
            const int32_t from = q->done > q->keep ? q->done : q->keep;
            const int32_t kept = q->done + take > from ? q->done + take - from : 0;
            if (kept > 0 && out) {
                if (fseek(out, (long)((before + from - q->keep) * r.vocab * (int64_t)sizeof(float)),
                          SEEK_SET) ||
                    fwrite(r.logits + (int64_t)row * r.vocab, sizeof(float),
                           (size_t)kept * (size_t)r.vocab, out) != (size_t)kept * (size_t)r.vocab) {
                    fprintf(stderr, "lpx logits: writing %s: %s\n", out_path, strerror(errno));
                    goto done;
                }
            }
            if (take > 0) {
                q->done += take;
                row += kept;
                /* The greedy continuation starts from the last prompt position. */
                if (q->done == q->n_ids && n_greedy)
                    q->ids[q->n_ids] = argmax(r.logits + (int64_t)(row - 1) * r.vocab, r.vocab);
            }
            before += q->n_ids - q->keep;
        }
    }
    double t1 = now_s(CLOCK_MONOTONIC), c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    if (timing)
        fprintf(stderr,
                "lpx logits: prefill %lld tokens in %lld steps, %.1f ms, %.1f tok/s (cpu time "
                "%.1f ms)\n",
                (long long)total_ids, (long long)steps, 1e3 * (t1 - t0),
                (double)total_ids / (t1 - t0), 1e3 * (c1 - c0));

    /* Greedy continuation, all sequences decoding together. */
    for (int s = 0; s < n_seqs; s++)
        r.seqs[s].chunk = 1;
    int64_t gen = 0;
    for (int32_t g = 1; g < n_greedy; g++) {
        int32_t fed;
        if (step(&r, g, &fed) != LPX_OK) {
            rc = fail("step");
            goto done;
        }
        for (int s = 0; s < n_seqs; s++) {
            seq *q = &r.seqs[s];
            q->done++;
            q->ids[q->n_ids + g] = argmax(r.logits + (int64_t)s * r.vocab, r.vocab);
        }
        gen += fed;
    }
    double t2 = now_s(CLOCK_MONOTONIC), c2 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    if (timing && n_greedy > 1)
        fprintf(stderr,
                "lpx logits: decode %lld tokens in %d steps of %d, %.1f ms, %.1f tok/s (cpu time "
                "%.1f ms)\n",
                (long long)gen, n_greedy - 1, n_seqs, 1e3 * (t2 - t1), (double)gen / (t2 - t1),
                1e3 * (c2 - c1));
    for (int s = 0; s < n_seqs && n_greedy; s++) {
        for (int32_t g = 0; g < n_greedy; g++)
            printf("%s%d", g ? "," : "", r.seqs[s].ids[r.seqs[s].n_ids + g]);
        printf("\n");
    }
    if (out && fclose(out)) {
        out = NULL;
        fprintf(stderr, "lpx logits: writing %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    out = NULL;
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "lpx logits: out of memory\n");
done:
    if (out) fclose(out);
    if (r.b) r.b->ops->destroy(r.b);
    lpx_model_close(m);
    for (int s = 0; r.seqs && s < n_seqs; s++) {
        free(r.seqs[s].ids);
        free(r.seqs[s].blocks);
    }
    free(r.seqs);
    free(r.tokens);
    free(r.positions);
    free(r.rows);
    free(r.seq_start);
    free(r.seq_len);
    free(r.table);
    free(r.logits);
    return rc;
}
