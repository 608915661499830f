/* The engine over a mock backend whose logits are a hash of the whole context
 * it reads back through the block tables: any paging, chunking, batching or
 * preemption mistake changes the tokens. Every run is compared with a plain
 * reference loop that never touches the engine. The batch runs also go through
 * the mock's step_begin/step_end (one step ahead, docs/engine.md), where the
 * input tokens of a continuation are fed from the previous step's draws. */
#include "engine/engine_impl.h"
#include "test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { VOCAB = 64, MAXPOS = 512, EOS = 63, MAXROWS = 16, MAXTOK = 256 };

/* ---- mock backend --------------------------------------------------------- */

typedef struct mock {
    lpx_backend base;
    int32_t *slots; /* [n_blocks * block_size] token ids written to the cache */
    int fail_next;  /* make the next step fail */
    /* steps with sample; steps in flight (step_begin/step_end) */
    lpx_sampler sampler;
    int32_t drawn[2][MAXROWS]; /* FIFO of the steps in flight; drawn[last]: the last begun */
    int32_t *out[2];           /* their tokens' destinations; NULL: a logits step */
    int n_drawn[2], head, n_flight, last;
    bool feedable;
    int32_t fed[MAXTOK];
} mock;

static const lpx_backend_ops mock_ops;
static int violations;
/* The engine's pool, when set: a step that writes a slot of a block registered
 * in the prefix cache is a violation (registered K/V are final). */
static const lpx_kv_pool *watch;

static float logit_of(uint64_t h, int v) {
    uint64_t x = h ^ ((uint64_t)v * 0x9E3779B97F4A7C15ull);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (float)(x % 1000) / 100.0f - 5.0f;
}

static void context_logits(const int32_t *ctx, int n, float *out) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint64_t)(ctx[i] + 1)) * 1099511628211ull;
    for (int v = 0; v < VOCAB; v++)
        out[v] = logit_of(h, v);
}

static lpx_status mock_create(const lpx_model *m, const lpx_backend_opts *o, lpx_backend **out) {
    mock *b = calloc(1, sizeof *b);
    b->slots = malloc((size_t)o->n_blocks * o->block_size * sizeof *b->slots);
    b->base.ops = &mock_ops;
    b->base.model = m;
    b->base.opts = *o;
    *out = &b->base;
    return LPX_OK;
}

static lpx_status mock_step(lpx_backend *be, const lpx_batch *bt, float *logits) {
    mock *b = (mock *)be;
    const int bs = be->opts.block_size, nb = be->opts.n_blocks;
    if (b->fail_next) {
        b->fail_next = 0;
        return LPX_ERR_DEVICE;
    }
    if (bt->n_tokens > be->opts.max_batch_tokens || bt->n_seqs > be->opts.max_seqs) violations++;
    int32_t ctx[MAXPOS];
    int row = 0;
    for (int s = 0; s < bt->n_seqs; s++) {
        const int32_t *table = bt->block_table + (size_t)s * bt->max_blocks;
        int start = bt->seq_start[s], end = bt->seq_start[s + 1];
        if (end <= start || bt->positions[end - 1] != bt->seq_len[s] - 1) violations++;
        for (int t = start; t < end; t++) {
            int p = bt->positions[t];
            if (t > start && p != bt->positions[t - 1] + 1) violations++;
            int blk = table[p / bs];
            if (blk < 0 || blk >= nb) {
                violations++;
                continue;
            }
            if (watch && watch->caching && watch->cached[blk]) violations++;
            b->slots[blk * bs + p % bs] = bt->tokens[t];
        }
        for (; row < bt->n_logits && bt->logit_rows[row] < end; row++) {
            if (bt->logit_rows[row] != end - 1) violations++;
            for (int p = 0; p < bt->seq_len[s]; p++)
                ctx[p] = b->slots[table[p / bs] * bs + p % bs];
            context_logits(ctx, bt->seq_len[s], logits + (size_t)row * VOCAB);
        }
    }
    return LPX_OK;
}

static void mock_destroy(lpx_backend *be) {
    lpx_sampler_free(&((mock *)be)->sampler);
    free(((mock *)be)->slots);
    free(be);
}

/* The host sampler over mock_step's logits. */
static lpx_status mock_step_sample(lpx_backend *be, const lpx_batch *bt, const lpx_sample_batch *sb,
                                   int32_t *tokens) {
    mock *b = (mock *)be;
    float logits[MAXROWS * VOCAB];
    if (bt->n_logits > MAXROWS) {
        violations++;
        return LPX_ERR_INVALID_ARG;
    }
    if (!b->sampler.vocab) lpx_sampler_init(&b->sampler, VOCAB);
    lpx_status st = mock_step(be, bt, logits);
    for (int32_t i = 0; st == LPX_OK && i < bt->n_logits; i++) {
        const lpx_sample_row *r = &sb->rows[i];
        const bool pen = lpx_sampling_penalized(&r->p);
        tokens[i] =
            lpx_sample(&b->sampler, &r->p, r->seed, r->index, logits + i * VOCAB,
                       pen ? sb->seen + r->seen_start : NULL, pen ? r->n_seen : 0, NULL, NULL);
    }
    return st;
}

