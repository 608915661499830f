/* The prefix cache on the CPU backend with the real SmolLM2-135M-Instruct:
 * twelve requests sharing prefixes of 0..4 blocks, in a shuffled order, give
 * the same greedy and seeded tokens with the cache on as with it off, also
 * with a KV pool too small to hold them all (blocks evicted and computed
 * again); a request sharing a long prefix with an earlier one computes only
 * its tail. Outputs are compared, and computed-token counts; no timing. The
 * model comes from scripts/fetch-model.sh. */
#include "engine/engine.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TIGHT blocks of 4 tokens: the longest request (78 tokens) fits alone, three don't. */
enum { N_REQ = 12, GEN = 4, BS = 16, MAX_IDS = 160, TIGHT = 20 };

static const char base_text[] =
    "You are a careful assistant. Answer in one short sentence, in plain English, and "
    "never invent facts. If a question is ambiguous, say which reading you answer. Keep "
    "numbers exact and units explicit; prefer the metric system. When you do not know, "
    "say so plainly. Do not repeat the question, do not apologise, and do not add advice "
    "that nobody asked for.";
static const char base_text2[] =
    "System: you translate short English sentences into French. Reply with the French "
    "sentence only, without quotes, notes or alternatives. Keep names as they are, write "
    "numbers as digits, and keep the punctuation of the original where French allows it. "
    "If a sentence is already French, return it unchanged. Never explain a translation, "
    "never ask a question back, and never add a greeting or a closing line to the reply.";
static const char *const tails[N_REQ] = {
    "Question: what is the capital of France?",
    "Question: how many legs has a spider?",
    "Question: what colour is the sky?",
    "Question: who wrote Hamlet?",
    "Name a prime number.",
    "What is water made of?",
    "How far is the Moon?",
    "Why do leaves fall?",
    "What is two plus two?",
    "Say hello.",
    "Which planet is largest?",
    "What melts ice?",
};

typedef struct out {
    int32_t ids[MAX_IDS];
    int n, finish, cached;
} out;

static void on_event(const lpx_event *ev, void *user) {
    out *o = user;
    if (ev->token >= 0 && o->n < MAX_IDS) o->ids[o->n++] = ev->token;
    if (ev->finish) {
        o->finish = ev->finish;
        o->cached = ev->n_cached_tokens;
    }
}

static const char *device = "cpu"; /* LPX_TEST_DEVICE: the same checks on another backend */
static int32_t prompts[N_REQ][MAX_IDS];
static int n_prompt[N_REQ];

static int tokenize(const lpx_model *m, const char *text, int32_t *ids, int cap) {
    size_t n = 0;
    CHECK(lpx_tokenize(lpx_model_tokenizer(m), text, strlen(text), false, false, ids, (size_t)cap,
                       &n) == LPX_OK);
    CHECK(n <= (size_t)cap);
    return (int)n;
}

static void drain(lpx_engine *e) {
    bool busy = true;
    while (busy)
        if (lpx_engine_step(e, &busy) != LPX_OK) {
            CHECK(0);
            break;
        }
}

/* Runs requests order[0..n) in that order on one engine, all queued at once or
 * each after the last has finished; sp NULL = greedy. */
static lpx_engine_stats run(const lpx_model *m, bool caching, int64_t kv_bytes, int32_t block_size,
                            const lpx_sampling_params *sp, const int *order, int n, bool one_by_one,
                            out *res) {
    lpx_engine_opts o;
    lpx_engine_opts_init(&o);
    o.device = device;
    o.max_num_seqs = 3; /* later requests are admitted after earlier ones cached blocks */
    o.max_model_len = 256;
    o.kv_cache_bytes = kv_bytes;
    o.block_size = block_size;
    o.max_num_batched_tokens = 48; /* prompts in chunks, mixed with decodes */
    o.prefix_caching = caching ? 1 : -1;
    lpx_engine_stats st = {0};
    lpx_engine *e;
    if (lpx_engine_create(m, &o, &e) != LPX_OK) {
        fprintf(stderr, "engine: %s\n", lpx_last_error());
        CHECK(0);
        return st;
    }
    for (int i = 0; i < n; i++) {
        int k = order[i];
        lpx_request r;
        lpx_request_init(&r);
        r.prompt_ids = prompts[k];
        r.n_prompt_ids = (size_t)n_prompt[k];
        r.max_tokens = GEN;
        r.ignore_eos = true;
        if (sp) {
            r.sampling = *sp;
            r.sampling.seed = sp->seed + k;
        }
        memset(&res[k], 0, sizeof res[k]);
        uint64_t id;
        CHECK(lpx_engine_submit(e, &r, on_event, &res[k], &id) == LPX_OK);
        if (one_by_one) drain(e);
    }
    drain(e);
    lpx_engine_get_stats(e, &st);
    CHECK(st.kv_blocks_used == 0 && st.n_finished == n);
    lpx_engine_destroy(e);
    return st;
}

static int count_differ(const out *a, const out *b, const int *order, int n) {
    int d = 0;
    for (int i = 0; i < n; i++) {
        int k = order[i];
        d += a[k].n != b[k].n || memcmp(a[k].ids, b[k].ids, GEN * sizeof(int32_t)) != 0;
    }
    return d;
}

static int same_all(const out *a, const out *b, const int *order, int n) {
    int ok = 1;
    for (int i = 0; i < n; i++) {
        int k = order[i];
        if (a[k].n != GEN || b[k].n != GEN || memcmp(a[k].ids, b[k].ids, GEN * sizeof(int32_t))) {
            fprintf(stderr, "request %d: outputs differ with the prefix cache\n", k);
            ok = 0;
        }
    }
    return ok;
}

