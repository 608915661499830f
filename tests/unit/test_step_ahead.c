/* The backend's step_begin/step_end (backend.h) on the real SmolLM2:
 *  1. a prefill and five decode steps of four sequences run one step ahead, each
 *     decode step's tokens fed on the device from the previous step's rows (in
 *     another sequence order every step), give exactly the tokens of steps waited
 *     for one by one with the tokens written out;
 *  2. the contract's refusals: a third step in flight, a step without sample
 *     while one is in flight and any step while one without sample is
 *     (LPX_ERR_BUSY); feed with no step_begin before it, after a step without
 *     sample, after a failed step_begin, from a row the previous step does not
 *     have, or with a penalised row (LPX_ERR_INVALID_ARG); a failed step_begin
 *     enqueues nothing; step_end with nothing in flight fails.
 * LPX_TEST_DEVICE=cuda runs the same checks on the CUDA backend. */
#include "backend/backend.h"
#include "sample/sampler.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NSEQ = 4, PROMPT = 6, STEPS = 5, BS = 16, MAXB = 1 };

static const lpx_sampling_params settings[NSEQ] = {
    {.temperature = 0, .top_p = 1, .repetition_penalty = 1},
    {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .repetition_penalty = 1},
    {.temperature = 1, .top_p = 1, .repetition_penalty = 1},
    {.temperature = 1.2f, .top_p = 0.95f, .min_p = 0.02f, .repetition_penalty = 1},
};

static const int32_t prompt[NSEQ][PROMPT] = {
    {1, 504, 3458, 28, 253, 6512},
    {1373, 30, 5248, 2, 1, 504},
    {28, 253, 1373, 30, 504, 3458},
    {2, 6512, 28, 5248, 253, 30},
};

/* One step's descriptor: the prefill (k = 0) or decode step k of the sequences
 * in order[], each with a logits row and its sampling row (output index k). */
typedef struct step {
    int32_t ids[NSEQ * PROMPT], pos[NSEQ * PROMPT], start[NSEQ + 1], len[NSEQ], rows[NSEQ];
    int32_t table[NSEQ * MAXB];
    lpx_sample_row srow[NSEQ];
    lpx_batch b;
    lpx_sample_batch sb;
} step;

static void make_step(step *st, int k, const int order[NSEQ], const int32_t *tokens) {
    int32_t n = 0;
    for (int i = 0; i < NSEQ; i++) {
        int s = order[i];
        st->start[i] = n;
        if (k == 0) {
            for (int t = 0; t < PROMPT; t++, n++) {
                st->ids[n] = prompt[s][t];
                st->pos[n] = t;
            }
        } else {
            st->ids[n] = tokens ? tokens[s] : -1; /* -1: fed */
            st->pos[n++] = PROMPT + k - 1;
        }
        st->len[i] = k == 0 ? PROMPT : PROMPT + k;
        st->rows[i] = n - 1;
        st->table[i * MAXB] = s;
        st->srow[i] = (lpx_sample_row){.p = settings[s], .seed = 100u + (uint64_t)s, .index = k};
    }
    st->start[NSEQ] = n;
    st->b =
        (lpx_batch){n, st->ids, st->pos, NSEQ, st->start, st->len, st->table, MAXB, NSEQ, st->rows};
    st->sb = (lpx_sample_batch){st->srow, NULL, 0};
}

static const int fwd[NSEQ] = {0, 1, 2, 3}, rev[NSEQ] = {3, 2, 1, 0};

/* Begins st's step with sample, its tokens to out. */
static lpx_status begin(const lpx_backend_ops *ops, lpx_backend *be, const step *st,
                        const int32_t *feed, int32_t *out) {
    return ops->step_begin(
        be, &(lpx_step){.batch = &st->b, .sample = &st->sb, .feed = feed, .tokens = out});
}