/* Synchronous, as the CPU backend's: the step runs at begin, its tokens wait. */
static lpx_status mock_step_begin(lpx_backend *be, const lpx_step *st) {
    mock *b = (mock *)be;
    const lpx_batch *bt = st->batch;
    if (b->n_flight == 2 || bt->n_tokens > MAXTOK ||
        (b->n_flight > 0 && (!st->sample || !b->out[b->last]))) {
        violations++;
        return LPX_ERR_BUSY;
    }
    int slot = (b->head + b->n_flight) % 2;
    lpx_status s;
    if (!st->sample) {
        if (st->feed) violations++;
        s = mock_step(be, bt, st->logits);
        b->feedable = false;
    } else {
        lpx_batch run = *bt;
        for (int32_t i = 0; i < bt->n_tokens; i++) {
            b->fed[i] = bt->tokens[i];
            if (!st->feed || st->feed[i] < 0) continue;
            if (!b->feedable || st->feed[i] >= b->n_drawn[b->last]) {
                violations++;
                return LPX_ERR_INVALID_ARG;
            }
            b->fed[i] = b->drawn[b->last][st->feed[i]];
        }
        run.tokens = b->fed;
        s = mock_step_sample(be, &run, st->sample, b->drawn[slot]);
        b->feedable = s == LPX_OK;
    }
    if (s != LPX_OK) return s;
    b->n_drawn[slot] = bt->n_logits;
    b->out[slot] = st->sample ? st->tokens : NULL;
    b->last = slot;
    b->n_flight++;
    return LPX_OK;
}

static lpx_status mock_step_end(lpx_backend *be) {
    mock *b = (mock *)be;
    if (b->n_flight == 0) {
        violations++;
        return LPX_ERR_INVALID_ARG;
    }
    if (b->out[b->head])
        memcpy(b->out[b->head], b->drawn[b->head], (size_t)b->n_drawn[b->head] * sizeof(int32_t));
    b->head = (b->head + 1) % 2;
    b->n_flight--;
    return LPX_OK;
}

static const lpx_backend_ops mock_ops = {.name = "mock",
                                         .create = mock_create,
                                         .step_begin = mock_step_begin,
                                         .step_end = mock_step_end,
                                         .destroy = mock_destroy};

/* ---- helpers -------------------------------------------------------------- */

typedef struct result {
    int32_t tokens[MAXPOS];
    int n, n_events, finish, preempt;
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int *done;
    lpx_engine *e;           /* set: the stats are read at the finish event */
    lpx_engine_stats at_end; /* as the finish event's listener reads them */
} result;

static void on_event(const lpx_event *ev, void *user) {
    result *r = user;
    if (ev->token >= 0) r->tokens[r->n++] = ev->token;
    r->n_events++;
    if (ev->finish) {
        if (r->e) lpx_engine_get_stats(r->e, &r->at_end);
        r->finish = ev->finish;
        r->preempt = ev->n_preemptions;
        if (r->mu) {
            pthread_mutex_lock(r->mu);
            (*r->done)++;
            pthread_cond_broadcast(r->cv);
            pthread_mutex_unlock(r->mu);
        }
    }
}

/* The reference: no engine, one sequence, the same sampler calls. */
static int reference(const int32_t *prompt, int n_prompt, const lpx_sampling_params *sp,
                     int max_tokens, bool stop_at_eos, int32_t *out) {
    lpx_sampler s;
    lpx_sampler_init(&s, VOCAB);
    int32_t ctx[MAXPOS];
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    int n = 0;
    float l[VOCAB];
    while (n < max_tokens && n_prompt + n < MAXPOS) {
        context_logits(ctx, n_prompt + n, l);
        lpx_token_count seen[MAXPOS];
        int32_t n_seen = lpx_token_counts(&s, ctx, n_prompt, ctx + n_prompt, n, seen);
        int32_t t = lpx_sample(&s, sp, (uint64_t)sp->seed, n, l, seen, n_seen, NULL, NULL);
        ctx[n_prompt + n] = out[n] = t;
        n++;
        if (stop_at_eos && t == EOS) break;
    }
    lpx_sampler_free(&s);
    return n;
}

static lpx_model model;

/* ahead: steps with sample, one step ahead; else every step returns logits and
 * the engine samples on the host. */
