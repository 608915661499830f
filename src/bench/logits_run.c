#include "bench/logits_run.h"

#include "base/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct seq {
    int32_t *ids; /* prompt ids, then generated ones: [n_ids + n_greedy] */
    int32_t n_ids, chunk, done, *blocks;
    int32_t keep; /* first position whose logits are kept (tail) */
    int32_t fed;  /* ids the last step fed */
} seq;

typedef struct run {
    lpx_backend *b;
    int32_t n_seqs, vocab, max_blocks;
    bool tail_decode; /* tail with decode: kept positions fed one a step */
    seq *seqs;
    int32_t *tokens, *positions, *seq_start, *seq_len, *table, *rows;
    float *logits; /* [max batch tokens][vocab] */
    FILE *out;
    const char *out_path;
} run;

/* One step: each sequence feeds its next ids (its chunk, clamped to what is left of its
 * prompt + upto_greedy); logits for every kept token land in r->logits in batch order.
 * *n_fed: the tokens fed (0: nothing left). */
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
    lpx_status st = lpx_backend_run(r->b, &(lpx_step){.batch = &bt, .logits = r->logits});
    return st == LPX_OK ? st : lpx_error_wrap(st, "step");
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* The prompt ids. Rows come back in batch order; each sequence's rows go to its place in
 * the output file. */
static lpx_status prefill(run *r, int32_t n_greedy, logits_run_result *res) {
    for (;;) {
        int32_t fed;
        LPX_TRY(step(r, 0, &fed));
        if (!fed) return LPX_OK;
        res->prefill_steps++;
        int32_t row = 0;
        int64_t before = 0;
        for (int s = 0; s < r->n_seqs; s++) {
            seq *q = &r->seqs[s];
            /* what step() fed this sequence, and of it the rows kept */
            const int32_t take = q->fed;
            const int32_t from = q->done > q->keep ? q->done : q->keep;
            const int32_t kept = q->done + take > from ? q->done + take - from : 0;
            const size_t n_floats = (size_t)kept * (size_t)r->vocab;
            if (kept > 0 && r->out &&
                (fseek(r->out,
                       (long)((before + from - q->keep) * r->vocab * (int64_t)sizeof(float)),
                       SEEK_SET) ||
                 fwrite(r->logits + (int64_t)row * r->vocab, sizeof(float), n_floats, r->out) !=
                     n_floats))
                return lpx_errorf(LPX_ERR_IO, "writing %s: %s", r->out_path, strerror(errno));
            if (take > 0) {
                q->done += take;
                row += kept;
                /* The greedy continuation starts from the last prompt position. */
                if (q->done == q->n_ids && n_greedy)
                    q->ids[q->n_ids] = argmax(r->logits + (int64_t)(row - 1) * r->vocab, r->vocab);
            }
            before += q->n_ids - q->keep;
        }
    }
}

/* Greedy continuation, all sequences decoding together. */
static lpx_status greedy(run *r, int32_t n_greedy, logits_run_result *res) {
    for (int s = 0; s < r->n_seqs; s++)
        r->seqs[s].chunk = 1;
    for (int32_t g = 1; g < n_greedy; g++) {
        int32_t fed;
        LPX_TRY(step(r, g, &fed));
        for (int s = 0; s < r->n_seqs; s++) {
            seq *q = &r->seqs[s];
            q->done++;
            q->ids[q->n_ids + g] = argmax(r->logits + (int64_t)s * r->vocab, r->vocab);
        }
        res->decode_tokens += fed;
    }
    return LPX_OK;
}

/* Each sequence's ids, chunk and kept rows; *max_step: the most tokens one step feeds. */
static lpx_status make_seqs(const logits_run_opts *o, run *r, int64_t *max_step) {
    *max_step = 0;
    for (int32_t s = 0; s < o->n_seqs; s++) {
        seq *q = &r->seqs[s];
        q->n_ids = o->n_ids[s];
        q->ids = malloc(((size_t)q->n_ids + (size_t)o->n_greedy) * sizeof *q->ids);
        if (!q->ids) return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
        memcpy(q->ids, o->ids[s], (size_t)q->n_ids * sizeof *q->ids);
        q->chunk = o->n_chunks                    ? o->chunks[o->n_chunks == 1 ? 0 : s]
                   : o->decode && !r->tail_decode ? 1
                                                  : q->n_ids;
        q->keep = o->tail && o->tail < q->n_ids ? q->n_ids - o->tail : 0;
        *max_step += q->chunk < q->n_ids ? q->chunk : q->n_ids;
    }
    if (*max_step < o->n_seqs) *max_step = o->n_seqs;
    return LPX_OK;
}

/* Each sequence gets its own blocks, interleaved with the others' and in descending
 * order, so the block table is really followed. */
