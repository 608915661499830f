/* Prompt logprobs (lpx_request.prompt_logprobs) on the CPU backend with the real
 * SmolLM2-135M-Instruct: each request's values are the same, bit for bit (the CPU
 * backend is batch-invariant), alone and in one big step, beside other requests in
 * small chunks, after an earlier request cached its prompt (no cached block is read
 * for them: they are computed), and through preemptions in a pool too small for all;
 * the blocks such a request computes are cached for the next plain one. The values
 * against numpy's log_softmax of `lpx logits` rows: tests/py/test_serve_echo.py. */
#include "engine/engine.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_REQ = 4, TOP = 3, MAX_IDS = 200, GEN = 3 };

#define BASE                                                                                       \
    "You are a careful assistant. Answer in one short sentence, in plain English, and never "      \
    "invent facts. If a question is ambiguous, say which reading you answer. Keep numbers "        \
    "exact and units explicit; prefer the metric system. When you do not know, say so "            \
    "plainly. Do not repeat the question, do not apologise, and do not add advice. "
static const char *const texts[N_REQ] = {
    BASE "Question: what is the capital of France?",
    BASE "Question: who wrote Hamlet?",
    "System: you translate short English sentences into French. Reply with the French "
    "sentence only, without quotes, notes or alternatives. Keep names as they are.",
    "Once upon a time",
};

typedef struct out {
    float lp[MAX_IDS];
    lpx_token_logprob top[MAX_IDS][TOP];
    int32_t rank[MAX_IDS];
    int n_plp, n_events, n_tokens, cached, finish;
} out;

static void on_event(const lpx_event *ev, void *user) {
    out *o = user;
    if (ev->prompt_logprob) {
        o->n_events++;
        o->n_plp = ev->n_prompt_tokens;
        CHECK(ev->index == 0 && ev->n_prompt_top == TOP && ev->n_prompt_tokens <= MAX_IDS);
        memcpy(o->lp, ev->prompt_logprob, (size_t)o->n_plp * sizeof(float));
        memcpy(o->top, ev->prompt_top, (size_t)o->n_plp * TOP * sizeof(lpx_token_logprob));
        memcpy(o->rank, ev->prompt_rank, (size_t)o->n_plp * sizeof(int32_t));
    }
    if (ev->token >= 0) o->n_tokens++;
    if (ev->finish) {
        o->finish = ev->finish;
        o->cached = ev->n_cached_tokens;
    }
}

static int32_t prompts[N_REQ][MAX_IDS];
static int n_prompt[N_REQ];

typedef struct setup {
    bool caching;
    int64_t kv_bytes;
    int32_t block_size, max_batched;
    bool one_by_one;
    int plp; /* prompt_logprobs of each request; 0 for the plain ones */
} setup;

static lpx_engine_stats run(const lpx_model *m, const setup *c, const int *which, int n, out *res) {
    lpx_engine_opts o;
    lpx_engine_opts_init(&o);
    o.device = "cpu";
    o.max_num_seqs = 3;
    o.max_model_len = 256;
    o.kv_cache_bytes = c->kv_bytes;
    o.block_size = c->block_size;
    o.max_num_batched_tokens = c->max_batched;
    o.prefix_caching = c->caching ? 1 : -1;
    lpx_engine_stats st = {0};
    lpx_engine *e;
    if (lpx_engine_create(m, &o, &e) != LPX_OK) {
        fprintf(stderr, "engine: %s\n", lpx_last_error());
        CHECK(0);
        return st;
    }
    for (int i = 0; i < n; i++) {
        lpx_request r;
        lpx_request_init(&r);
        r.prompt_ids = prompts[which[i]];
        r.n_prompt_ids = (size_t)n_prompt[which[i]];
        r.max_tokens = GEN;
        r.ignore_eos = true;
        r.prompt_logprobs = c->plp;
        memset(&res[i], 0, sizeof res[i]);
        uint64_t id;
        CHECK(lpx_engine_submit(e, &r, on_event, &res[i], &id) == LPX_OK);
        bool busy = c->one_by_one;
        while (busy)
            CHECK(lpx_engine_step(e, &busy) == LPX_OK);
    }
    bool busy = true;
    while (busy)
        CHECK(lpx_engine_step(e, &busy) == LPX_OK);
    lpx_engine_get_stats(e, &st);
    CHECK(st.n_finished == n);
    lpx_engine_destroy(e);
    return st;
}

/* a and b hold the same prompt logprobs, bit for bit. */
static bool same(const out *a, const out *b) {
    return a->n_events == 1 && b->n_events == 1 && a->n_plp == b->n_plp && isnan(a->lp[0]) &&
           isnan(b->lp[0]) &&
           !memcmp(a->lp + 1, b->lp + 1, (size_t)(a->n_plp - 1) * sizeof(float)) &&
           !memcmp(a->top + 1, b->top + 1, (size_t)(a->n_plp - 1) * sizeof a->top[0]) &&
           !memcmp(a->rank, b->rank, (size_t)a->n_plp * sizeof a->rank[0]);
}