static lpx_engine *make_on(bool ahead, bool caching, int max_seqs, int max_tokens_step,
                           int n_blocks, int block_size) {
    lpx_engine_config c = {.ops = &mock_ops,
                           .step_ahead = ahead,
                           .device_sampling = ahead,
                           .prefix_caching = caching,
                           .device_name = "mock",
                           .max_num_seqs = max_seqs,
                           .max_num_batched_tokens = max_tokens_step,
                           .max_model_len = MAXPOS,
                           .block_size = block_size,
                           .n_blocks = n_blocks,
                           .kv_bytes_per_token = 8};
    lpx_engine *e = NULL;
    CHECK(lpx_engine_create_config(&model, &c, &e) == LPX_OK);
    watch = e ? &e->pool : NULL;
    return e;
}

static lpx_engine *make(int max_seqs, int max_tokens_step, int n_blocks, int block_size) {
    return make_on(false, false, max_seqs, max_tokens_step, n_blocks, block_size);
}

/* Every block registered in the prefix cache holds, in the mock's cache, the
 * tokens it is registered with. */
static bool cache_consistent(const lpx_engine *e) {
    const lpx_kv_pool *p = &e->pool;
    const mock *b = (const mock *)e->be;
    int32_t n_cached = 0;
    for (int32_t id = 0; p->caching && id < p->n_blocks; id++) {
        if (!p->cached[id]) continue;
        n_cached++;
        size_t at = (size_t)id * p->block_size;
        if (memcmp(p->tokens + at, b->slots + at, (size_t)p->block_size * sizeof(int32_t)))
            return false;
    }
    return n_cached == p->n_cached && lpx_kv_used(p) + p->n_free + p->n_lru == p->n_blocks;
}

static void drain(lpx_engine *e) {
    bool busy = true;
    for (int guard = 0; busy && guard < 100000; guard++)
        CHECK(lpx_engine_step(e, &busy) == LPX_OK);
    CHECK(!busy);
}

static void make_prompt(int k, int32_t *p, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (k * 31 + i * 7 + (i * i) % 13) % (VOCAB - 1);
}

/* Prompt k of a batch: 3..42 tokens, of which the first (k % 4) blocks (as
 * many as fit before its last token) are common to the batch. */
static int batch_prompt(int k, int block_size, int32_t *p) {
    int len = 3 + (k * 11) % 40, shared = (k % 4) * block_size;
    if (shared > len - 1) shared = (len - 1) / block_size * block_size;
    make_prompt(1000, p, shared);
    make_prompt(k, p + shared, len - shared);
    return len;
}

/* Runs n requests together on an engine shaped by the arguments and checks
 * each against the reference; returns the preemptions seen, and the prefix
 * cache's hits in *hits. sampled: 0 greedy, 1 seeded with penalties, 2 seeded
 * without (steps run ahead). ahead: on the mock's step_begin/step_end,
 * checking that steps did run ahead when the requests allow it. caching: the
 * prefix cache on (its registered blocks checked against the mock's cache). */
static int64_t batch_run(int n, int max_seqs, int step_tokens, int n_blocks, int block_size,
                         int sampled, bool ahead, bool caching, int64_t *hits) {
    lpx_engine *e = make_on(ahead, caching, max_seqs, step_tokens, n_blocks, block_size);
    if (!e) return -1;
    static result res[16];
    int32_t prompts[16][64];
    int lens[16];
    lpx_request rq[16];
    for (int k = 0; k < n; k++) {
        lens[k] = batch_prompt(k, block_size, prompts[k]);
        memset(&res[k], 0, sizeof res[k]);
        lpx_request_init(&rq[k]);
        rq[k].prompt_ids = prompts[k];
        rq[k].n_prompt_ids = (size_t)lens[k];
        rq[k].max_tokens = 10 + (k % 4) * 3;
        rq[k].ignore_eos = true;
        rq[k].sampling.seed = 1000 + k;
        if (sampled) {
            rq[k].sampling.temperature = 0.9f;
            rq[k].sampling.top_p = 0.9f;
        }
        if (sampled == 1) {
            rq[k].sampling.repetition_penalty = 1.2f;
            rq[k].sampling.frequency_penalty = 0.3f;
        }
        uint64_t id;
        CHECK(lpx_engine_submit(e, &rq[k], on_event, &res[k], &id) == LPX_OK);
    }
    drain(e);
    for (int k = 0; k < n; k++) {
        int32_t want[MAXPOS];
        int nw = reference(prompts[k], lens[k], &rq[k].sampling, rq[k].max_tokens, false, want);
        CHECK(res[k].finish == LPX_FINISH_LENGTH);
        CHECK(res[k].n == nw && !memcmp(res[k].tokens, want, (size_t)nw * sizeof *want));
    }
    lpx_engine_stats st;
    lpx_engine_get_stats(e, &st);
    CHECK(st.kv_blocks_used == 0 && st.n_running == 0 && st.n_waiting == 0);
    CHECK(st.n_finished == n && st.n_submitted == n);
    CHECK((st.steps_ahead > 0) == (ahead && sampled != 1));
    CHECK(cache_consistent(e));
    CHECK(st.prefix_cache_hits <= st.prefix_cache_queries);
    CHECK(caching || (st.prefix_cache_queries == 0 && st.kv_blocks_cached == 0));
    if (hits) *hits = st.prefix_cache_hits;
    lpx_engine_destroy(e);
    return st.n_preemptions;
}