static lpx_status make_blocks(const logits_run_opts *o, run *r, int64_t *n_blocks) {
    int64_t longest = 0;
    for (int s = 0; s < o->n_seqs; s++)
        if (r->seqs[s].n_ids + (int64_t)o->n_greedy > longest)
            longest = r->seqs[s].n_ids + (int64_t)o->n_greedy;
    r->max_blocks = (int32_t)((longest + o->block_size - 1) / o->block_size);
    *n_blocks = (int64_t)r->max_blocks * o->n_seqs;
    if (*n_blocks > INT32_MAX / 2)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "%lld KV blocks: too many", (long long)*n_blocks);
    for (int s = 0; s < o->n_seqs; s++) {
        r->seqs[s].blocks = malloc((size_t)r->max_blocks * sizeof(int32_t));
        if (!r->seqs[s].blocks) return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
        for (int32_t i = 0; i < r->max_blocks; i++)
            r->seqs[s].blocks[i] = (int32_t)(*n_blocks - 1 - ((int64_t)i * o->n_seqs + s));
    }
    return LPX_OK;
}

static lpx_status run_job(const logits_run_opts *o, run *r, lpx_model **m, logits_run_result *res) {
    r->n_seqs = o->n_seqs;
    r->tail_decode = o->tail > 0 && o->decode;
    r->out_path = o->out_path;
    r->seqs = calloc((size_t)o->n_seqs, sizeof *r->seqs);
    if (!r->seqs) return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    int64_t max_step, n_blocks;
    LPX_TRY(make_seqs(o, r, &max_step));
    LPX_TRY(lpx_model_open(o->model, m));
    r->vocab = (*m)->cfg.vocab_size;
    LPX_TRY(make_blocks(o, r, &n_blocks));
    lpx_backend_opts bo = {.device = o->ordinal,
                           .n_threads = o->n_threads,
                           .block_size = o->block_size,
                           .n_blocks = (int32_t)n_blocks,
                           .max_batch_tokens = (int32_t)max_step,
                           .max_seqs = o->n_seqs,
                           .kv_dtype = o->kv_dtype,
                           .tune = o->tune,
                           .trace = o->trace};
    r->tokens = malloc((size_t)max_step * sizeof(int32_t));
    r->positions = malloc((size_t)max_step * sizeof(int32_t));
    r->rows = malloc((size_t)max_step * sizeof(int32_t));
    r->seq_start = malloc(((size_t)o->n_seqs + 1) * sizeof(int32_t));
    r->seq_len = malloc((size_t)o->n_seqs * sizeof(int32_t));
    r->table = malloc((size_t)n_blocks * sizeof(int32_t));
    /* tail with decode: a step keeps one row a sequence at most */
    r->logits =
        malloc((size_t)(r->tail_decode ? o->n_seqs : max_step) * (size_t)r->vocab * sizeof(float));
    res->greedy = malloc(((size_t)o->n_seqs * (size_t)o->n_greedy + 1) * sizeof(int32_t));
    if (!r->tokens || !r->positions || !r->rows || !r->seq_start || !r->seq_len || !r->table ||
        !r->logits || !res->greedy)
        return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    lpx_status st = o->ops->create(*m, &bo, &r->b);
    if (st != LPX_OK) return lpx_error_wrap(st, "creating the backend");
    if (o->out_path && !(r->out = fopen(o->out_path, "wb")))
        return lpx_errorf(LPX_ERR_IO, "cannot write %s: %s", o->out_path, strerror(errno));

    double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    LPX_TRY(prefill(r, o->n_greedy, res));
    double t1 = now_s(CLOCK_MONOTONIC), c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    LPX_TRY(greedy(r, o->n_greedy, res));
    double t2 = now_s(CLOCK_MONOTONIC), c2 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    res->prefill_s = t1 - t0;
    res->prefill_cpu_s = c1 - c0;
    res->decode_s = t2 - t1;
    res->decode_cpu_s = c2 - c1;
    for (int32_t s = 0; s < o->n_seqs; s++) {
        res->prefill_tokens += r->seqs[s].n_ids;
        memcpy(res->greedy + (int64_t)s * o->n_greedy, r->seqs[s].ids + r->seqs[s].n_ids,
               (size_t)o->n_greedy * sizeof(int32_t));
    }
    FILE *out = r->out;
    r->out = NULL;
    if (out && fclose(out))
        return lpx_errorf(LPX_ERR_IO, "writing %s: %s", o->out_path, strerror(errno));
    return LPX_OK;
}

lpx_status logits_run(const logits_run_opts *o, logits_run_result *res) {
    memset(res, 0, sizeof *res);
    run r = {0};
    lpx_model *m = NULL;
    lpx_status st = run_job(o, &r, &m, res);
    if (r.out) fclose(r.out);
    if (r.b) r.b->ops->destroy(r.b);
    lpx_model_close(m);
    for (int s = 0; r.seqs && s < o->n_seqs; s++) {
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
    if (st != LPX_OK) {
        free(res->greedy);
        res->greedy = NULL;
    }
    return st;
}
