/* Requests in, events out: submit/cancel from any thread, one stepping thread
 * that schedules (scheduler.c), runs the backend, samples and stops. */
#include "engine/engine_impl.h"
#include "model/prompt.h"

#include "base/checked.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void lpx_request_init(lpx_request *r) {
    memset(r, 0, sizeof *r);
    r->sampling.temperature = 0;
    r->sampling.top_p = 1;
    r->sampling.repetition_penalty = 1;
    r->sampling.seed = -1;
    r->max_tokens = -1;
    r->skip_special = true;
}

const char *lpx_finish_reason_name(lpx_finish_reason r) {
    switch (r) {
    case LPX_FINISH_NONE:
        return "none";
    case LPX_FINISH_STOP:
        return "stop";
    case LPX_FINISH_LENGTH:
        return "length";
    case LPX_FINISH_CANCELLED:
        return "cancelled";
    case LPX_FINISH_ERROR:
        return "error";
    }
    return "unknown";
}

/* ---- creation ------------------------------------------------------------- */

static void *alloc_array(size_t n, size_t elem, bool *ok) {
    size_t bytes;
    void *p = lpx_mul_size(n ? n : 1, elem, &bytes) ? malloc(bytes) : NULL;
    if (!p) *ok = false;
    return p;
}

/* The root of the prefix cache's hash chains: what else than the tokens makes
 * a block's K/V differ (the model: its file and every tensor's name, type and
 * size; the backend; the KV dtype and its bytes per token), so that no hash is
 * shared across them. */
static uint64_t cache_seed(const lpx_model *m, const lpx_engine_config *c) {
    uint64_t h = lpx_kv_hash_bytes(0, m->path, strnlen(m->path, sizeof m->path));
    h = lpx_kv_hash_bytes(h, m->format, strnlen(m->format, sizeof m->format));
    for (int64_t i = 0; i < m->n_tensors; i++) {
        const lpx_tensor *t = &m->tensors[i];
        int64_t desc[2] = {(int64_t)t->type, (int64_t)t->nbytes};
        h = lpx_kv_hash_bytes(h, t->name, strnlen(t->name, sizeof t->name));
        h = lpx_kv_hash_bytes(h, desc, sizeof desc);
    }
    int64_t kv[3] = {(int64_t)c->kv_bytes_per_token, c->block_size, (int64_t)c->kv_dtype};
    h = lpx_kv_hash_bytes(h, c->ops->name, strlen(c->ops->name));
    return lpx_kv_hash_bytes(h, kv, sizeof kv);
}

lpx_status lpx_engine_create_config(const lpx_model *m, const lpx_engine_config *c,
                                    lpx_engine **out) {
    *out = NULL;
    if (c->max_num_seqs <= 0 || c->max_num_batched_tokens <= 0 || c->max_model_len <= 1 ||
        c->block_size <= 0 || c->n_blocks <= 0 || c->max_seqs_per_group < 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "engine: max_num_seqs %d, max_num_batched_tokens %d, max_model_len %d, "
                          "block_size %d, kv blocks %d: expected all positive (max_model_len > 1)",
                          c->max_num_seqs, c->max_num_batched_tokens, c->max_model_len,
                          c->block_size, c->n_blocks);
    if (m->cfg.vocab_size <= 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "engine: model vocab %d", m->cfg.vocab_size);
    lpx_engine *e = calloc(1, sizeof *e);
    if (!e) return lpx_errorf(LPX_ERR_NOMEM, "engine: out of memory");
    e->model = m;
    e->cfg = *c;
    e->vocab = m->cfg.vocab_size;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->step_mu, NULL);
    pthread_mutex_init(&e->gram_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->next_id = 1;
    e->device_sampling = c->device_sampling;

    lpx_status st =
        lpx_kv_pool_init(&e->pool, c->n_blocks, c->block_size, c->prefix_caching, cache_seed(m, c));
    if (st == LPX_OK) st = lpx_sampler_init(&e->sampler, e->vocab);
    if (st == LPX_OK) {
        bool ok = true;
        size_t stride = (size_t)lpx_kv_blocks_needed(&e->pool, c->max_model_len);
        e->b_tokens = alloc_array((size_t)c->max_num_batched_tokens, sizeof(int32_t), &ok);
        e->b_pos = alloc_array((size_t)c->max_num_batched_tokens, sizeof(int32_t), &ok);
        e->b_start = alloc_array((size_t)c->max_num_seqs + 1, sizeof(int32_t), &ok);
        e->b_len = alloc_array((size_t)c->max_num_seqs, sizeof(int32_t), &ok);
        e->b_rows = alloc_array((size_t)c->max_num_seqs + LPX_PLP_ROWS, sizeof(int32_t), &ok);
        e->plp_seq = alloc_array(LPX_PLP_ROWS, sizeof(int32_t), &ok);
        e->sampled = alloc_array((size_t)c->max_num_seqs, sizeof(int32_t), &ok);
        e->s_rows = alloc_array((size_t)c->max_num_seqs, sizeof(lpx_sample_row), &ok);
        e->b_feed = alloc_array((size_t)c->max_num_seqs, sizeof(int32_t), &ok);
        e->gmask = alloc_array(((size_t)e->vocab + 31) / 32, sizeof(uint32_t), &ok);
        for (int f = 0; f < 2; f++) {
            e->flight[f].seqs = alloc_array((size_t)c->max_num_seqs, sizeof(lpx_seq *), &ok);
            e->flight[f].row = alloc_array((size_t)c->max_num_seqs, sizeof(bool), &ok);
            e->flight[f].tokens = alloc_array((size_t)c->max_num_seqs, sizeof(int32_t), &ok);
            e->flight[f].upto = alloc_array((size_t)c->max_num_seqs, sizeof(int32_t), &ok);
        }
        size_t cells;
        ok = ok && lpx_mul_size((size_t)c->max_num_seqs, stride, &cells);
        e->b_table = ok ? alloc_array(cells, sizeof(int32_t), &ok) : NULL;
        size_t logit_cells;
        ok = ok && lpx_mul_size((size_t)c->max_num_seqs, (size_t)e->vocab, &logit_cells);
        e->logits = ok ? alloc_array(logit_cells, sizeof(float), &ok) : NULL;
        e->logits_rows = c->max_num_seqs;
        /* The tokenizer's longest piece + 8 always holds one push. */
        e->piece_cap = (m->tok ? lpx_tokenizer_max_piece(m->tok) : 0) + 8;
        e->piece = alloc_array(e->piece_cap, 1, &ok);
        if (!ok) st = lpx_errorf(LPX_ERR_NOMEM, "engine: batch buffers: out of memory");
    }
    /* EOS: the model's generation defaults and the tokenizer's. */
    for (int i = 0; i < m->gen.n_eos && i < 8; i++)
        e->eos[e->n_eos++] = m->gen.eos_ids[i];
    int32_t tok_eos = m->tok ? lpx_tokenizer_eos(m->tok) : -1;
    if (tok_eos >= 0) e->eos[e->n_eos++] = tok_eos;

    if (st == LPX_OK) {
        lpx_backend_opts bo = {
            .device = c->device,
            .n_threads = c->n_threads,
            .block_size = c->block_size,
            .n_blocks = c->n_blocks,
            .max_batch_tokens = c->max_num_batched_tokens,
            .max_seqs = c->max_num_seqs,
            .tune = c->dev_tune,
            .trace = c->dev_trace,
            .kv_dtype = c->kv_dtype,
        };
        st = c->ops->create(m, &bo, &e->be);
        if (st != LPX_OK) lpx_error_wrap(st, "engine"); /* the backend names itself */
    }
    if (st != LPX_OK) {
        lpx_engine_destroy(e);
        return st;
    }
    snprintf(e->st.device, sizeof e->st.device, "%s", c->device_name);
    e->st.block_size = c->block_size;
    e->st.kv_blocks_total = c->n_blocks;
    e->st.kv_bytes = (int64_t)c->n_blocks * c->block_size * (int64_t)c->kv_bytes_per_token;
    e->st.kv_bytes_per_token = (int64_t)c->kv_bytes_per_token;
    snprintf(e->st.kv_cache_dtype, sizeof e->st.kv_cache_dtype, "%s",
             lpx_kv_dtype_name(c->kv_dtype));
    e->st.max_model_len = c->max_model_len;
    e->st.max_num_seqs = c->max_num_seqs;
    e->st.max_num_seqs_per_request = c->max_seqs_per_group;
    e->st.max_num_batched_tokens = c->max_num_batched_tokens;
    *out = e;
    return LPX_OK;
}