/* ---- prefix cache --------------------------------------------------------- */

/* Submits a greedy request of n prompt tokens and max_tokens outputs. */
static uint64_t submit_greedy(lpx_engine *e, const int32_t *prompt, int n, int max_tokens,
                              result *r) {
    lpx_request rq;
    lpx_request_init(&rq);
    rq.prompt_ids = prompt;
    rq.n_prompt_ids = (size_t)n;
    rq.max_tokens = max_tokens;
    rq.ignore_eos = true;
    memset(r, 0, sizeof *r);
    uint64_t id = 0;
    CHECK(lpx_engine_submit(e, &rq, on_event, r, &id) == LPX_OK);
    return id;
}

/* r holds the reference's greedy tokens for prompt. */
static bool greedy_ok(const result *r, const int32_t *prompt, int n, int max_tokens) {
    lpx_sampling_params sp = {.top_p = 1, .repetition_penalty = 1};
    int32_t want[MAXPOS];
    int nw = reference(prompt, n, &sp, max_tokens, false, want);
    return r->n == nw && !memcmp(r->tokens, want, (size_t)nw * sizeof *want);
}

static lpx_engine_stats stats(lpx_engine *e) {
    lpx_engine_stats st;
    lpx_engine_get_stats(e, &st);
    return st;
}

/* One request after another, each sharing a prefix with the last: the second
 * computes only its tail, and what it takes from the cache is counted. */
static void cache_sequential(void) {
    lpx_engine *e = make_on(false, true, 4, 64, 32, 4);
    int32_t a[30], b[27];
    make_prompt(7, a, 30);
    memcpy(b, a, 16 * sizeof *b); /* 4 blocks of 4 in common */
    make_prompt(8, b + 16, 11);
    result ra, rb, rc;
    submit_greedy(e, a, 30, 5, &ra);
    drain(e);
    lpx_engine_stats s1 = stats(e);
    CHECK(greedy_ok(&ra, a, 30, 5) && ra.n_events == 5);
    CHECK(s1.computed_tokens == 30 + 4); /* the prompt, then 4 decode steps */
    CHECK(s1.prefix_cache_queries == 30 && s1.prefix_cache_hits == 0);
    /* a's 34 tokens: 8 full blocks registered, none held. */
    CHECK(s1.kv_blocks_cached == 8 && s1.kv_blocks_used == 0);

    submit_greedy(e, b, 27, 5, &rb);
    drain(e);
    lpx_engine_stats s2 = stats(e);
    CHECK(greedy_ok(&rb, b, 27, 5));
    CHECK(s2.computed_tokens - s1.computed_tokens == (27 - 16) + 4); /* only the tail */
    CHECK(s2.prefix_cache_queries == 30 + 27 && s2.prefix_cache_hits == 16);

    /* The whole prompt cached (a again, and a's first output tokens): all but
     * the block holding the last token come from the cache. */
    int32_t a2[33];
    memcpy(a2, a, sizeof a);
    memcpy(a2 + 30, ra.tokens, 3 * sizeof *a2);
    submit_greedy(e, a2, 33, 2, &rc);
    drain(e);
    lpx_engine_stats s3 = stats(e);
    CHECK(greedy_ok(&rc, a2, 33, 2) && rc.tokens[0] == ra.tokens[3]);
    CHECK(s3.prefix_cache_hits - s2.prefix_cache_hits == 32); /* 8 blocks; token 33 computed */
    CHECK(s3.computed_tokens - s2.computed_tokens == 1 + 1);
    CHECK(cache_consistent(e) && violations == 0);
    lpx_engine_destroy(e);
}

static int32_t n_cached_seen;
static void on_event_cached(const lpx_event *ev, void *user) {
    if (ev->finish) n_cached_seen = ev->n_cached_tokens;
    on_event(ev, user);
}

/* Two requests with one long prefix admitted in the same step both compute
 * their first chunk; the later one then takes the blocks the first one cached
 * meanwhile instead of computing them again (the event says how many). */