int main(void) {
    if (getenv("LPX_TEST_DEVICE")) device = getenv("LPX_TEST_DEVICE");
    lpx_model *m = test_open_model();
    if (!m) {
        CHECK(0);
        TEST_DONE();
    }
    static int32_t base[2][MAX_IDS];
    CHECK(tokenize(m, base_text, base[0], MAX_IDS) >= 4 * BS);
    CHECK(tokenize(m, base_text2, base[1], MAX_IDS) >= 4 * BS);
    /* Request k: the first (k % 5) blocks of one of two bases, then its own tail. */
    for (int k = 0; k < N_REQ; k++) {
        int shared = (k % 5) * BS;
        memcpy(prompts[k], base[k % 2], (size_t)shared * sizeof(int32_t));
        n_prompt[k] = shared + tokenize(m, tails[k], prompts[k] + shared, MAX_IDS - shared);
    }
    /* A fixed shuffle. */
    int order[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        order[i] = (i * 7 + 3) % N_REQ;

    static out off[N_REQ], on[N_REQ], tight[N_REQ];
    lpx_engine_stats s_off = run(m, false, 0, BS, NULL, order, N_REQ, false, off);
    lpx_engine_stats s_on = run(m, true, 0, BS, NULL, order, N_REQ, false, on);
    printf("greedy: off %lld computed; on %lld computed, %lld of %lld tokens from the cache\n",
           (long long)s_off.computed_tokens, (long long)s_on.computed_tokens,
           (long long)s_on.prefix_cache_hits, (long long)s_on.prefix_cache_queries);
    CHECK(same_all(off, on, order, N_REQ));
    CHECK(s_off.prefix_cache_hits == 0 && s_on.prefix_cache_hits >= 4 * BS);
    CHECK(s_on.computed_tokens == s_off.computed_tokens - s_on.prefix_cache_hits);

    /* A pool of TIGHT blocks of 4 tokens for 3 sequences of up to 78 tokens:
     * preemptions, evictions (what was evicted is computed again: fewer hits
     * than with room for everything), recompute; the same tokens. */
    int64_t bpt =
        (int64_t)lpx_kv_bytes_per_token(&m->cfg, strcmp(device, "cpu") ? LPX_KV_BF16 : LPX_KV_F32);
    lpx_engine_stats s_tight = run(m, true, TIGHT * 4 * bpt, 4, NULL, order, N_REQ, false, tight);
    printf("%d-block pool: %lld preemptions, %lld of %lld tokens from the cache, %d cached "
           "at the end\n",
           TIGHT, (long long)s_tight.n_preemptions, (long long)s_tight.prefix_cache_hits,
           (long long)s_tight.prefix_cache_queries, s_tight.kv_blocks_cached);
    CHECK(same_all(off, tight, order, N_REQ));
    CHECK(s_tight.n_preemptions > 0 && s_tight.prefix_cache_hits > 0);
    CHECK(s_tight.kv_blocks_cached <= TIGHT);

    /* Seeded sampling (with a repetition penalty): on the CPU backend, which is
     * bitwise batch-invariant, the same tokens with the cache on and off, in the
     * same pool and in the tight one (its preemptions and 4-token blocks change how
     * the steps are batched). */
    lpx_sampling_params sp = {
        .temperature = 1.0f, .top_p = 0.95f, .repetition_penalty = 1.1f, .seed = 77};
    static out s_off_out[N_REQ], s_on_out[N_REQ], s_tight_out[N_REQ];
    run(m, false, 0, BS, &sp, order, N_REQ, false, s_off_out);
    run(m, true, 0, BS, &sp, order, N_REQ, false, s_on_out);
    if (!strcmp(device, "cpu")) {
        CHECK(same_all(s_off_out, s_on_out, order, N_REQ));
        run(m, true, TIGHT * 4 * bpt, 4, &sp, order, N_REQ, false, s_tight_out);
        CHECK(same_all(s_off_out, s_tight_out, order, N_REQ));
    } else {
        /* Reported, not asserted: a cached prefix's K/V were computed in another
         * request's batch, and the GPU's prefill GEMMs are not bitwise
         * batch-invariant (gpu-check: batched vs alone rel-L2 ~4e-4), so a draw at
         * temperature 1 can part ways; greedy is asserted above. On the H200
         * (2026-12-01) 11 of 12 requests were equal. */
        printf("seeded, same pool: %d of %d requests equal with the cache on and off\n",
               N_REQ - count_differ(s_off_out, s_on_out, order, N_REQ), N_REQ);
    }

    /* One request, then one sharing its 4-block prefix: the second computes its
     * tail and its outputs only, and its event says 64 tokens came cached. */
    int two[2] = {4, 9};
    memcpy(prompts[9], prompts[4], 4 * BS * sizeof(int32_t));
    n_prompt[9] = 4 * BS + tokenize(m, tails[9], prompts[9] + 4 * BS, MAX_IDS - 4 * BS);
    static out first[N_REQ], both[N_REQ];
    lpx_engine_stats s1 = run(m, true, 0, BS, NULL, two, 1, true, first);
    lpx_engine_stats s2 = run(m, true, 0, BS, NULL, two, 2, true, both);
    int64_t second = s2.computed_tokens - s1.computed_tokens;
    printf("second request: %d prompt tokens, %lld computed (of them %d outputs after the first)\n",
           n_prompt[9], (long long)second, GEN - 1);
    CHECK(both[9].cached == 4 * BS);
    CHECK(second == (n_prompt[9] - 4 * BS) + (GEN - 1));
    CHECK(both[9].n == GEN && first[4].n == GEN &&
          !memcmp(first[4].ids, both[4].ids, sizeof(int32_t) * GEN));

    lpx_model_close(m);
    TEST_DONE();
}