/* ---- requests ------------------------------------------------------------- */

static void seq_free(lpx_seq *s) {
    if (!s) return;
    free(s->bias);
    free(s->plp);
    free(s->ptop);
    free(s->prank);
    free(s->stop_ids);
    lpx_gram_release(s->gram);
    lpx_gmatch_free(&s->gm);
    lpx_stop_free(&s->stop);
    free(s->tokens);
    lpx_block_table_free(&s->bt);
    free(s);
}

/* The prompt's token ids, from whichever form the request used (malloc'd). */
static lpx_status prompt_ids(const lpx_engine *e, const lpx_request *r, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    int forms = (r->prompt_ids != NULL) + (r->prompt_text != NULL) + (r->messages != NULL);
    if (forms != 1)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "request: give exactly one of prompt ids, prompt text, chat messages "
                          "(%d given)",
                          forms);
    if (r->prompt_ids) {
        if (!(*ids = malloc((r->n_prompt_ids ? r->n_prompt_ids : 1) * sizeof **ids)))
            return lpx_errorf(LPX_ERR_NOMEM, "request: out of memory");
        memcpy(*ids, r->prompt_ids, r->n_prompt_ids * sizeof **ids);
        *n = r->n_prompt_ids;
        return LPX_OK;
    }
    /* text or messages: the tokenization every front end uses (model/prompt.h) */
    return lpx_prompt_ids(e->model, r->prompt_text, r->messages, r->n_messages, 0, ids, n);
}

static uint64_t fresh_seed(uint64_t id) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (id * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 29);
}

/* "1.23 GiB" or "45.6 MiB". */
static void mem_text(double bytes, char *buf, size_t cap) {
    if (bytes >= 1073741824.0)
        snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    else
        snprintf(buf, cap, "%.1f MiB", bytes / 1048576.0);
}

/* LPX_ERR_TOO_LONG for a request of `want` tokens (prompt n + max_tokens, or + 1)
 * against a KV pool of pool_tokens: the memory it needs, the pool's, and what helps. */
static lpx_status too_long_for_pool(const lpx_engine *e, size_t n, int32_t max_tokens, int64_t want,
                                    int64_t pool_tokens) {
    const double bpt = (double)e->cfg.kv_bytes_per_token;
    char need[32], have[32], asked[40];
    mem_text((double)want * bpt, need, sizeof need);
    mem_text((double)pool_tokens * bpt, have, sizeof have);
    if (max_tokens > 0)
        snprintf(asked, sizeof asked, "max_tokens %d", max_tokens);
    else
        snprintf(asked, sizeof asked, "1 output token");
    bool fp8 = e->cfg.kv_dtype == LPX_KV_FP8, cuda = strcmp(e->st.device, "cpu") != 0;
    return lpx_errorf(LPX_ERR_TOO_LONG,
                      "prompt of %zu tokens + %s is too long for the KV cache: it needs %s "
                      "(%s, %.0f B/token) and the KV pool holds %s (%lld tokens): use %sa "
                      "larger KV budget (--kv-bytes)%s",
                      n, asked, need, lpx_kv_dtype_name(e->cfg.kv_dtype), bpt, have,
                      (long long)pool_tokens, fp8 ? "" : "--kv-cache-dtype fp8, ",
                      cuda ? " or more --gpu-memory-utilization" : "");
}