static void cache_same_step(void) {
    lpx_engine *e = make_on(false, true, 4, 64, 64, 4);
    int32_t a[40], b[40];
    make_prompt(11, a, 40);
    memcpy(b, a, 32 * sizeof *b);
    make_prompt(12, b + 32, 8);
    result ra, rb;
    submit_greedy(e, a, 40, 3, &ra);
    lpx_request rq;
    lpx_request_init(&rq);
    rq.prompt_ids = b;
    rq.n_prompt_ids = 40;
    rq.max_tokens = 3;
    rq.ignore_eos = true;
    memset(&rb, 0, sizeof rb);
    uint64_t id;
    CHECK(lpx_engine_submit(e, &rq, on_event_cached, &rb, &id) == LPX_OK);
    drain(e);
    lpx_engine_stats st = stats(e);
    CHECK(greedy_ok(&ra, a, 40, 3) && greedy_ok(&rb, b, 40, 3));
    /* Step 1: a's 40 and b's first 24; step 2: b takes a's blocks 6 and 7. */
    CHECK(st.prefix_cache_hits == 8 && n_cached_seen == 8);
    CHECK(st.computed_tokens == 40 + 24 + 8 + 2 * 2);
    CHECK(cache_consistent(e) && violations == 0);
    lpx_engine_destroy(e);
}

/* A pool too small for everything: prompts sharing prefixes one after another
 * evict and recompute, and give the reference's tokens. */
static void cache_tiny_pool(void) {
    for (int ahead = 0; ahead < 2; ahead++) {
        lpx_engine *e = make_on(ahead, true, 2, 16, 10, 4); /* 40 slots */
        int32_t p[12][48];
        int n[12];
        for (int k = 0; k < 12; k++) {
            n[k] = batch_prompt(k, 4, p[k]) % 20 + 5;
            if (k % 3 == 2) memcpy(p[k], p[k - 2], 8 * sizeof(int32_t)); /* 2 blocks of k-2 */
        }
        static result r[12];
        for (int k = 0; k < 12; k += 2) { /* two at a time */
            submit_greedy(e, p[k], n[k], 6, &r[k]);
            submit_greedy(e, p[k + 1], n[k + 1], 6, &r[k + 1]);
            drain(e);
            CHECK(cache_consistent(e));
        }
        for (int k = 0; k < 12; k++)
            CHECK(greedy_ok(&r[k], p[k], n[k], 6));
        lpx_engine_stats st = stats(e);
        printf("tiny pool (ahead %d): %lld hits of %lld queried, %lld preemptions, %d cached\n",
               ahead, (long long)st.prefix_cache_hits, (long long)st.prefix_cache_queries,
               (long long)st.n_preemptions, st.kv_blocks_cached);
        CHECK(st.prefix_cache_hits > 0 && st.kv_blocks_cached <= 10 && st.kv_blocks_used == 0);
        CHECK(violations == 0);
        lpx_engine_destroy(e);
    }
}

/* Cancelling a request that shares blocks leaves them to the other holder
 * and to the cache; a failed step registers nothing it wrote. */
static void cache_cancel_and_fail(void) {
    lpx_engine *e = make_on(false, true, 4, 64, 16, 4);
    int32_t a[20], b[22];
    make_prompt(21, a, 20);
    memcpy(b, a, 16 * sizeof *b);
    make_prompt(22, b + 16, 6);
    result ra, rb, rc;
    submit_greedy(e, a, 20, 2, &ra);
    drain(e); /* a's prompt cached */
    uint64_t ia = submit_greedy(e, a, 20, -1, &ra);
    submit_greedy(e, b, 22, 8, &rb);
    bool busy;
    for (int i = 0; i < 3; i++)
        lpx_engine_step(e, &busy);
    CHECK(e->running.n == 2 && e->pool.ref[e->running.v[0]->bt.ids[0]] == 2);
    CHECK(lpx_engine_cancel(e, ia) == LPX_OK);
    drain(e);
    CHECK(ra.finish == LPX_FINISH_CANCELLED && rb.finish == LPX_FINISH_LENGTH);
    CHECK(greedy_ok(&rb, b, 22, 8));
    lpx_engine_stats st = stats(e);
    CHECK(st.kv_blocks_used == 0 && st.kv_blocks_cached > 0 && cache_consistent(e));
    /* The prefix is still there for the next one. */
    int64_t hits = st.prefix_cache_hits;
    submit_greedy(e, b, 22, 3, &rc);
    drain(e);
    CHECK(greedy_ok(&rc, b, 22, 3) && stats(e).prefix_cache_hits - hits == 20);

    /* A step that fails: its sequence ends with "error" and none of the
     * blocks it wrote is registered. */
    int32_t c[16];
    make_prompt(23, c, 16);
    int32_t cached_before = stats(e).kv_blocks_cached;
    submit_greedy(e, c, 16, 3, &rc);
    ((mock *)e->be)->fail_next = 1;
    CHECK(lpx_engine_step(e, &busy) == LPX_ERR_DEVICE);
    CHECK(rc.finish == LPX_FINISH_ERROR);
    st = stats(e);
    CHECK(st.kv_blocks_cached == cached_before && st.kv_blocks_used == 0);
    submit_greedy(e, c, 16, 3, &rc);
    drain(e);
    CHECK(greedy_ok(&rc, c, 16, 3));
    CHECK(cache_consistent(e) && violations == 0);
    lpx_engine_destroy(e);
}

