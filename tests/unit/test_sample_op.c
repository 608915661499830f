/* The backend's steps with sample against the host sampler, on the real SmolLM2:
 *  1. backend level: one decode step of 16 sequences, run without sample (logits
 *     to the host, then lpx_sample per row) and with sample for many
 *     sampling settings (greedy, penalties, temperature, min_p, top_k, top_p,
 *     flat distributions), seeds and output indices: every token equal;
 *  2. one step ahead: NSEQ sequences decode AHEAD tokens, each step waited for
 *     (its tokens fed back by the host) and one step ahead (step N+1
 *     queued before step N ends, its tokens fed on the device): every token
 *     equal (the contract's refusals: test_step_ahead.c);
 *  3. engine level: requests of each setting batched together give the same
 *     tokens with device sampling (the default) and with device_sampling off (lpx_engine_opts).
 * On the CPU backend a step with sample uses the host sampler, so this checks the
 * engine's wiring; LPX_TEST_DEVICE=cuda (scripts/gpu-check.sh) checks the CUDA
 * sampler bit for bit. LPX_MODEL overrides the model path. */
#include "backend/backend.h"
#include "sample/sampler.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NSEQ = 16, PROMPT = 8, ROUNDS = 8, GEN = 6, NREQ = 4, AHEAD = 12 };