/* ref[k][s]: the token step k draws for sequence s, each step waited for. */
static void reference(const lpx_backend_ops *ops, lpx_backend *be, int32_t ref[STEPS + 1][NSEQ]) {
    step st;
    for (int k = 0; k <= STEPS; k++) {
        make_step(&st, k, fwd, k ? ref[k - 1] : NULL);
        CHECK(lpx_backend_run(
                  be, &(lpx_step){.batch = &st.b, .sample = &st.sb, .tokens = ref[k]}) == LPX_OK);
    }
}

/* The same steps one ahead: step k+1 is begun before step k ends; its tokens
 * are fed from step k's rows, and every odd step runs the sequences reversed. */
static void ahead(const lpx_backend_ops *ops, lpx_backend *be, int32_t got[STEPS + 1][NSEQ]) {
    step st;
    int32_t feed[NSEQ], out[NSEQ];
    make_step(&st, 0, fwd, NULL);
    CHECK(begin(ops, be, &st, NULL, out) == LPX_OK);
    for (int k = 0; k <= STEPS; k++) {
        const int *prev = k % 2 ? rev : fwd, *next = k % 2 ? fwd : rev;
        if (k < STEPS) {
            make_step(&st, k + 1, next, NULL);
            for (int i = 0; i < NSEQ; i++)
                for (int j = 0; j < NSEQ; j++)
                    if (prev[j] == next[i]) feed[i] = j;
            CHECK(begin(ops, be, &st, feed, out) == LPX_OK);
        }
        CHECK(ops->step_end(be) == LPX_OK);
        for (int j = 0; j < NSEQ; j++)
            got[k][prev[j]] = out[j];
    }
}

static void expect(lpx_status got, lpx_status want, const char *what) {
    if (got != want)
        fprintf(stderr, "%s: %s, expected %s (%s)\n", what, lpx_status_name(got),
                lpx_status_name(want), lpx_last_error());
    CHECK(got == want);
}

static void refusals(const lpx_backend_ops *ops, lpx_backend *be, int32_t ref[STEPS + 1][NSEQ]) {
    step a, b, pen;
    int32_t feed[NSEQ] = {0, 1, 2, 3}, bad[NSEQ] = {0, 1, 2, NSEQ}, out[NSEQ];
    float *logits = malloc((size_t)NSEQ * be->model->cfg.vocab_size * sizeof *logits);
    make_step(&a, 1, fwd, ref[0]);
    make_step(&b, 2, fwd, NULL);
    make_step(&pen, 2, fwd, NULL);
    pen.srow[2].p.repetition_penalty = 1.3f;
    const lpx_step logits_a = {.batch = &a.b, .logits = logits};

    /* Two in flight; a third and a step without sample are refused, and nothing
     * is enqueued by them: two step_ends, then a third fails. */
    expect(begin(ops, be, &a, NULL, out), LPX_OK, "begin");
    expect(ops->step_begin(be, &logits_a), LPX_ERR_BUSY, "logits step with one in flight");
    expect(begin(ops, be, &b, feed, out), LPX_OK, "begin fed");
    expect(begin(ops, be, &b, feed, out), LPX_ERR_BUSY, "third begin");
    expect(ops->step_end(be), LPX_OK, "end 1");
    CHECK(!memcmp(out, ref[1], sizeof out));
    expect(ops->step_end(be), LPX_OK, "end 2");
    CHECK(!memcmp(out, ref[2], sizeof out));
    CHECK(ops->step_end(be) != LPX_OK);

    /* A step without sample runs alone; no feed after it (nothing to feed from). */
    expect(ops->step_begin(be, &logits_a), LPX_OK, "logits step");
    expect(begin(ops, be, &a, NULL, out), LPX_ERR_BUSY, "begin while a logits step is in flight");
    expect(ops->step_end(be), LPX_OK, "end logits step");
    CHECK(ops->step_end(be) != LPX_OK);
    expect(begin(ops, be, &b, feed, out), LPX_ERR_INVALID_ARG, "feed after a logits step");
    expect(ops->step_begin(be, &(lpx_step){.batch = &a.b, .feed = feed, .logits = logits}),
           LPX_ERR_INVALID_ARG, "feed without sample");
    CHECK(ops->step_end(be) != LPX_OK); /* the refused begins enqueued nothing */

    /* Feed from a row the previous step lacks; then the previous step_begin
     * failed, so a good feed is refused too; the first step still ends. */
    expect(begin(ops, be, &a, NULL, out), LPX_OK, "begin");
    expect(begin(ops, be, &b, bad, out), LPX_ERR_INVALID_ARG, "feed row = n_logits");
    expect(begin(ops, be, &b, feed, out), LPX_ERR_INVALID_ARG, "feed after a refusal");
    expect(ops->step_end(be), LPX_OK, "end");
    CHECK(!memcmp(out, ref[1], sizeof out));
    CHECK(ops->step_end(be) != LPX_OK);

    /* A penalised row: refused with feed, taken without. Feeding from a step
     * already ended is allowed (no other step begun since). */
    expect(begin(ops, be, &a, NULL, out), LPX_OK, "begin");
    expect(begin(ops, be, &pen, feed, out), LPX_ERR_INVALID_ARG, "penalty with feed");
    expect(begin(ops, be, &a, NULL, out), LPX_OK, "begin again");
    expect(ops->step_end(be), LPX_OK, "end");
    expect(ops->step_end(be), LPX_OK, "end");
    CHECK(!memcmp(out, ref[1], sizeof out));
    expect(begin(ops, be, &b, feed, out), LPX_OK, "feed from an ended step");
    expect(ops->step_end(be), LPX_OK, "end");
    CHECK(!memcmp(out, ref[2], sizeof out));
    memcpy(pen.ids, ref[1], sizeof ref[1]); /* the tokens, written out */
    expect(begin(ops, be, &pen, NULL, out), LPX_OK, "penalty without feed");
    expect(ops->step_end(be), LPX_OK, "end");

    CHECK(ops->step_end(be) != LPX_OK);
    free(logits);
}

