/* The engine's one-step-ahead decode (docs/engine.md) on the CPU backend with
 * the real SmolLM2: every request gives the same tokens, text and finish with
 * step ahead on and off, in
 *  - a mix: greedy and seeded requests of different lengths, a stop string, a
 *    stop token, a penalised request (its steps do not run ahead), requests
 *    that arrive while others decode, a cancel from a token's callback;
 *  - a KV pool so small that sequences are preempted;
 *  - the engine's own thread;
 * and the steps really ran ahead (stats.steps_ahead), no KV block is left
 * used, every request hears one finish. Then: destroy with a step in flight,
 * and backend failures in step_begin and step_end (injected around the CPU
 * backend's ops) end the sequences in flight with an error and the engine goes
 * on. */
#include "base/error.h"
#include "engine/engine.h"
#include "test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NREQ = 10, MAXOUT = 32, TEXT = 1024 };

typedef struct req {
    int prompt;
    lpx_sampling_params sp;
    int max_tokens;
    const char *stop;
    int32_t stop_id; /* -1: none */
    bool ignore_eos;
    int spawn, spawn_at; /* at its token spawn_at, submit request spawn (0: none) */
    int cancel_at;       /* cancel itself at this token (0: never) */
} req;

typedef struct out {
    int32_t ids[MAXOUT];
    int n, finishes, finish;
    char text[TEXT];
    size_t text_len;
    char error[128];
} out;

typedef struct ctx {
    lpx_engine *e;
    const req *reqs;
    int n_reqs;
    out res[NREQ];
    uint64_t ids[NREQ];
    int n_done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} ctx;

typedef struct tag {
    ctx *c;
    int k;
} tag;

static tag tags[NREQ];
static int32_t prompts[4][12] = {
    {1, 504, 3458, 28, 253, 6512, 1373, 30},
    {1373, 30, 5248, 2, 1, 504, 3458},
    {28, 253, 1373, 30, 504, 3458, 6512, 28, 253},
    {2, 6512, 28, 5248, 253, 30},
};
static int n_prompts[4] = {8, 7, 9, 6};

static void submit(ctx *c, int k);