lpx_status lpx_engine_submit(lpx_engine *e, const lpx_request *r, lpx_event_cb cb, void *user,
                             uint64_t *id) {
    if (!e || !r || !cb || !id)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "submit: engine, request, callback and id needed");
    LPX_TRY(lpx_sampling_validate(&r->sampling));
    if (r->prompt_logprobs < 0 || r->prompt_logprobs > LPX_MAX_LOGPROBS)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "prompt_logprobs %d: expected 0..%d",
                          r->prompt_logprobs, LPX_MAX_LOGPROBS);
    if (r->max_tokens == 0 || r->max_tokens < -1)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "max_tokens %d: expected >= 1 (or -1: no limit)",
                          r->max_tokens);
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
        if (r->stop_token_ids[i] < 0 || r->stop_token_ids[i] >= e->vocab)
            return lpx_errorf(LPX_ERR_INVALID_ARG, "stop token id %d: expected 0..%d",
                              r->stop_token_ids[i], e->vocab - 1);
    for (int32_t i = 0; i < r->sampling.n_logit_bias; i++)
        if (r->sampling.logit_bias[i].id >= e->vocab)
            return lpx_errorf(LPX_ERR_INVALID_ARG, "logit_bias token id %d: expected 0..%d",
                              r->sampling.logit_bias[i].id, e->vocab - 1);
    int32_t *ids;
    size_t n;
    LPX_TRY(prompt_ids(e, r, &ids, &n));
    int64_t pool_tokens = (int64_t)e->pool.n_blocks * e->pool.block_size;
    lpx_status st = LPX_OK;
    if (n == 0) st = lpx_errorf(LPX_ERR_INVALID_ARG, "empty prompt: expected at least 1 token");
    for (size_t i = 0; st == LPX_OK && i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->vocab)
            st = lpx_errorf(LPX_ERR_INVALID_ARG, "prompt token %zu is %d: expected 0..%d", i,
                            ids[i], e->vocab - 1);
    if (st == LPX_OK && (int64_t)n + 1 > e->cfg.max_model_len)
        st = lpx_errorf(LPX_ERR_TOO_LONG,
                        "prompt of %zu tokens is too long: max_model_len is %d (prompt + 1 "
                        "output token must fit; the model's own limit is %d positions)",
                        n, e->cfg.max_model_len, e->model->cfg.max_position_embeddings);
    /* The whole pool is the most one sequence can hold: a request that cannot fit
     * it even alone fails now, with what it needs, and so does one whose max_tokens
     * max_model_len allows but the pool does not (it could never finish); a
     * max_tokens beyond max_model_len is cut there, so only prompt + 1 counts. */
    int32_t asked = r->max_tokens;
    if (asked <= 0 || (int64_t)n + asked > e->cfg.max_model_len) asked = -1;
    int64_t want = (int64_t)n + (asked > 0 ? asked : 1);
    if (st == LPX_OK && want > pool_tokens) st = too_long_for_pool(e, n, asked, want, pool_tokens);
    if (st != LPX_OK) {
        free(ids);
        return st;
    }
    lpx_seq *s = calloc(1, sizeof *s);
    if (!s) {
        free(ids);
        return lpx_errorf(LPX_ERR_NOMEM, "submit: out of memory");
    }
    s->tokens = ids;
    s->cap = (int32_t)n;
    s->n_prompt = s->n_tokens = (int32_t)n;
    s->limit = e->cfg.max_model_len < pool_tokens ? e->cfg.max_model_len : (int32_t)pool_tokens;
    s->cb = cb;
    s->user = user;
    s->sp = r->sampling;
    s->max_tokens = r->max_tokens;
    s->ignore_eos = r->ignore_eos;
    s->skip_special = r->skip_special;
    st = lpx_stop_init(&s->stop, r->stop, r->n_stop);
    if (st == LPX_OK && s->sp.n_logit_bias) {
        size_t bytes = (size_t)s->sp.n_logit_bias * sizeof *s->bias;
        if (!(s->bias = malloc(bytes)))
            st = lpx_errorf(LPX_ERR_NOMEM, "submit: out of memory");
        else
            memcpy(s->bias, r->sampling.logit_bias, bytes);
        s->sp.logit_bias = s->bias;
    }
    if (st == LPX_OK && r->prompt_logprobs > 0) {
        size_t cells;
        s->plp_k = r->prompt_logprobs < e->vocab ? r->prompt_logprobs : e->vocab;
        s->plp = malloc(n * sizeof *s->plp);
        s->prank = malloc(n * sizeof *s->prank);
        s->ptop = lpx_mul_size(n, (size_t)s->plp_k, &cells) ? calloc(cells, sizeof *s->ptop) : NULL;
        if (!s->plp || !s->prank || !s->ptop) {
            st = lpx_errorf(LPX_ERR_NOMEM, "submit: prompt logprobs: out of memory");
        } else {
            s->plp[0] = NAN;
            s->prank[0] = 0;
        }
    }
    if (st == LPX_OK && r->n_stop_token_ids) {
        s->stop_ids = malloc(r->n_stop_token_ids * sizeof *s->stop_ids);
        if (!s->stop_ids)
            st = lpx_errorf(LPX_ERR_NOMEM, "submit: out of memory");
        else
            memcpy(s->stop_ids, r->stop_token_ids, r->n_stop_token_ids * sizeof *s->stop_ids);
        s->n_stop_ids = r->n_stop_token_ids;
    }
    if (st == LPX_OK && r->output_format != LPX_OUTPUT_TEXT) {
        st = lpx_gram_acquire(e, r, &s->gram);
        if (st == LPX_OK) st = lpx_gmatch_init(&s->gm, s->gram->g);
    }
    if (e->model->tok) {
        lpx_detok_stream_init(&s->detok, e->model->tok, r->skip_special);
        s->detok.first = false; /* output continues the prompt: keep its leading space */
    }
    if (st != LPX_OK) {
        seq_free(s);
        return st;
    }
    s->t_submit = now_ms();
    pthread_mutex_lock(&e->mu);
    if (e->stopping)
        st = lpx_errorf(LPX_ERR_BUSY, "submit: the engine is shutting down");
    else if (!lpx_seq_list_push(&e->incoming, s))
        st = lpx_errorf(LPX_ERR_NOMEM, "submit: out of memory");
    if (st == LPX_OK) {
        s->id = *id = e->next_id++;
        s->group = r->group ? r->group : s->id;
        s->seed = s->sp.seed >= 0 ? (uint64_t)s->sp.seed : fresh_seed(s->id);
        e->st.n_submitted++;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (st != LPX_OK) seq_free(s);
    return st;
}