static const lpx_sampling_params settings[] = {
    {.temperature = 0, .top_p = 1, .repetition_penalty = 1},
    {.temperature = 0,
     .top_p = 1,
     .repetition_penalty = 1.3f,
     .presence_penalty = 0.5f,
     .frequency_penalty = 0.3f},
    {.temperature = 1, .top_p = 1, .repetition_penalty = 1},
    {.temperature = 0.7f, .top_p = 0.9f, .repetition_penalty = 1},
    {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repetition_penalty = 1.1f},
    {.temperature = 1.5f, .top_p = 0.99f, .repetition_penalty = 1},
    {.temperature = 3, .top_p = 1, .repetition_penalty = 1, .presence_penalty = -0.5f},
    {.temperature = 1, .top_k = 5, .top_p = 1, .repetition_penalty = 1},
    {.temperature = 2, .top_k = 1000, .top_p = 0.8f, .repetition_penalty = 1},
    {.temperature = 1, .top_p = 1, .min_p = 0.2f, .repetition_penalty = 0.8f},
    {.temperature = 0.3f, .top_k = 1, .top_p = 1, .repetition_penalty = 1},
    {.temperature = 5,
     .top_k = 20000,
     .top_p = 0.5f,
     .min_p = 0.001f,
     .repetition_penalty = 1,
     .frequency_penalty = 1},
};
enum { NSET = sizeof settings / sizeof settings[0] };

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void backend_level(const lpx_model *m, const char *device) {
    const lpx_backend_ops *ops;
    int ordinal;
    CHECK(lpx_backend_select(device, &ops, &ordinal) == LPX_OK);
    if (!ops) {
        CHECK(0);
        return;
    }
    const int bs = 16, maxb = 2, V = m->cfg.vocab_size;
    lpx_backend_opts o = {.device = ordinal,
                          .block_size = bs,
                          .n_blocks = NSEQ * maxb,
                          .max_batch_tokens = NSEQ * PROMPT,
                          .max_seqs = NSEQ};
    lpx_backend *be;
    if (ops->create(m, &o, &be) != LPX_OK) {
        fprintf(stderr, "%s\n", lpx_last_error());
        CHECK(0);
        return;
    }
    /* Prefill NSEQ prompts of PROMPT tokens (ids from a fixed generator). */
    int32_t ids[NSEQ * PROMPT], pos[NSEQ * PROMPT], start[NSEQ + 1], len[NSEQ], rows[NSEQ];
    int32_t table[NSEQ * maxb];
    uint64_t x = 7;
    for (int s = 0; s < NSEQ; s++) {
        start[s] = s * PROMPT;
        len[s] = PROMPT;
        rows[s] = s * PROMPT + PROMPT - 1;
        for (int b = 0; b < maxb; b++)
            table[s * maxb + b] = s * maxb + b;
        for (int t = 0; t < PROMPT; t++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            ids[s * PROMPT + t] = (int32_t)((x >> 33) % 2000) + 20;
            pos[s * PROMPT + t] = t;
        }
    }
    start[NSEQ] = NSEQ * PROMPT;
    float *logits = malloc((size_t)NSEQ * V * sizeof *logits);
    float *work = malloc((size_t)V * sizeof *work);
    lpx_batch pre = {NSEQ * PROMPT, ids, pos, NSEQ, start, len, table, maxb, NSEQ, rows};
    CHECK(lpx_backend_run(be, &(lpx_step){.batch = &pre, .logits = logits}) == LPX_OK);
    /* The decode step: token PROMPT of each sequence; run repeatedly (it writes
     * the same K/V each time). */
    int32_t dids[NSEQ], dpos[NSEQ], dstart[NSEQ + 1], dlen[NSEQ], drows[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        dids[s] = ids[s * PROMPT + 3];
        dpos[s] = PROMPT;
        dstart[s] = s;
        dlen[s] = PROMPT + 1;
        drows[s] = s;
    }
    dstart[NSEQ] = NSEQ;
    lpx_batch dec = {NSEQ, dids, dpos, NSEQ, dstart, dlen, table, maxb, NSEQ, drows};
    CHECK(lpx_backend_run(be, &(lpx_step){.batch = &dec, .logits = logits}) == LPX_OK);
    /* Every sequence "has seen" its prompt, and an output of 3 tokens. */
    lpx_sampler sm;
    CHECK(lpx_sampler_init(&sm, V) == LPX_OK);
    lpx_token_count seen[NSEQ * (PROMPT + 3)];
    int32_t seen_at[NSEQ], n_seen[NSEQ], n_all = 0;
    for (int s = 0; s < NSEQ; s++) {
        int32_t out[3] = {ids[s * PROMPT + 1], dids[s], dids[s]};
        seen_at[s] = n_all;
        n_seen[s] = lpx_token_counts(&sm, ids + s * PROMPT, PROMPT, out, 3, seen + n_all);
        n_all += n_seen[s];
    }
    lpx_sample_row srow[NSEQ];
    int32_t got[NSEQ];
    int mismatches = 0, compared = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int s = 0; s < NSEQ; s++)
            srow[s] = (lpx_sample_row){.p = settings[(s + r) % NSET],
                                       .seed = 1000u * r + s,
                                       .index = r * 3 + s % 3,
                                       .seen_start = seen_at[s],
                                       .n_seen = n_seen[s]};
        lpx_sample_batch sb = {srow, seen, n_all};
        CHECK(lpx_backend_run(be, &(lpx_step){.batch = &dec, .logits = logits}) == LPX_OK);
        CHECK(lpx_backend_run(be, &(lpx_step){.batch = &dec, .sample = &sb, .tokens = got}) ==
              LPX_OK);
        for (int s = 0; s < NSEQ; s++) {
            memcpy(work, logits + (size_t)s * V, (size_t)V * sizeof *work);
            const bool pen = lpx_sampling_penalized(&srow[s].p);
            int32_t want =
                lpx_sample(&sm, &srow[s].p, srow[s].seed, srow[s].index, work,
                           pen ? seen + seen_at[s] : NULL, pen ? n_seen[s] : 0, NULL, NULL);
            compared++;
            if (want != got[s]) {
                mismatches++;
                fprintf(stderr, "round %d row %d (setting %d): host %d, %s %d\n", r, s,
                        (s + r) % NSET, want, device, got[s]);
            }
        }
    }
    printf("%s steps with sample vs host sampler: %d/%d rows equal\n", device,
           compared - mismatches, compared);
    CHECK(mismatches == 0);
    /* Cost (printed, not checked): all rows greedy, then all rows top_p. */
    for (int k = 0; k < 2; k++) {
        for (int s = 0; s < NSEQ; s++)
            srow[s] = (lpx_sample_row){.p = settings[k ? 3 : 0], .seed = (uint64_t)s};
        lpx_sample_batch sb = {srow, seen, n_all};
        double t0 = now_ms();
        for (int i = 0; i < 5; i++)
            CHECK(lpx_backend_run(be, &(lpx_step){.batch = &dec, .sample = &sb, .tokens = got}) ==
                  LPX_OK);
        double t1 = now_ms();
        for (int i = 0; i < 5; i++)
            CHECK(lpx_backend_run(be, &(lpx_step){.batch = &dec, .logits = logits}) == LPX_OK);
        printf("%s, %d rows %s: with sample %.3f ms, logits to host %.3f ms\n", device, NSEQ,
               k ? "top_p 0.9" : "greedy", (t1 - t0) / 5, (now_ms() - t1) / 5);
    }
    lpx_sampler_free(&sm);
    free(logits);
    free(work);
    ops->destroy(be);
}