/* ---- threads -------------------------------------------------------------- */

typedef struct worker {
    lpx_engine *e;
    int base;
    result *res;
    int32_t prompts[4][16];
} worker;

static void *submitter(void *arg) {
    worker *w = arg;
    for (int k = 0; k < 4; k++) {
        make_prompt(w->base + k, w->prompts[k], 16);
        lpx_request rq;
        lpx_request_init(&rq);
        rq.prompt_ids = w->prompts[k];
        rq.n_prompt_ids = 16;
        rq.max_tokens = 12;
        rq.ignore_eos = true;
        uint64_t id;
        CHECK(lpx_engine_submit(w->e, &rq, on_event, &w->res[k], &id) == LPX_OK);
    }
    return NULL;
}

/* A group (one client request's n choices) runs at most max_seqs_per_group sequences:
 * a later request starts while the group's other choices wait, and every choice still
 * gives the reference's tokens. */
static void group_cap(void) {
    for (int ahead = 0; ahead < 2; ahead++) {
        lpx_engine *e = make_on(ahead, false, 4, 64, 64, 4);
        e->cfg.max_seqs_per_group = 2;
        int32_t pa[9], pb[5];
        make_prompt(21, pa, 9);
        make_prompt(22, pb, 5);
        enum { NA = 6, MT = 6 };
        static result ra[NA], rb;
        lpx_request rq;
        lpx_request_init(&rq);
        rq.prompt_ids = pa;
        rq.n_prompt_ids = 9;
        rq.max_tokens = MT;
        rq.ignore_eos = true;
        uint64_t id, first = 0;
        for (int i = 0; i < NA; i++) {
            memset(&ra[i], 0, sizeof ra[i]);
            rq.group = first;
            CHECK(lpx_engine_submit(e, &rq, on_event, &ra[i], &id) == LPX_OK);
            if (!first) first = id;
        }
        submit_greedy(e, pb, 5, MT, &rb);
        bool busy = true;
        int max_running = 0, b_first_at = -1, a_done_at = -1;
        for (int step = 0; busy && step < 1000; step++) {
            CHECK(lpx_engine_step(e, &busy) == LPX_OK);
            int running = 0, done = 0;
            for (int i = 0; i < NA; i++) {
                running += ra[i].n > 0 && !ra[i].finish;
                done += ra[i].finish != 0;
            }
            if (running > max_running) max_running = running;
            if (rb.n > 0 && b_first_at < 0) b_first_at = step;
            if (done == NA && a_done_at < 0) a_done_at = step;
        }
        CHECK(!busy);
        CHECK(max_running == 2);
        CHECK(b_first_at >= 0 && b_first_at < 3 && a_done_at > b_first_at + MT);
        for (int i = 0; i < NA; i++)
            CHECK(greedy_ok(&ra[i], pa, 9, MT));
        CHECK(greedy_ok(&rb, pb, 5, MT));
        lpx_engine_destroy(e);
    }
}