static void on_event(const lpx_event *ev, void *user) {
    tag *t = user;
    ctx *c = t->c;
    out *o = &c->res[t->k];
    const req *r = &c->reqs[t->k];
    if (ev->token >= 0 && o->n < MAXOUT) o->ids[o->n++] = ev->token;
    if (ev->text_len && o->text_len + ev->text_len < TEXT) {
        memcpy(o->text + o->text_len, ev->text, ev->text_len);
        o->text_len += ev->text_len;
    }
    if (ev->token >= 0 && r->spawn && o->n == r->spawn_at) submit(c, r->spawn);
    if (ev->token >= 0 && o->n == r->cancel_at) CHECK(lpx_engine_cancel(c->e, ev->id) == LPX_OK);
    if (ev->finish) {
        pthread_mutex_lock(&c->mu);
        o->finishes++;
        o->finish = ev->finish;
        if (ev->error) snprintf(o->error, sizeof o->error, "%s", ev->error);
        c->n_done++;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

static void submit(ctx *c, int k) {
    const req *q = &c->reqs[k];
    lpx_request r;
    lpx_request_init(&r);
    r.prompt_ids = prompts[q->prompt];
    r.n_prompt_ids = (size_t)n_prompts[q->prompt];
    r.sampling = q->sp;
    r.max_tokens = q->max_tokens;
    r.ignore_eos = q->ignore_eos;
    if (q->stop) {
        r.stop = &q->stop;
        r.n_stop = 1;
    }
    if (q->stop_id >= 0) {
        r.stop_token_ids = &q->stop_id;
        r.n_stop_token_ids = 1;
    }
    tags[k] = (tag){c, k};
    CHECK(lpx_engine_submit(c->e, &r, on_event, &tags[k], &c->ids[k]) == LPX_OK);
}

static lpx_engine_opts options(int step_ahead, int64_t kv_bytes) {
    lpx_engine_opts o;
    lpx_engine_opts_init(&o);
    o.device = "cpu";
    o.max_num_seqs = 8;
    o.max_model_len = 128;
    o.max_num_batched_tokens = 64;
    o.kv_cache_bytes = kv_bytes;
    o.block_size = kv_bytes ? 4 : 16;
    o.step_ahead = step_ahead;
    return o;
}

/* Requests with spawn_at 0 and not spawned by another are submitted first. */
static bool spawned(const req *reqs, int n, int k) {
    for (int i = 0; i < n; i++)
        if (reqs[i].spawn == k && reqs[i].spawn_at > 0) return true;
    return false;
}

/* Runs reqs to the end (threaded: on the engine's thread); the stats after. */
static void run(const lpx_model *m, const lpx_engine_opts *o, const req *reqs, int n, bool threaded,
                ctx *c, lpx_engine_stats *st) {
    memset(c, 0, sizeof *c);
    c->reqs = reqs;
    c->n_reqs = n;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (lpx_engine_create(m, o, &c->e) != LPX_OK) {
        fprintf(stderr, "%s\n", lpx_last_error());
        CHECK(0);
        return;
    }
    if (threaded) CHECK(lpx_engine_start(c->e) == LPX_OK);
    for (int k = 0; k < n; k++)
        if (!spawned(reqs, n, k)) submit(c, k);
    if (threaded) {
        pthread_mutex_lock(&c->mu);
        while (c->n_done < n)
            pthread_cond_wait(&c->cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
        lpx_engine_stop(c->e);
    } else {
        bool busy = true;
        while (busy)
            if (lpx_engine_step(c->e, &busy) != LPX_OK) {
                fprintf(stderr, "%s\n", lpx_last_error());
                CHECK(0);
                break;
            }
    }
    lpx_engine_get_stats(c->e, st);
    CHECK(st->kv_blocks_used == 0 && st->n_finished == n && st->n_running == 0);
    lpx_engine_destroy(c->e);
    for (int k = 0; k < n; k++)
        CHECK(c->res[k].finishes == 1);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* Runs reqs with step ahead off and on: the same outputs, and steps ran ahead.
 * Returns the tokens computed in excess with step ahead on. */
static int64_t compare(const lpx_model *m, const char *name, const req *reqs, int n,
                       int64_t kv_bytes, bool threaded) {
    static ctx off, on;
    lpx_engine_stats s_off, s_on;
    lpx_engine_opts o = options(-1, kv_bytes);
    run(m, &o, reqs, n, threaded, &off, &s_off);
    o = options(1, kv_bytes);
    run(m, &o, reqs, n, threaded, &on, &s_on);
    printf("%s: off %lld steps, %lld computed, %lld preemptions; on %lld steps (%lld ahead), "
           "%lld computed, %lld preemptions\n",
           name, (long long)s_off.n_steps, (long long)s_off.computed_tokens,
           (long long)s_off.n_preemptions, (long long)s_on.n_steps, (long long)s_on.steps_ahead,
           (long long)s_on.computed_tokens, (long long)s_on.n_preemptions);
    CHECK(s_off.steps_ahead == 0 && s_on.steps_ahead > 0);
    CHECK(s_on.generated_tokens == s_off.generated_tokens);
    for (int k = 0; k < n; k++) {
        const out *a = &off.res[k], *b = &on.res[k];
        bool same = a->n == b->n && !memcmp(a->ids, b->ids, (size_t)a->n * sizeof *a->ids) &&
                    a->finish == b->finish && a->text_len == b->text_len &&
                    !memcmp(a->text, b->text, a->text_len);
        if (!same)
            fprintf(stderr, "%s request %d: off %d tokens (%s) '%.*s', on %d tokens (%s) '%.*s'\n",
                    name, k, a->n, lpx_finish_reason_name(a->finish), (int)a->text_len, a->text,
                    b->n, lpx_finish_reason_name(b->finish), (int)b->text_len, b->text);
        CHECK(same);
    }
    return s_on.computed_tokens - s_off.computed_tokens;
}

/* ---- injected backend failures --------------------------------------------- */

static lpx_backend_ops faulty;
static int begins, ends, fail_begin_at, fail_end_at, in_flight;

static lpx_status faulty_begin(lpx_backend *b, const lpx_step *s) {
    if (++begins == fail_begin_at) return lpx_errorf(LPX_ERR_DEVICE, "injected begin failure");
    lpx_status st = lpx_cpu_backend_ops.step_begin(b, s);
    if (st == LPX_OK) in_flight++;
    return st;
}

/* A failed step_end ends every step in flight (the contract). */
static lpx_status faulty_end(lpx_backend *b) {
    if (++ends == fail_end_at) {
        for (; in_flight > 0; in_flight--)
            lpx_cpu_backend_ops.step_end(b);
        return lpx_errorf(LPX_ERR_DEVICE, "injected end failure");
    }
    lpx_status st = lpx_cpu_backend_ops.step_end(b);
    if (st == LPX_OK) in_flight--;
    return st;
}

/* The CPU backend, its steps through faulty's ops. */
static lpx_status faulty_create(const lpx_model *m, const lpx_backend_opts *o, lpx_backend **out) {
    lpx_status st = lpx_cpu_backend_ops.create(m, o, out);
    if (st == LPX_OK) (*out)->ops = &faulty;
    return st;
}

/* Four requests; the fault_begin-th step_begin or the fault_end-th step_end
 * fails. Those in flight then end with the error; the rest and a request
 * submitted afterwards give the reference's tokens. */
static void faults(const lpx_model *m, const req *reqs, const ctx *ref, int at_begin, int at_end) {
    faulty = lpx_cpu_backend_ops;
    faulty.step_begin = faulty_begin;
    faulty.step_end = faulty_end;
    faulty.create = faulty_create;
    begins = ends = in_flight = 0;
    fail_begin_at = at_begin;
    fail_end_at = at_end;
    lpx_engine_config cfg = {.ops = &faulty,
                             .max_num_seqs = 8,
                             .max_num_batched_tokens = 64,
                             .max_model_len = 128,
                             .block_size = 16,
                             .n_blocks = 64,
                             .kv_bytes_per_token = lpx_kv_bytes_per_token(&m->cfg, LPX_KV_F32),
                             .step_ahead = true,
                             .device_sampling = true};
    snprintf(cfg.device_name, sizeof cfg.device_name, "cpu");
    static ctx c;
    memset(&c, 0, sizeof c);
    c.reqs = reqs;
    c.n_reqs = 5;
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    if (lpx_engine_create_config(m, &cfg, &c.e) != LPX_OK) {
        CHECK(0);
        return;
    }
    for (int k = 0; k < 4; k++)
        submit(&c, k);
    bool busy = true;
    int errors = 0;
    while (busy)
        errors += lpx_engine_step(c.e, &busy) != LPX_OK;
    CHECK(errors == 1);
    int failed = 0;
    for (int k = 0; k < 4; k++) {
        const out *o = &c.res[k], *want = &ref->res[k];
        CHECK(o->finishes == 1);
        CHECK(o->n <= want->n && !memcmp(o->ids, want->ids, (size_t)o->n * sizeof *o->ids));
        if (o->finish == LPX_FINISH_ERROR) {
            failed++;
            CHECK(strstr(o->error, "injected") != NULL);
        } else {
            CHECK(o->finish == want->finish && o->n == want->n);
        }
    }
    printf("fault at begin %d / end %d: %d of 4 requests failed\n", at_begin, at_end, failed);
    CHECK(failed > 0);
    /* The engine goes on. */
    submit(&c, 4);
    busy = true;
    while (busy)
        CHECK(lpx_engine_step(c.e, &busy) == LPX_OK);
    CHECK(c.res[4].n == ref->res[4].n &&
          !memcmp(c.res[4].ids, ref->res[4].ids, (size_t)c.res[4].n * sizeof(int32_t)));
    lpx_engine_stats st;
    lpx_engine_get_stats(c.e, &st);
    CHECK(st.kv_blocks_used == 0 && st.n_finished == 5 && in_flight == 0);
    lpx_engine_destroy(c.e);
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
}

int main(void) {
    lpx_model *m = test_open_model();
    if (!m) {
        CHECK(0);
        TEST_DONE();
    }
    const lpx_sampling_params greedy = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    lpx_sampling_params topk = {
        .temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .repetition_penalty = 1, .seed = 7};
    lpx_sampling_params hot = {.temperature = 1.2f, .top_p = 1, .repetition_penalty = 1, .seed = 9};
    lpx_sampling_params pen = greedy;
    pen.repetition_penalty = 1.3f;
    pen.presence_penalty = 0.5f;

    /* A probe, step ahead off: the stop string and stop token come from its
     * greedy output, so that they are met in the middle of it. */
    static req probe[1];
    probe[0] =
        (req){.prompt = 2, .sp = greedy, .max_tokens = 12, .stop_id = -1, .ignore_eos = true};
    static ctx pc;
    lpx_engine_stats st;
    lpx_engine_opts off = options(-1, 0);
    run(m, &off, probe, 1, false, &pc, &st);
    CHECK(pc.res[0].n == 12 && pc.res[0].text_len > 12);
    static char stop[8];
    size_t mid = pc.res[0].text_len / 2;
    memcpy(stop, pc.res[0].text + mid, 3);
    printf("probe: '%.*s'; stop string '%s', stop token %d\n", (int)pc.res[0].text_len,
           pc.res[0].text, stop, pc.res[0].ids[5]);

    /* Everything runs ahead after the prefill: a cancel, a stop string and a
     * stop token each end a request whose next token is in flight; that token is
     * computed and dropped, so step ahead computes exactly 3 tokens more. */
    const req ends[4] = {
        {.prompt = 0,
         .sp = greedy,
         .max_tokens = 12,
         .stop_id = -1,
         .ignore_eos = true,
         .cancel_at = 5},
        {.prompt = 2,
         .sp = greedy,
         .max_tokens = 12,
         .stop = stop,
         .stop_id = -1,
         .ignore_eos = true},
        {.prompt = 2,
         .sp = greedy,
         .max_tokens = 12,
         .stop_id = pc.res[0].ids[5],
         .ignore_eos = true},
        {.prompt = 1, .sp = hot, .max_tokens = 10, .stop_id = -1, .ignore_eos = true},
    };
    CHECK(compare(m, "ends in flight", ends, 4, 0, false) == 3);

    const req mix[NREQ] = {
        {.prompt = 0,
         .sp = greedy,
         .max_tokens = 6,
         .stop_id = -1,
         .ignore_eos = true,
         .spawn = 8,
         .spawn_at = 2},
        {.prompt = 1,
         .sp = greedy,
         .max_tokens = 10,
         .stop_id = -1,
         .ignore_eos = true,
         .spawn = 7,
         .spawn_at = 3},
        {.prompt = 2,
         .sp = topk,
         .max_tokens = 8,
         .stop_id = -1,
         .ignore_eos = true,
         .spawn = 6,
         .spawn_at = 4},
        {.prompt = 3, .sp = hot, .max_tokens = 5, .stop_id = -1},
        {.prompt = 2, .sp = greedy, .max_tokens = 12, .stop = stop, .stop_id = -1},
        {.prompt = 2, .sp = greedy, .max_tokens = 12, .stop_id = pc.res[0].ids[5]},
        {.prompt = 0, .sp = pen, .max_tokens = 4, .stop_id = -1, .ignore_eos = true},
        {.prompt = 3, .sp = greedy, .max_tokens = 6, .stop_id = -1, .ignore_eos = true},
        {.prompt = 1, .sp = topk, .max_tokens = 5, .stop_id = -1, .ignore_eos = true},
        {.prompt = 0,
         .sp = hot,
         .max_tokens = 20,
         .stop_id = -1,
         .ignore_eos = true,
         .cancel_at = 7},
    };
    static ctx mixed;
    lpx_engine_opts on = options(1, 0);
    run(m, &on, mix, NREQ, false, &mixed, &st);
    CHECK(mixed.res[4].finish == LPX_FINISH_STOP && mixed.res[4].n < 12);
    CHECK(mixed.res[5].finish == LPX_FINISH_STOP && mixed.res[5].n <= 6);
    CHECK(mixed.res[9].finish == LPX_FINISH_CANCELLED && mixed.res[9].n == 7);
    CHECK(mixed.res[0].finish == LPX_FINISH_LENGTH && mixed.res[0].n == 6);
    compare(m, "mix", mix, NREQ, 0, false);
    compare(m, "mix, engine thread", mix, NREQ, 0, true);

    /* 4 x (6..9 prompt + 8 output) tokens in a pool of 6 blocks of 4. */
    const req tight[4] = {
        {.prompt = 0, .sp = greedy, .max_tokens = 8, .stop_id = -1, .ignore_eos = true},
        {.prompt = 1, .sp = topk, .max_tokens = 8, .stop_id = -1, .ignore_eos = true},
        {.prompt = 2, .sp = hot, .max_tokens = 8, .stop_id = -1, .ignore_eos = true},
        {.prompt = 3, .sp = greedy, .max_tokens = 8, .stop_id = -1, .ignore_eos = true},
    };
    int64_t bpt = (int64_t)lpx_kv_bytes_per_token(&m->cfg, LPX_KV_F32);
    compare(m, "tight pool", tight, 4, 6 * 4 * bpt, false);
    {
        static ctx t;
        lpx_engine_opts o = options(1, 6 * 4 * bpt);
        run(m, &o, tight, 4, false, &t, &st);
        CHECK(st.n_preemptions > 0);
    }

    /* Destroy with a step in flight: every request hears one finish. */
    {
        static ctx c;
        memset(&c, 0, sizeof c);
        c.reqs = tight;
        pthread_mutex_init(&c.mu, NULL);
        pthread_cond_init(&c.cv, NULL);
        CHECK(lpx_engine_create(m, &on, &c.e) == LPX_OK);
        for (int k = 0; k < 4; k++)
            submit(&c, k);
        bool busy = true;
        for (int i = 0; i < 4 && busy; i++)
            CHECK(lpx_engine_step(c.e, &busy) == LPX_OK);
        lpx_engine_get_stats(c.e, &st);
        CHECK(busy && st.steps_ahead > 0);
        lpx_engine_destroy(c.e);
        for (int k = 0; k < 4; k++)
            CHECK(c.res[k].finishes == 1 && c.res[k].finish == LPX_FINISH_CANCELLED);
    }

    /* Failures; the reference: the same requests with step ahead off. */
    const req five[5] = {tight[0], tight[1], tight[2], tight[3], tight[0]};
    static ctx ref5;
    run(m, &off, five, 5, false, &ref5, &st);
    faults(m, five, &ref5, 3, 0); /* a continuation's step_begin */
    faults(m, five, &ref5, 0, 3); /* step_end with two steps in flight */
    faults(m, five, &ref5, 1, 0); /* the first step_begin: nothing in flight */
    lpx_model_close(m);
    TEST_DONE();
}