/* A backend with NSEQ prompts of PROMPT tokens prefilled (blocks s*2, s*2+1 of
 * 16 slots: room for AHEAD more tokens). */
static lpx_backend *prefilled(const lpx_model *m, const lpx_backend_ops *ops, int ordinal,
                              int32_t *table) {
    lpx_backend_opts o = {.device = ordinal,
                          .block_size = 16,
                          .n_blocks = NSEQ * 2,
                          .max_batch_tokens = NSEQ * PROMPT,
                          .max_seqs = NSEQ};
    lpx_backend *be;
    if (ops->create(m, &o, &be) != LPX_OK) {
        fprintf(stderr, "%s\n", lpx_last_error());
        return NULL;
    }
    int32_t ids[NSEQ * PROMPT], pos[NSEQ * PROMPT], start[NSEQ + 1], len[NSEQ], rows[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        start[s] = s * PROMPT;
        len[s] = PROMPT;
        rows[s] = s * PROMPT + PROMPT - 1;
        table[2 * s] = 2 * s;
        table[2 * s + 1] = 2 * s + 1;
        for (int t = 0; t < PROMPT; t++) {
            ids[s * PROMPT + t] = 20 + (s * 131 + t * 977) % 3000;
            pos[s * PROMPT + t] = t;
        }
    }
    start[NSEQ] = NSEQ * PROMPT;
    float *logits = malloc((size_t)NSEQ * m->cfg.vocab_size * sizeof *logits);
    lpx_batch pre = {NSEQ * PROMPT, ids, pos, NSEQ, start, len, table, 2, NSEQ, rows};
    if (!logits || lpx_backend_run(be, &(lpx_step){.batch = &pre, .logits = logits}) != LPX_OK) {
        fprintf(stderr, "%s\n", lpx_last_error());
        free(logits);
        ops->destroy(be);
        return NULL;
    }
    free(logits);
    return be;
}

/* Decode step k (0-based) of the NSEQ sequences: token PROMPT + k of each. */
typedef struct dstep {
    int32_t ids[NSEQ], pos[NSEQ], start[NSEQ + 1], len[NSEQ], rows[NSEQ];
    lpx_batch b;
} dstep;

static void dstep_make(dstep *d, int k, const int32_t *ids, const int32_t *table) {
    for (int s = 0; s < NSEQ; s++) {
        d->ids[s] = ids ? ids[s] : 100 + s;
        d->pos[s] = PROMPT + k;
        d->start[s] = s;
        d->len[s] = PROMPT + k + 1;
        d->rows[s] = s;
    }
    d->start[NSEQ] = NSEQ;
    d->b = (lpx_batch){NSEQ, d->ids, d->pos, NSEQ, d->start, d->len, table, 2, NSEQ, d->rows};
}