int main(void) {
    const char *device = getenv("LPX_TEST_DEVICE") ? getenv("LPX_TEST_DEVICE") : "cpu";
    lpx_model *m = test_open_model();
    if (!m) {
        CHECK(0);
        TEST_DONE();
    }
    const lpx_backend_ops *ops;
    int ordinal;
    CHECK(lpx_backend_select(device, &ops, &ordinal) == LPX_OK);
    CHECK(ops != NULL);
    lpx_backend_opts o = {.device = ordinal,
                          .block_size = BS,
                          .n_blocks = NSEQ * MAXB,
                          .max_batch_tokens = NSEQ * PROMPT,
                          .max_seqs = NSEQ};
    lpx_backend *be = NULL;
    if (ops && ops->create(m, &o, &be) != LPX_OK) fprintf(stderr, "%s\n", lpx_last_error());
    if (be) {
        /* Feed before any step_begin. */
        step st;
        int32_t feed[NSEQ] = {0, 1, 2, 3}, out[NSEQ];
        make_step(&st, 1, fwd, NULL);
        expect(begin(ops, be, &st, feed, out), LPX_ERR_INVALID_ARG, "feed first");

        static int32_t ref[STEPS + 1][NSEQ], got[STEPS + 1][NSEQ];
        reference(ops, be, ref);
        ahead(ops, be, got);
        for (int k = 0; k <= STEPS; k++) {
            printf("step %d:", k);
            for (int s = 0; s < NSEQ; s++)
                printf(" %d/%d", ref[k][s], got[k][s]);
            printf("\n");
        }
        CHECK(!memcmp(ref, got, sizeof ref));
        /* The sampled sequences differ from greedy (the rows really sample). */
        int differ = 0;
        for (int k = 0; k <= STEPS; k++)
            differ += ref[k][1] != ref[k][0] || ref[k][2] != ref[k][0];
        CHECK(differ > 0);
        refusals(ops, be, ref);
        ops->destroy(be);
    } else {
        CHECK(0);
    }
    lpx_model_close(m);
    TEST_DONE();
}