int main(void) {
    model.cfg.vocab_size = VOCAB;
    model.cfg.max_position_embeddings = MAXPOS;
    model.gen.eos_ids[0] = EOS;
    model.gen.n_eos = 1;

    /* Alone, batched, chunked prefill, and under KV pressure: all equal the
     * reference (greedy, seeded sampling with and without penalties), with
     * steps run synchronously and one ahead. */
    for (int caching = 0; caching < 2; caching++)
        for (int ahead = 0; ahead < 2; ahead++)
            for (int sampled = 0; sampled < 3; sampled++) {
                int64_t h[5] = {0};
                CHECK(batch_run(1, 8, 256, 64, 16, sampled, ahead, caching, &h[0]) == 0);
                CHECK(batch_run(8, 8, 256, 256, 16, sampled, ahead, caching, &h[1]) == 0);
                /* prefill in chunks of <= 7 */
                CHECK(batch_run(8, 8, 7, 256, 4, sampled, ahead, caching, &h[2]) == 0);
                /* 12 blocks of 8 tokens: 96 slots for 8 sequences of up to ~70. */
                int64_t pre = batch_run(8, 8, 64, 12, 8, sampled, ahead, caching, &h[3]);
                CHECK(pre > 0);
                CHECK(batch_run(16, 3, 16, 16, 4, sampled, ahead, caching, &h[4]) > 0);
                /* With the cache: hits wherever a shared prefix or a preempted
                 * sequence's own blocks were still cached when it was admitted. */
                CHECK(caching == (h[2] > 0 && h[3] > 0 && h[4] > 0));
                CHECK(h[0] == 0 && h[1] == 0); /* alone, or all admitted in one step */
            }
    CHECK(violations == 0);
    group_cap();

    /* EOS ends a greedy run with "stop" exactly where the reference emits it;
     * ignore_eos runs on to max_tokens. */
    int found = 0;
    for (int k = 0; k < 200 && !found; k++) {
        int32_t p[8], want[MAXPOS];
        make_prompt(k, p, 8);
        lpx_sampling_params sp = {.top_p = 1, .repetition_penalty = 1, .seed = 1};
        int nw = reference(p, 8, &sp, 100, true, want);
        if (want[nw - 1] != EOS) continue;
        found = 1;
        lpx_engine *e = make(4, 64, 64, 16);
        result r1 = {0}, r2 = {0};
        lpx_request rq;
        lpx_request_init(&rq);
        rq.prompt_ids = p;
        rq.n_prompt_ids = 8;
        rq.max_tokens = 100;
        uint64_t id;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r1, &id) == LPX_OK);
        rq.ignore_eos = true;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r2, &id) == LPX_OK);
        drain(e);
        CHECK(r1.finish == LPX_FINISH_STOP && r1.n == nw && r1.tokens[nw - 1] == EOS);
        CHECK(r2.finish == LPX_FINISH_LENGTH && r2.n == 100);
        lpx_engine_destroy(e);
    }
    CHECK(found);

    /* Refusals before any memory is taken; a run that reaches max_model_len. */
    {
        lpx_engine *e = make(4, 64, 8, 16); /* the pool holds 128 tokens */
        int32_t p[MAXPOS];
        make_prompt(3, p, MAXPOS);
        lpx_request rq;
        lpx_request_init(&rq);
        rq.prompt_ids = p;
        uint64_t id;
        result r = {0};
        rq.n_prompt_ids = MAXPOS;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r, &id) == LPX_ERR_TOO_LONG);
        CHECK(strstr(lpx_last_error(), "512") != NULL);
        rq.n_prompt_ids = 128; /* fits max_model_len but not the pool */
        CHECK(lpx_engine_submit(e, &rq, on_event, &r, &id) == LPX_ERR_TOO_LONG);
        CHECK(strstr(lpx_last_error(), "128") != NULL);
        rq.n_prompt_ids = 0;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r, &id) == LPX_ERR_INVALID_ARG);
        rq.n_prompt_ids = 4;
        rq.max_tokens = 0;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r, &id) == LPX_ERR_INVALID_ARG);
        rq.max_tokens = -1;
        rq.sampling.temperature = -1;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r, &id) == LPX_ERR_INVALID_ARG);
        rq.sampling.temperature = 0;
        int32_t bad = VOCAB;
        rq.prompt_ids = &bad;
        rq.n_prompt_ids = 1;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r, &id) == LPX_ERR_INVALID_ARG);
        lpx_engine_stats st;
        lpx_engine_get_stats(e, &st);
        CHECK(st.n_submitted == 0 && st.kv_blocks_used == 0);
        /* 120 prompt tokens, no max_tokens: ends at the pool's 128 tokens. */
        rq.prompt_ids = p;
        rq.n_prompt_ids = 120;
        rq.ignore_eos = true;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r, &id) == LPX_OK);
        drain(e);
        CHECK(r.finish == LPX_FINISH_LENGTH && r.n == 8);
        lpx_engine_destroy(e);
    }

    /* Cancel: waiting and running requests end "cancelled", blocks return. */
    {
        lpx_engine *e = make(1, 64, 16, 16);
        int32_t p[8];
        make_prompt(1, p, 8);
        lpx_request rq;
        lpx_request_init(&rq);
        rq.prompt_ids = p;
        rq.n_prompt_ids = 8;
        rq.ignore_eos = true;
        result r1 = {0}, r2 = {0};
        uint64_t id1, id2;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r1, &id1) == LPX_OK);
        CHECK(lpx_engine_submit(e, &rq, on_event, &r2, &id2) == LPX_OK);
        bool busy;
        for (int i = 0; i < 5; i++)
            lpx_engine_step(e, &busy);
        CHECK(r1.n == 5 && r2.n == 0); /* max_num_seqs 1: the second waits */
        CHECK(lpx_engine_cancel(e, id1) == LPX_OK);
        CHECK(lpx_engine_cancel(e, id2) == LPX_OK);
        CHECK(lpx_engine_cancel(e, 999) == LPX_ERR_INVALID_ARG);
        drain(e);
        CHECK(r1.finish == LPX_FINISH_CANCELLED && r2.finish == LPX_FINISH_CANCELLED);
        CHECK(lpx_engine_cancel(e, id1) == LPX_OK); /* finished: a no-op */
        lpx_engine_stats st;
        lpx_engine_get_stats(e, &st);
        CHECK(st.kv_blocks_used == 0);
        /* A backend failure ends the step's requests with "error"; the engine goes on. */
        result r3 = {0}, r4 = {0};
        CHECK(lpx_engine_submit(e, &rq, on_event, &r3, &id1) == LPX_OK);
        ((mock *)e->be)->fail_next = 1;
        CHECK(lpx_engine_step(e, &busy) == LPX_ERR_DEVICE);
        CHECK(r3.finish == LPX_FINISH_ERROR);
        rq.max_tokens = 3;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r4, &id2) == LPX_OK);
        drain(e);
        CHECK(r4.finish == LPX_FINISH_LENGTH && r4.n == 3);
        /* Destroy ends what is still queued as cancelled. */
        result r5 = {0};
        CHECK(lpx_engine_submit(e, &rq, on_event, &r5, &id1) == LPX_OK);
        lpx_engine_destroy(e);
        CHECK(r5.finish == LPX_FINISH_CANCELLED);
    }

    /* A finish event's listener (the server, answering its client) reads stats
     * that already show the request ended: its last token counted, not running,
     * its blocks free; a cancel (no last token) counts nothing more. */
    {
        lpx_engine *e = make(1, 64, 16, 16);
        int32_t p[8];
        make_prompt(2, p, 8);
        lpx_request rq;
        lpx_request_init(&rq);
        rq.prompt_ids = p;
        rq.n_prompt_ids = 8;
        rq.ignore_eos = true;
        result r1 = {.e = e}, r2 = {.e = e}, r3 = {.e = e};
        uint64_t id;
        rq.max_tokens = 3;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r1, &id) == LPX_OK);
        rq.max_tokens = 5;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r2, &id) == LPX_OK);
        drain(e);
        CHECK(r1.n == 3 && r2.n == 5);
        const lpx_engine_stats *a = &r1.at_end, *b = &r2.at_end;
        CHECK(a->generated_tokens == 3 && a->n_finished == 1 && a->n_running == 0);
        CHECK(a->n_waiting == 1 && a->kv_blocks_used == 0); /* max_num_seqs 1: r2 waited */
        CHECK(b->generated_tokens == 8 && b->n_finished == 2 && b->n_running == 0);
        CHECK(b->n_waiting == 0 && b->kv_blocks_used == 0);
        rq.max_tokens = -1;
        CHECK(lpx_engine_submit(e, &rq, on_event, &r3, &id) == LPX_OK);
        bool busy;
        for (int i = 0; i < 3; i++)
            lpx_engine_step(e, &busy);
        CHECK(lpx_engine_cancel(e, id) == LPX_OK);
        drain(e);
        CHECK(r3.finish == LPX_FINISH_CANCELLED && r3.n == 3);
        CHECK(r3.at_end.generated_tokens == 11 && r3.at_end.n_running == 0);
        CHECK(r3.at_end.kv_blocks_used == 0);
        lpx_engine_destroy(e);
    }

    cache_sequential();
    cache_same_step();
    cache_tiny_pool();
    cache_cancel_and_fail();

    /* The engine thread serving four submitting threads at once. */
    {
        lpx_engine *e = make(6, 32, 40, 4);
        pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
        int done = 0;
        static result res[4][4];
        worker w[4];
        memset(res, 0, sizeof res);
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < 4; k++) {
                res[t][k].mu = &mu;
                res[t][k].cv = &cv;
                res[t][k].done = &done;
            }
        CHECK(lpx_engine_start(e) == LPX_OK);
        bool busy;
        CHECK(lpx_engine_step(e, &busy) == LPX_ERR_BUSY);
        pthread_t th[4];
        for (int t = 0; t < 4; t++) {
            w[t].e = e;
            w[t].base = t * 4;
            w[t].res = res[t];
            pthread_create(&th[t], NULL, submitter, &w[t]);
        }
        for (int t = 0; t < 4; t++)
            pthread_join(th[t], NULL);
        pthread_mutex_lock(&mu);
        while (done < 16)
            pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        lpx_engine_stop(e);
        lpx_sampling_params sp = {.top_p = 1, .repetition_penalty = 1};
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < 4; k++) {
                int32_t want[MAXPOS];
                int nw = reference(w[t].prompts[k], 16, &sp, 12, false, want);
                CHECK(res[t][k].n == nw && !memcmp(res[t][k].tokens, want, sizeof(int32_t) * nw));
            }
        lpx_engine_destroy(e);
    }
    CHECK(violations == 0);
    TEST_DONE();
}