static void step_ahead(const lpx_model *m, const char *device) {
    const lpx_backend_ops *ops;
    int ordinal;
    CHECK(lpx_backend_select(device, &ops, &ordinal) == LPX_OK);
    if (!ops) {
        CHECK(0);
        return;
    }
    /* rows without penalties (a fed step may have none): greedy and sampled */
    static const int sets[] = {0, 2, 3, 5, 7, 8, 10};
    lpx_sample_row srow[AHEAD][NSEQ];
    for (int k = 0; k < AHEAD; k++)
        for (int s = 0; s < NSEQ; s++)
            srow[k][s] = (lpx_sample_row){
                .p = settings[sets[(s + k / 4) % 7]], .seed = 77u + (uint64_t)s, .index = k};
    int32_t table[NSEQ * 2], want[AHEAD][NSEQ], got[AHEAD][NSEQ];
    dstep d;
    /* reference: each step waited for, the host feeding each step's tokens to the next */
    lpx_backend *be = prefilled(m, ops, ordinal, table);
    CHECK(be != NULL);
    if (!be) return;
    for (int k = 0; k < AHEAD; k++) {
        dstep_make(&d, k, k ? want[k - 1] : NULL, table);
        lpx_sample_batch sb = {srow[k], NULL, 0};
        CHECK(lpx_backend_run(be, &(lpx_step){.batch = &d.b, .sample = &sb, .tokens = want[k]}) ==
              LPX_OK);
    }
    ops->destroy(be);
    /* one step ahead: step k+1 begun before step k ends, fed on the device */
    be = prefilled(m, ops, ordinal, table);
    CHECK(be != NULL);
    if (!be) return;
    int32_t feed[NSEQ];
    for (int s = 0; s < NSEQ; s++)
        feed[s] = s;
    for (int k = 0; k < AHEAD; k++) {
        dstep_make(&d, k, NULL, table); /* ids ignored where fed (k > 0) */
        lpx_sample_batch sb = {srow[k], NULL, 0};
        const lpx_step st = {
            .batch = &d.b, .sample = &sb, .feed = k ? feed : NULL, .tokens = got[k]};
        CHECK(ops->step_begin(be, &st) == LPX_OK);
        if (k) CHECK(ops->step_end(be) == LPX_OK);
    }
    CHECK(ops->step_end(be) == LPX_OK);
    int equal = 0;
    for (int k = 0; k < AHEAD; k++)
        for (int s = 0; s < NSEQ; s++) {
            equal += want[k][s] == got[k][s];
            if (want[k][s] != got[k][s])
                fprintf(stderr, "step %d row %d: waited %d, step ahead %d\n", k, s, want[k][s],
                        got[k][s]);
        }
    printf("%s one step ahead vs each step waited for: %d/%d tokens equal\n", device, equal,
           AHEAD * NSEQ);
    CHECK(equal == AHEAD * NSEQ);
    ops->destroy(be);
}

typedef struct out {
    int32_t ids[GEN];
    int n;
} out;

static void on_event(const lpx_event *ev, void *user) {
    out *o = user;
    if (ev->token >= 0 && o->n < GEN) o->ids[o->n++] = ev->token;
}

/* NREQ requests of setting k (seeds 11, 12, ...) batched; tokens into res. */
static void run_engine(const lpx_model *m, const char *device, int device_sampling, int k,
                       out *res) {
    lpx_engine_opts o;
    lpx_engine_opts_init(&o);
    o.device = device;
    o.max_num_seqs = NREQ;
    o.max_model_len = 64;
    o.device_sampling = device_sampling;
    lpx_engine *e;
    if (lpx_engine_create(m, &o, &e) != LPX_OK) {
        fprintf(stderr, "%s\n", lpx_last_error());
        CHECK(0);
        return;
    }
    static const int32_t prompt[] = {1, 504, 3458, 28, 253, 6512, 1373, 30, 5248, 2};
    for (int q = 0; q < NREQ; q++) {
        lpx_request r;
        lpx_request_init(&r);
        r.prompt_ids = prompt + q;
        r.n_prompt_ids = 6;
        r.max_tokens = GEN;
        r.ignore_eos = true;
        r.sampling = settings[k];
        r.sampling.seed = 11 + q;
        memset(&res[q], 0, sizeof res[q]);
        uint64_t id;
        CHECK(lpx_engine_submit(e, &r, on_event, &res[q], &id) == LPX_OK);
    }
    bool busy = true;
    while (busy)
        if (lpx_engine_step(e, &busy) != LPX_OK) {
            fprintf(stderr, "%s\n", lpx_last_error());
            CHECK(0);
            break;
        }
    lpx_engine_destroy(e);
}

int main(void) {
    const char *device = getenv("LPX_TEST_DEVICE") ? getenv("LPX_TEST_DEVICE") : "cpu";
    lpx_model *m = test_open_model();
    if (!m) {
        CHECK(0);
        TEST_DONE();
    }
    backend_level(m, device);
    step_ahead(m, device);

    /* Engine: device sampling vs host sampling, greedy and seeded with penalties. */
    const int engine_sets[] = {1, 4, 6};
    for (size_t i = 0; i < sizeof engine_sets / sizeof *engine_sets; i++) {
        out dev[NREQ], host[NREQ];
        run_engine(m, device, 1, engine_sets[i], dev);
        run_engine(m, device, -1, engine_sets[i], host);
        for (int q = 0; q < NREQ; q++) {
            CHECK(dev[q].n == GEN && host[q].n == GEN);
            CHECK(!memcmp(dev[q].ids, host[q].ids, sizeof dev[q].ids));
        }
    }
    lpx_model_close(m);
    TEST_DONE();
}