lpx_status lpx_engine_cancel(lpx_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    lpx_status st = LPX_OK;
    if (id == 0 || id >= e->next_id) {
        st = lpx_errorf(LPX_ERR_INVALID_ARG, "cancel: no request %llu", (unsigned long long)id);
    } else {
        if (e->n_cancels == e->cap_cancels) {
            int32_t cap = e->cap_cancels ? e->cap_cancels * 2 : 16;
            uint64_t *v = realloc(e->cancels, (size_t)cap * sizeof *v);
            if (!v)
                st = lpx_errorf(LPX_ERR_NOMEM, "cancel: out of memory");
            else {
                e->cancels = v;
                e->cap_cancels = cap;
            }
        }
        if (st == LPX_OK) {
            e->cancels[e->n_cancels++] = id;
            pthread_cond_signal(&e->cv);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- events --------------------------------------------------------------- */

static bool text_append(lpx_engine *e, const char *p, size_t n) {
    if (e->text_len + n + 1 > e->text_cap) {
        size_t cap = e->text_cap ? e->text_cap : 256;
        while (cap < e->text_len + n + 1)
            cap *= 2;
        char *t = realloc(e->text, cap);
        if (!t) return false;
        e->text = t;
        e->text_cap = cap;
    }
    memcpy(e->text + e->text_len, p, n);
    e->text_len += n;
    e->text[e->text_len] = '\0';
    return true;
}

/* Passes decoded text through the stop matcher into e->text. */
static bool feed_text(lpx_engine *e, lpx_seq *s, const char *p, size_t n, bool *stopped) {
    if (lpx_stop_push(&s->stop, p, n, stopped) != LPX_OK) return false;
    return text_append(e, s->stop.out, s->stop.n_out);
}

/* Releases everything still held (an incomplete character, a partial stop
 * string) because the output ends for a reason other than a stop string. */
static bool flush_text(lpx_engine *e, lpx_seq *s, bool *stopped) {
    *stopped = false;
    if (!e->model->tok) return true;
    char buf[64];
    size_t n = lpx_detok_stream_flush(&s->detok, buf, sizeof buf);
    if (!feed_text(e, s, buf, n, stopped)) return false;
    if (*stopped) return true;
    lpx_stop_flush(&s->stop);
    return text_append(e, s->stop.out, s->stop.n_out);
}

/* The gauges of the stats; the caller holds e->mu. */
static void snapshot(lpx_engine *e) {
    e->st.n_running = e->running.n;
    e->st.n_waiting = e->waiting.n + e->incoming.n;
    e->st.kv_blocks_used = lpx_kv_used(&e->pool);
    e->st.kv_blocks_peak = e->pool.peak_used;
    e->st.kv_blocks_cached = e->pool.n_cached;
}

/* Ends s: frees its blocks, takes it off the lists, sends the last event
 * (with ev's token, if any) and frees it; while a step in flight reads s, its
 * blocks and struct stay until that step ends (flight_pop). flush releases
 * held text: every end but a stop string (whose text is dropped) and an error.
 * The stats count the last token and show s gone (its blocks too, unless a
 * step in flight holds them) in one update, before the event: whoever hears of
 * the end (an HTTP client) and then reads the stats never sees s running. */
static void finish(lpx_engine *e, lpx_seq *s, lpx_event *ev, lpx_finish_reason why, bool flush,
                   const char *error) {
    bool stopped = false;
    if (flush && !flush_text(e, s, &stopped)) why = LPX_FINISH_ERROR, error = "out of memory";
    if (stopped && why == LPX_FINISH_LENGTH) why = LPX_FINISH_STOP;
    if (s->n_flight == 0) lpx_kv_release(&e->pool, &s->bt);
    lpx_seq_list_remove(&e->running, s);
    lpx_seq_list_remove(&e->waiting, s);
    double t = now_ms();
    int32_t n_out = s->n_tokens - s->n_prompt;
    ev->finish = why;
    ev->error = error;
    ev->text = e->text;
    ev->text_len = e->text_len;
    ev->n_prompt_tokens = s->n_prompt;
    ev->n_output_tokens = n_out;
    ev->n_preemptions = s->n_preempt;
    ev->n_cached_tokens = s->n_cached;
    ev->total_ms = t - s->t_submit;
    ev->queue_ms = (s->t_sched > 0 ? s->t_sched : t) - s->t_submit;
    ev->ttft_ms = n_out > 0 ? s->t_first - s->t_submit : 0;
    ev->decode_tok_s = n_out > 1 && t > s->t_first ? (n_out - 1) / ((t - s->t_first) * 1e-3) : 0;
    pthread_mutex_lock(&e->mu);
    if (ev->token >= 0) e->st.generated_tokens++;
    e->st.n_finished++;
    snapshot(e);
    if (n_out > 0) {
        e->ttft_sum += ev->ttft_ms;
        e->n_ttft++;
    }
    pthread_mutex_unlock(&e->mu);
    s->cb(ev, s->user);
    if (s->n_flight > 0)
        s->done = true; /* a step in flight still writes its KV: freed when it ends */
    else
        seq_free(s);
}

static void finish_alone(lpx_engine *e, lpx_seq *s, lpx_finish_reason why, const char *error) {
    lpx_event ev = {.id = s->id, .token = -1, .index = s->n_tokens - s->n_prompt};
    e->text_len = 0;
    finish(e, s, &ev, why, !error, error);
}

static bool is_stop_token(const lpx_engine *e, const lpx_seq *s, int32_t tok) {
    if (!s->ignore_eos)
        for (int i = 0; i < e->n_eos; i++)
            if (e->eos[i] == tok) return true;
    for (size_t i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == tok) return true;
    return false;
}

/* Appends the token counts of s (for its penalties) to e->seen at *n_seen;
 * false when out of memory. */
static bool append_counts(lpx_engine *e, const lpx_seq *s, int32_t *n_seen) {
    int64_t need = (int64_t)*n_seen + s->n_tokens;
    if (need > e->seen_cap) {
        int64_t cap = e->seen_cap ? e->seen_cap : 1024;
        while (cap < need)
            cap *= 2;
        if (cap > INT32_MAX) return false;
        lpx_token_count *v = realloc(e->seen, (size_t)cap * sizeof *v);
        if (!v) return false;
        e->seen = v;
        e->seen_cap = (int32_t)cap;
    }
    *n_seen += lpx_token_counts(&e->sampler, s->tokens, s->n_prompt, s->tokens + s->n_prompt,
                                s->n_tokens - s->n_prompt, e->seen + *n_seen);
    return true;
}

/* Reports the token tok sampled for s (with its logprobs when asked). */
static lpx_status advance(lpx_engine *e, lpx_seq *s, int32_t tok, const lpx_token_logprob *top,
                          int32_t n_top, float lp) {
    int32_t n_out = s->n_tokens - s->n_prompt;
    if (s->n_tokens == s->cap) {
        int32_t cap = s->cap * 2 > s->limit ? s->limit : s->cap * 2;
        int32_t *t = realloc(s->tokens, (size_t)cap * sizeof *t);
        if (!t) {
            finish_alone(e, s, LPX_FINISH_ERROR, "out of memory");
            return LPX_OK;
        }
        s->tokens = t;
        s->cap = cap;
    }
    s->tokens[s->n_tokens++] = tok;
    if (n_out == 0) s->t_first = now_ms();

    lpx_event ev = {.id = s->id, .token = tok, .index = n_out};
    if (s->sp.logprobs > 0) {
        ev.logprob = lp;
        ev.top = top;
        ev.n_top = n_top;
    }
    if (lpx_seq_plp_pending(s)) {
        s->plp_sent = true; /* the prompt's rows are all in (its last gave tok) */
        ev.prompt_logprob = s->plp;
        ev.prompt_top = s->ptop;
        ev.prompt_rank = s->prank;
        ev.n_prompt_top = s->plp_k;
        ev.n_prompt_tokens = s->n_prompt;
    }
    e->text_len = 0;
    bool stop_tok = is_stop_token(e, s, tok), stopped = false;
    if (!stop_tok && e->model->tok) {
        size_t n = lpx_detok_stream_push(&s->detok, tok, e->piece, e->piece_cap);
        if (!feed_text(e, s, e->piece, n, &stopped)) {
            finish(e, s, &ev, LPX_FINISH_ERROR, false, "out of memory");
            return LPX_OK;
        }
    }
    /* The grammar follows the token's bytes (the mask allowed them); where nothing can
     * follow, the output is complete. */
    size_t n_bytes = 0;
    const char *bytes =
        s->gram && !stop_tok ? lpx_tokenizer_token_bytes(e->model->tok, tok, &n_bytes) : NULL;
    if (s->gram && !stop_tok && (!bytes || !lpx_gmatch_feed(&s->gm, bytes, n_bytes))) {
        finish(e, s, &ev, LPX_FINISH_ERROR, false, "the grammar refused a token it allowed");
        return LPX_OK;
    }
    lpx_finish_reason why = LPX_FINISH_NONE;
    if (stopped || stop_tok || (s->gram && lpx_gmatch_no_next(&s->gm)))
        why = LPX_FINISH_STOP;
    else if ((s->max_tokens > 0 && n_out + 1 >= s->max_tokens) || s->n_tokens >= s->limit)
        why = LPX_FINISH_LENGTH;
    if (why != LPX_FINISH_NONE) {
        finish(e, s, &ev, why, !stopped, NULL);
        return LPX_OK;
    }
    ev.text = e->text;
    ev.text_len = e->text_len;
    pthread_mutex_lock(&e->mu);
    e->st.generated_tokens++; /* a last token is counted by finish */
    pthread_mutex_unlock(&e->mu);
    s->cb(&ev, s->user);
    return LPX_OK;
}

/* ---- stepping ------------------------------------------------------------- */

static bool has_work(const lpx_engine *e) {
    return e->waiting.n > 0 || e->running.n > 0 || e->n_flights > 0;
}

static lpx_seq *take_seq(lpx_engine *e, uint64_t id) {
    lpx_seq_list *lists[2] = {&e->running, &e->waiting};
    for (int l = 0; l < 2; l++)
        for (int32_t i = 0; i < lists[l]->n; i++)
            if (lists[l]->v[i]->id == id) return lists[l]->v[i];
    return NULL;
}

/* Stats of one stepping call that began at t0: busy time, and the step it
 * began or ran (n_tok < 0: none). */
static void account(lpx_engine *e, double t0, int32_t n_tok, bool ahead) {
    pthread_mutex_lock(&e->mu);
    if (n_tok >= 0) {
        e->st.n_steps++;
        e->st.computed_tokens += n_tok;
        if (ahead) e->st.steps_ahead++;
    }
    e->st.busy_s += (now_ms() - t0) * 1e-3;
    pthread_mutex_unlock(&e->mu);
}

/* Row i of the batch's block table: s's blocks, then -1. */
static void put_table(lpx_engine *e, int32_t i, const lpx_seq *s, int32_t stride) {
    memcpy(e->b_table + (size_t)i * stride, s->bt.ids, (size_t)s->bt.n * sizeof(int32_t));
    for (int32_t j = s->bt.n; j < stride; j++)
        e->b_table[(size_t)i * stride + j] = -1;
}

/* Records the step just begun over q (batch order): its chunks count as
 * computed; continuation: each sequence draws a token (rows in batch order). */
/* Where the step about to be begun (and pushed) gets its tokens. */
static int32_t *next_tokens(lpx_engine *e) {
    return e->flight[(e->flight_head + e->n_flights) % 2].tokens;
}

static void flight_push(lpx_engine *e, const lpx_seq_list *q, bool continuation) {
    lpx_flight *f = &e->flight[(e->flight_head + e->n_flights) % 2];
    e->n_flights++;
    f->n = q->n;
    for (int32_t i = 0; i < q->n; i++) {
        lpx_seq *s = q->v[i];
        f->row[i] = continuation || s->n_computed + s->n_new == s->n_tokens;
        s->n_computed += s->n_new;
        s->n_flight++;
        f->seqs[i] = s;
        f->upto[i] = s->n_computed;
    }
}

/* The oldest step in flight is over: each of its sequences that draws a token
 * gets tokens[its row]; when the step failed (tokens NULL) each ends with error
 * msg. One that finished while the step ran is freed once no step reads it. */
static lpx_status flight_pop(lpx_engine *e, const int32_t *tokens, const char *msg) {
    lpx_flight *f = &e->flight[e->flight_head];
    e->flight_head = (e->flight_head + 1) % 2;
    e->n_flights--;
    lpx_status st = LPX_OK;
    for (int32_t i = 0, row = 0; i < f->n; i++) {
        lpx_seq *s = f->seqs[i];
        int32_t r = f->row[i] ? row++ : -1;
        s->n_flight--;
        /* Its input tokens are all on the host now: the one fed came from the older step. */
        if (tokens) lpx_kv_commit(&e->pool, &s->bt, s->tokens, f->upto[i]);
        if (s->done) {
            if (s->n_flight == 0) {
                lpx_kv_release(&e->pool, &s->bt);
                seq_free(s);
            }
        } else if (!tokens) {
            finish_alone(e, s, LPX_FINISH_ERROR, msg);
        } else if (r >= 0) {
            lpx_status st2 = advance(e, s, tokens[r], NULL, 0, 0);
            if (st == LPX_OK) st = st2;
        }
    }
    f->n = 0;
    return st;
}

/* Every step in flight ends with error msg (a failed step_end ends them all). */
static lpx_status fail_flights(lpx_engine *e, lpx_status st, const char *msg) {
    while (e->n_flights > 0)
        flight_pop(e, NULL, msg);
    return lpx_errorf(st, "%s", msg);
}

/* Waits for the oldest step in flight and reports its tokens. */
static lpx_status end_oldest(lpx_engine *e) {
    lpx_status st = e->cfg.ops->step_end(e->be);
    if (st == LPX_OK) return flight_pop(e, e->flight[e->flight_head].tokens, NULL);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", lpx_last_error());
    return fail_flights(e, st, msg);
}

/* Takes what other threads queued: submitted requests join the waiting queue;
 * cancelled ones end now (one in a step in flight drops that step's token). */
static lpx_status take_queued(lpx_engine *e) {
    pthread_mutex_lock(&e->mu);
    lpx_status st = LPX_OK;
    if (!lpx_seq_list_reserve(&e->waiting, e->waiting.n + e->incoming.n))
        st = lpx_errorf(LPX_ERR_NOMEM, "engine: out of memory");
    for (int32_t i = 0; st == LPX_OK && i < e->incoming.n; i++) {
        lpx_seq *s = e->incoming.v[i];
        lpx_seq_list_push(&e->waiting, s);
        e->st.prompt_tokens += s->n_prompt;
    }
    if (st == LPX_OK) e->incoming.n = 0;
    int32_t n_cancels = e->n_cancels;
    uint64_t cancels[64];
    if (n_cancels > 64) n_cancels = 64; /* the rest next step */
    if (n_cancels > 0) {
        memcpy(cancels, e->cancels, (size_t)n_cancels * sizeof *cancels);
        memmove(e->cancels, e->cancels + n_cancels,
                (size_t)(e->n_cancels - n_cancels) * sizeof *cancels);
        e->n_cancels -= n_cancels;
    }
    pthread_mutex_unlock(&e->mu);
    for (int32_t i = 0; i < n_cancels; i++) {
        lpx_seq *s = take_seq(e, cancels[i]);
        if (s) finish_alone(e, s, LPX_FINISH_CANCELLED, NULL);
    }
    return st;
}

/* The batch staged in the engine's buffers (b_tokens, b_pos, b_start, b_len,
 * b_table, b_rows). */
static lpx_batch staged_batch(const lpx_engine *e, int32_t n_tokens, int32_t n_seqs, int32_t stride,
                              int32_t n_logits) {
    lpx_batch b = {
        .n_tokens = n_tokens,
        .tokens = e->b_tokens,
        .positions = e->b_pos,
        .n_seqs = n_seqs,
        .seq_start = e->b_start,
        .seq_len = e->b_len,
        .block_table = e->b_table,
        .max_blocks = stride,
        .n_logits = n_logits,
        .logit_rows = e->b_rows,
    };
    return b;
}

/* Builds, in e->sched and the batch buffers, the step that continues f: each
 * sequence of f that still wants a token after f's gets one more position,
 * whose input token is f's draw for it, fed on the device from its row of f.
 * Returns the block table stride, or 0 when f cannot be continued and the
 * scheduler must run next: waiting work could be admitted, a running sequence
 * is not in f or is mid-prompt, no sequence goes on, or a block is missing
 * (preempting is the scheduler's job). */
static int32_t continuation(lpx_engine *e, const lpx_flight *f, lpx_status *st) {
    *st = LPX_OK;
    lpx_seq_list *q = &e->sched;
    q->n = 0;
    if (lpx_schedule_can_admit(e) || !lpx_seq_list_reserve(q, f->n)) return 0;
    int32_t live = 0, need = 0;
    for (int32_t i = 0, row = 0; i < f->n; i++) {
        lpx_seq *s = f->seqs[i];
        int32_t r = f->row[i] ? row++ : -1;
        if (s->done) continue;
        if (r < 0) return 0;
        live++;
        /* Whether f's token reaches a length limit is known before the token. */
        int32_t n_after = s->n_tokens + 1;
        if ((s->max_tokens > 0 && n_after - s->n_prompt >= s->max_tokens) || n_after >= s->limit)
            continue;
        int32_t more = lpx_kv_blocks_needed(&e->pool, n_after) - s->bt.n;
        need += more > 0 ? more : 0;
        e->b_feed[q->n] = r;
        q->v[q->n++] = s;
    }
    if (live != e->running.n || q->n == 0 || need > lpx_kv_available(&e->pool)) return 0;
    int32_t stride = 1;
    for (int32_t i = 0; i < q->n; i++) {
        lpx_seq *s = q->v[i];
        if (!lpx_kv_reserve(&e->pool, &s->bt, (int64_t)s->n_tokens + 1, st)) return 0;
        if (s->bt.n > stride) stride = s->bt.n;
    }
    for (int32_t i = 0; i < q->n; i++) {
        lpx_seq *s = q->v[i];
        s->n_new = 1;
        e->b_tokens[i] = 0; /* fed */
        e->b_pos[i] = s->n_computed;
        e->b_start[i] = i;
        e->b_len[i] = s->n_computed + 1;
        e->b_rows[i] = i;
        put_table(e, i, s, stride);
        e->s_rows[i] =
            (lpx_sample_row){.p = s->sp, .seed = s->seed, .index = s->n_tokens + 1 - s->n_prompt};
    }
    e->b_start[q->n] = q->n;
    return stride;
}

/* A step is in flight: begin the one that continues it if it can, then end it,
 * so the device runs the next step while the host reports this one's tokens. */
static lpx_status step_ahead(lpx_engine *e) {
    LPX_TRY(take_queued(e));
    double t0 = now_ms();
    lpx_status st;
    int32_t stride = continuation(e, &e->flight[e->flight_head], &st);
    lpx_seq_list *q = &e->sched;
    int32_t n_tok = -1;
    if (stride > 0) {
        lpx_batch b = staged_batch(e, q->n, q->n, stride, q->n);
        lpx_sample_batch sb = {.rows = e->s_rows, .seen = e->seen, .n_seen = 0};
        lpx_step step = {.batch = &b, .sample = &sb, .feed = e->b_feed, .tokens = next_tokens(e)};
        st = e->cfg.ops->step_begin(e->be, &step);
        if (st != LPX_OK) {
            /* Its sequences are the older step's: that step ends, and all of them fail. */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", lpx_last_error());
            e->cfg.ops->step_end(e->be);
            st = fail_flights(e, st, msg);
            account(e, t0, -1, false);
            return st;
        }
        flight_push(e, q, true);
        n_tok = q->n;
    }
    lpx_status st2 = end_oldest(e);
    account(e, t0, n_tok, true);
    return st != LPX_OK ? st : st2;
}

/* After the n_rows sampling rows, a logits row for each position of this step's
 * prompt chunks whose next token's logprob is wanted (b_rows, plp_seq: its sequence);
 * grows e->logits to hold them. Returns how many (at most LPX_PLP_ROWS: lpx_schedule). */
static int32_t plp_rows(lpx_engine *e, int32_t n_rows, lpx_status *st) {
    const lpx_seq_list *q = &e->sched;
    int32_t n = 0;
    for (int32_t i = 0; i < q->n; i++) {
        const lpx_seq *s = q->v[i];
        if (!lpx_seq_plp_pending(s)) continue;
        for (int32_t j = 0; j < s->n_new && s->n_computed + j < s->n_prompt - 1 && n < LPX_PLP_ROWS;
             j++, n++) {
            e->b_rows[n_rows + n] = e->b_start[i] + j;
            e->plp_seq[n] = i;
        }
    }
    int32_t need = e->cfg.max_num_seqs + LPX_PLP_ROWS;
    if (n > 0 && e->logits_rows < need) {
        size_t cells;
        float *l = lpx_mul_size((size_t)need, (size_t)e->vocab, &cells)
                       ? realloc(e->logits, cells * sizeof *l)
                       : NULL;
        if (!l) {
            *st = lpx_errorf(LPX_ERR_NOMEM, "prompt logprobs: %d logits rows: out of memory", need);
            return 0;
        }
        e->logits = l;
        e->logits_rows = need;
    }
    return n;
}

/* Prompt logprob of the token after batch token `tok` (s's chunk begins at batch
 * token `start`), from its logits row. */
static void plp_take(lpx_engine *e, lpx_seq *s, int32_t tok, int32_t start, const float *logits) {
    int32_t next = s->n_computed + (tok - start) + 1, n_top;
    s->plp[next] =
        lpx_logprob_row(logits, e->vocab, s->tokens[next], s->plp_k,
                        s->ptop + (size_t)next * (size_t)s->plp_k, &n_top, &s->prank[next]);
    for (int32_t k = n_top; k < s->plp_k; k++) /* fewer than asked: a vocabulary of -inf */
        s->ptop[(size_t)next * (size_t)s->plp_k + k] =
            (lpx_token_logprob){.id = -1, .logprob = -INFINITY};
}

/* Nothing in flight: schedule a step and run it, or begin it when it may run
 * ahead (every row samples on the device, without penalties). */
static lpx_status step_scheduled(lpx_engine *e) {
    LPX_TRY(take_queued(e));
    double t0 = now_ms();
    lpx_status st = lpx_schedule(e);
    int32_t n_tok = 0, n_rows = 0, stride = 1;
    lpx_seq_list *q = &e->sched;
    for (int32_t i = 0; st == LPX_OK && i < q->n; i++)
        if (q->v[i]->bt.n > stride) stride = q->v[i]->bt.n;
    for (int32_t i = 0; st == LPX_OK && i < q->n; i++) {
        lpx_seq *s = q->v[i];
        if (s->t_sched == 0) s->t_sched = t0;
        e->b_start[i] = n_tok;
        for (int32_t j = 0; j < s->n_new; j++, n_tok++) {
            e->b_tokens[n_tok] = s->tokens[s->n_computed + j];
            e->b_pos[n_tok] = s->n_computed + j;
        }
        e->b_len[i] = s->n_computed + s->n_new;
        put_table(e, i, s, stride);
        if (e->b_len[i] == s->n_tokens) e->b_rows[n_rows++] = n_tok - 1;
    }
    if (st != LPX_OK || q->n == 0) return st;
    e->b_start[q->n] = n_tok;
    int32_t n_plp = plp_rows(e, n_rows, &st);
    if (st != LPX_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", lpx_last_error());
        for (int32_t i = 0; i < q->n; i++)
            finish_alone(e, q->v[i], LPX_FINISH_ERROR, msg);
        q->n = 0;
        return lpx_errorf(st, "%s", msg);
    }
    lpx_batch b = staged_batch(e, n_tok, q->n, stride, n_rows + n_plp);
    /* Rows sample on the device unless one needs the logits (logprobs, a logit
     * bias: the device sampler takes neither; prompt logprobs); the step runs
     * ahead unless a row has a penalty (its counts need every token). */
    bool dev = e->device_sampling && n_plp == 0, ahead = e->cfg.step_ahead;
    int32_t n_seen = 0;
    for (int32_t i = 0, row = 0; dev && i < q->n; i++) {
        lpx_seq *s = q->v[i];
        if (s->n_computed + s->n_new < s->n_tokens) continue;
        lpx_sample_row *r = &e->s_rows[row++];
        *r = (lpx_sample_row){
            .p = s->sp, .seed = s->seed, .index = s->n_tokens - s->n_prompt, .seen_start = n_seen};
        if (s->sp.logprobs > 0 || s->sp.n_logit_bias > 0 || s->gram) dev = false;
        if (lpx_sampling_penalized(&s->sp)) ahead = false;
        if (dev && lpx_sampling_penalized(&s->sp) && !append_counts(e, s, &n_seen))
            st = lpx_errorf(LPX_ERR_NOMEM, "engine: token counts: out of memory");
        r->n_seen = n_seen - r->seen_start;
    }
    lpx_sample_batch sb = {.rows = e->s_rows, .seen = e->seen, .n_seen = n_seen};
    lpx_step step = {.batch = &b,
                     .sample = dev ? &sb : NULL,
                     .tokens = e->sampled,
                     .logits = dev ? NULL : e->logits};
    if (st == LPX_OK && dev && ahead) {
        step.tokens = next_tokens(e);
        st = e->cfg.ops->step_begin(e->be, &step);
        if (st == LPX_OK) {
            flight_push(e, q, false);
            account(e, t0, n_tok, false);
            return LPX_OK;
        }
    } else if (st == LPX_OK) {
        st = lpx_backend_run(e->be, &step);
    }
    if (st != LPX_OK) {
        /* The step's sequences cannot go on (their cache is unknown); others can. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", lpx_last_error());
        for (int32_t i = 0; i < q->n; i++)
            finish_alone(e, q->v[i], LPX_FINISH_ERROR, msg);
        q->n = 0;
        lpx_errorf(st, "%s", msg);
    }
    for (int32_t k = 0; k < n_plp && q->n > 0; k++)
        plp_take(e, q->v[e->plp_seq[k]], e->b_rows[n_rows + k], e->b_start[e->plp_seq[k]],
                 e->logits + (size_t)(n_rows + k) * e->vocab);
    int32_t row = 0;
    for (int32_t i = 0; i < q->n; i++) {
        lpx_seq *s = q->v[i];
        s->n_computed += s->n_new;
        lpx_kv_commit(&e->pool, &s->bt, s->tokens, s->n_computed);
        if (s->n_computed < s->n_tokens) continue;
        lpx_token_logprob top[LPX_MAX_LOGPROBS];
        float lp = 0;
        int32_t tok, n_top = 0;
        if (dev) {
            tok = e->sampled[row++];
        } else {
            int32_t n = 0, n_allowed = 1;
            const uint32_t *allow = NULL;
            const char *why = NULL;
            if (lpx_sampling_penalized(&s->sp) && !append_counts(e, s, &n))
                why = "out of memory";
            else if (s->gram && lpx_gram_mask(e, s, &allow, &n_allowed) != LPX_OK)
                why = lpx_last_error();
            else if (n_allowed == 0)
                why = "the response format allows no token here (a schema nested past the "
                      "grammar's bounds)";
            if (why) {
                finish_alone(e, s, LPX_FINISH_ERROR, why);
                row++;
                continue;
            }
            tok = lpx_sample_masked(&e->sampler, &s->sp, s->seed, s->n_tokens - s->n_prompt,
                                    e->logits + (size_t)row++ * e->vocab, e->seen, n, allow, top,
                                    &n_top, &lp);
        }
        lpx_status st2 = advance(e, s, tok, top, n_top, lp);
        if (st == LPX_OK) st = st2;
    }
    account(e, t0, n_tok, false);
    return st;
}

static lpx_status step_once(lpx_engine *e, bool *busy) {
    lpx_status st = e->n_flights > 0 ? step_ahead(e) : step_scheduled(e);
    pthread_mutex_lock(&e->mu);
    snapshot(e);
    *busy = has_work(e) || e->incoming.n > 0 || e->n_cancels > 0;
    pthread_mutex_unlock(&e->mu);
    return st;
}

lpx_status lpx_engine_step(lpx_engine *e, bool *busy) {
    bool on;
    pthread_mutex_lock(&e->mu);
    on = e->thread_on;
    pthread_mutex_unlock(&e->mu);
    if (on) return lpx_errorf(LPX_ERR_BUSY, "engine_step: the engine thread is running");
    pthread_mutex_lock(&e->step_mu);
    lpx_status st = step_once(e, busy);
    pthread_mutex_unlock(&e->step_mu);
    return st;
}

static void *engine_thread(void *arg) {
    lpx_engine *e = arg;
    pthread_mutex_lock(&e->step_mu);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && !has_work(e) && e->incoming.n == 0 && e->n_cancels == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stopping;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        bool busy;
        if (step_once(e, &busy) != LPX_OK)
            fprintf(stderr, "lpx engine: step failed: %s\n", lpx_last_error());
    }
    pthread_mutex_unlock(&e->step_mu);
    return NULL;
}

lpx_status lpx_engine_start(lpx_engine *e) {
    pthread_mutex_lock(&e->mu);
    lpx_status st = LPX_OK;
    if (e->thread_on)
        st = lpx_errorf(LPX_ERR_BUSY, "engine_start: already running");
    else if (pthread_create(&e->thread, NULL, engine_thread, e) != 0)
        st = lpx_errorf(LPX_ERR_INTERNAL, "engine_start: cannot create a thread");
    else
        e->thread_on = true;
    e->stopping = false;
    pthread_mutex_unlock(&e->mu);
    return st;
}

void lpx_engine_stop(lpx_engine *e) {
    pthread_mutex_lock(&e->mu);
    bool on = e->thread_on;
    e->stopping = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (on) pthread_join(e->thread, NULL);
    pthread_mutex_lock(&e->mu);
    e->thread_on = false;
    e->stopping = false;
    pthread_mutex_unlock(&e->mu);
}

lpx_status lpx_engine_get_stats(lpx_engine *e, lpx_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->ttft_ms_mean = e->n_ttft ? e->ttft_sum / (double)e->n_ttft : 0;
    out->tok_s = e->st.busy_s > 0 ? (double)e->st.generated_tokens / e->st.busy_s : 0;
    pthread_mutex_unlock(&e->mu);
    if (e->be && e->cfg.ops->memory_used) out->backend_memory = e->cfg.ops->memory_used(e->be);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) out->peak_rss = (size_t)ru.ru_maxrss * 1024;
    return LPX_OK;
}

void lpx_engine_destroy(lpx_engine *e) {
    if (!e) return;
    lpx_engine_stop(e);
    while (e->n_flights > 0)
        end_oldest(e);
    /* Outstanding requests end as cancelled, so every caller hears an end. */
    pthread_mutex_lock(&e->mu);
    for (int32_t i = 0; i < e->incoming.n; i++)
        if (!lpx_seq_list_push(&e->waiting, e->incoming.v[i])) seq_free(e->incoming.v[i]);
    e->incoming.n = 0;
    pthread_mutex_unlock(&e->mu);
    while (e->running.n > 0)
        finish_alone(e, e->running.v[0], LPX_FINISH_CANCELLED, NULL);
    while (e->waiting.n > 0)
        finish_alone(e, e->waiting.v[0], LPX_FINISH_CANCELLED, NULL);
    if (e->be) e->cfg.ops->destroy(e->be);
    lpx_kv_pool_free(&e->pool);
    lpx_sampler_free(&e->sampler);
    lpx_grams_free(e);
    free(e->gmask);
    free(e->waiting.v);
    free(e->running.v);
    free(e->sched.v);
    free(e->incoming.v);
    free(e->cancels);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_start);
    free(e->b_len);
    free(e->b_table);
    free(e->b_rows);
    free(e->plp_seq);
    free(e->sampled);
    free(e->s_rows);
    free(e->b_feed);
    for (int f = 0; f < 2; f++) {
        free(e->flight[f].seqs);
        free(e->flight[f].row);
        free(e->flight[f].tokens);
        free(e->flight[f].upto);
    }
    free(e->seen);
    free(e->logits);
    free(e->text);
    free(e->piece);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->step_mu);
    pthread_mutex_destroy(&e->gram_mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}