int main(void) {
    lpx_model *m = test_open_model();
    if (!m) {
        CHECK(0);
        TEST_DONE();
    }
    for (int k = 0; k < N_REQ; k++) {
        size_t n = 0;
        CHECK(lpx_tokenize(lpx_model_tokenizer(m), texts[k], strlen(texts[k]), false, false,
                           prompts[k], MAX_IDS, &n) == LPX_OK &&
              n <= MAX_IDS);
        n_prompt[k] = (int)n;
    }
    CHECK(n_prompt[0] > 64 + 16); /* past one step's 64 rows */
    printf("prompts of %d, %d, %d, %d tokens\n", n_prompt[0], n_prompt[1], n_prompt[2],
           n_prompt[3]);

    /* Alone, each prompt in as few steps as the rows allow, nothing cached. */
    static out ref[N_REQ];
    setup alone = {
        .caching = false, .block_size = 16, .max_batched = 512, .one_by_one = true, .plp = TOP};
    int all[N_REQ] = {0, 1, 2, 3};
    run(m, &alone, all, N_REQ, ref);
    for (int k = 0; k < N_REQ; k++) {
        const out *r = &ref[k];
        CHECK(r->n_events == 1 && r->n_plp == n_prompt[k] && r->n_tokens == GEN);
        for (int i = 1; i < r->n_plp; i++) {
            /* a log-probability, at most the most likely one's; the top ranked */
            bool ok = r->lp[i] <= 0 && r->lp[i] <= r->top[i][0].logprob + 1e-6f;
            for (int t = 1; t < TOP; t++)
                ok = ok && r->top[i][t].logprob <= r->top[i][t - 1].logprob;
            /* the token is in the top exactly when its logprob reaches the third's */
            bool in_top = false;
            for (int t = 0; t < TOP; t++)
                in_top = in_top || r->top[i][t].id == prompts[k][i];
            ok = ok && (in_top == (r->lp[i] >= r->top[i][TOP - 1].logprob) ||
                        r->lp[i] == r->top[i][TOP - 1].logprob);
            /* its rank: 1 for the most likely, within the top exactly when in it (ties
             * aside), and past it otherwise */
            ok = ok && r->rank[i] >= 1 && (r->lp[i] < r->top[i][0].logprob || r->rank[i] == 1);
            ok = ok && (in_top ? r->rank[i] <= TOP || r->lp[i] == r->top[i][TOP - 1].logprob
                               : r->rank[i] > TOP);
            CHECK(ok);
            if (!ok) fprintf(stderr, "  request %d token %d: %g\n", k, i, r->lp[i]);
        }
    }

    /* All together in small chunks, and caching on with prompt 1 after prompt 0 shares
     * its first blocks: the same values, no cached tokens taken; the blocks were cached,
     * so a plain request of prompt 0 afterwards takes them. */
    static out mix[N_REQ];
    setup small = {.caching = true, .block_size = 16, .max_batched = 40, .plp = TOP};
    lpx_engine_stats s = run(m, &small, all, N_REQ, mix);
    for (int k = 0; k < N_REQ; k++) {
        CHECK(same(&ref[k], &mix[k]));
        CHECK(mix[k].cached == 0);
    }
    printf("together: %lld steps, %lld of %lld tokens from the cache\n", (long long)s.n_steps,
           (long long)s.prefix_cache_hits, (long long)s.prefix_cache_queries);
    static out seq[3];
    int again[3] = {0, 1, 0};
    setup cached = {
        .caching = true, .block_size = 16, .max_batched = 512, .one_by_one = true, .plp = TOP};
    run(m, &cached, again, 3, seq);
    CHECK(same(&ref[0], &seq[0]) && same(&ref[1], &seq[1]) && same(&ref[0], &seq[2]));
    CHECK(seq[1].cached == 0 && seq[2].cached == 0);
    {
        /* one engine: a request with logprobs, then a plain one of the same prompt */
        lpx_engine_opts o;
        lpx_engine_opts_init(&o);
        o.device = "cpu";
        o.max_model_len = 256;
        lpx_engine *e;
        CHECK(lpx_engine_create(m, &o, &e) == LPX_OK);
        out a = {0}, b = {0};
        for (int i = 0; i < 2; i++) {
            lpx_request r;
            lpx_request_init(&r);
            r.prompt_ids = prompts[0];
            r.n_prompt_ids = (size_t)n_prompt[0];
            r.max_tokens = GEN;
            r.prompt_logprobs = i == 0 ? TOP : 0;
            uint64_t id;
            CHECK(lpx_engine_submit(e, &r, on_event, i == 0 ? &a : &b, &id) == LPX_OK);
            bool busy = true;
            while (busy)
                CHECK(lpx_engine_step(e, &busy) == LPX_OK);
        }
        CHECK(same(&ref[0], &a) && a.cached == 0);
        CHECK(b.n_events == 0 && b.cached >= 16 * ((n_prompt[0] - 1) / 16));
        lpx_engine_destroy(e);
    }

    /* A pool of 28 blocks of 4 tokens (112) for prompts of about 80, 80 and 31 tokens + 3
     * at once: preemptions mid-prompt, the rows computed again; the same values. */
    int64_t bpt = (int64_t)lpx_kv_bytes_per_token(&m->cfg, LPX_KV_F32);
    setup tight = {
        .caching = true, .kv_bytes = 28 * 4 * bpt, .block_size = 4, .max_batched = 24, .plp = TOP};
    int three[3] = {1, 0, 2};
    static out t[3];
    s = run(m, &tight, three, 3, t);
    printf("tight pool: %lld preemptions\n", (long long)s.n_preemptions);
    CHECK(s.n_preemptions > 0);
    for (int i = 0; i < 3; i++)
        CHECK(same(&ref[three[i]], &t[i]));
    lpx_model_close(m);
    TEST_DONE();
}
