#include "server/job.h"

#include "base/checked.h"
#include "base/error.h"
#include "model/model.h"
#include "server/openai.h"
#include "tokenizer/tokenizer.h"
#include "template/template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double lpx_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

bool lpx_strbuf_add(lpx_strbuf *b, const char *s, size_t n) {
    size_t need;
    if (!lpx_add_size(b->n, n, &need) || !lpx_add_size(need, 1, &need)) return false;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

lpx_job *lpx_job_new(lpx_engine *e, const lpx_tokenizer *tok, lpx_metrics *metrics,
                     atomic_int *inflight, const char *model_name, const lpx_srv_params *p,
                     double t_arrival_ms) {
    lpx_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    j->engine = e;
    j->tok = tok;
    j->metrics = metrics;
    j->inflight = inflight;
    j->kind = p->kind;
    j->stream = p->stream;
    j->include_usage = p->include_usage;
    j->continuous_usage = p->continuous_usage;
    j->logprobs = p->logprobs;
    j->model_name = model_name;
    j->t_arrival = t_arrival_ms;
    j->created = (int64_t)time(NULL);
    j->n = (int32_t)lpx_srv_n_prompts(p) * p->n;
    static unsigned long long counter;
    unsigned long long k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(j->id, sizeof j->id, "%s-%llx%06llx", p->kind == LPX_SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)j->created, k);
    j->tool_format = p->tool_format;
    if (!lpx_tool_rules_of(&p->tools, p->tool_format, &j->tool_rules)) {
        pthread_mutex_destroy(&j->mu);
        free(j);
        return NULL;
    }
    for (int32_t i = 0; i < j->n; i++) {
        j->ch[i].job = j;
        j->ch[i].index = i;
        j->ch[i].prompt = i / p->n;
        lpx_tool_parser_init(&j->ch[i].tp, &j->tool_rules);
    }
    return j;
}

static void job_free(lpx_job *j) {
    for (int32_t i = 0; i < j->n; i++) {
        lpx_job_choice *c = &j->ch[i];
        free(c->error);
        free(c->text.p);
        free(c->lp_token);
        free(c->lp_value);
        free(c->lp_top);
        free(c->lp_n_top);
        free(c->plp);
        free(c->ptop);
        free(c->prank);
        lpx_tool_parser_free(&c->tp);
    }
    for (int k = 0; k < LPX_SRV_MAX_PROMPTS; k++) {
        free(j->echo[k]);
        free(j->echo_ids[k]);
    }
    lpx_tool_rules_free(&j->tool_rules);
    free(j->out.p);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void lpx_job_unref(lpx_job *j) {
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (last) job_free(j);
}

/* Keeps one token's logprobs for a non-streaming response. */
static bool keep_logprobs(lpx_job *j, lpx_job_choice *c, const lpx_event *ev) {
    if (c->n_lp == c->cap_lp) {
        int32_t cap = c->cap_lp ? c->cap_lp * 2 : 64;
        size_t top = (size_t)cap * (size_t)(j->top_n ? j->top_n : 1);
        int32_t *t = realloc(c->lp_token, (size_t)cap * sizeof *t);
        if (t) c->lp_token = t;
        float *v = realloc(c->lp_value, (size_t)cap * sizeof *v);
        if (v) c->lp_value = v;
        lpx_token_logprob *tp = realloc(c->lp_top, top * sizeof *tp);
        if (tp) c->lp_top = tp;
        int32_t *nt = realloc(c->lp_n_top, (size_t)cap * sizeof *nt);
        if (nt) c->lp_n_top = nt;
        if (!t || !v || !tp || !nt) return false;
        c->cap_lp = cap;
    }
    int32_t k = ev->n_top < j->top_n ? ev->n_top : j->top_n;
    c->lp_token[c->n_lp] = ev->token;
    c->lp_value[c->n_lp] = ev->logprob;
    c->lp_n_top[c->n_lp] = k;
    if (k > 0)
        memcpy(c->lp_top + (size_t)c->n_lp * (size_t)j->top_n, ev->top,
               (size_t)k * sizeof *ev->top);
    c->n_lp++;
    return true;
}

/* Keeps the prompt's logprobs of the first event for a non-streaming response. */
static bool keep_prompt_logprobs(lpx_job_choice *c, const lpx_event *ev) {
    size_t n = (size_t)ev->n_prompt_tokens, k = (size_t)ev->n_prompt_top;
    c->plp = malloc((n ? n : 1) * sizeof *c->plp);
    c->ptop = malloc((n * k > 0 ? n * k : 1) * sizeof *c->ptop);
    c->prank = malloc((n ? n : 1) * sizeof *c->prank);
    if (!c->plp || !c->ptop || !c->prank) return false;
    memcpy(c->plp, ev->prompt_logprob, n * sizeof *c->plp);
    memcpy(c->ptop, ev->prompt_top, n * k * sizeof *c->ptop);
    memcpy(c->prank, ev->prompt_rank, n * sizeof *c->prank);
    c->n_plp = ev->n_prompt_tokens;
    c->plp_k = ev->n_prompt_top;
    return true;
}

/* Runs on the engine thread. */
static void on_event(const lpx_event *ev, void *user) {
    lpx_job_choice *c = user;
    lpx_job *j = c->job;
    double now = lpx_now_ms();
    pthread_mutex_lock(&j->mu);
    if (ev->token >= 0) {
        pthread_mutex_lock(&j->metrics->mu);
        if (!c->started)
            lpx_histogram_observe(&j->metrics->ttft, (now - j->t_arrival) / 1e3);
        else
            lpx_histogram_observe(&j->metrics->itl, (now - c->t_last_token) / 1e3);
        pthread_mutex_unlock(&j->metrics->mu);
        c->started = true;
        c->t_last_token = now;
        c->n_output_tokens = ev->index + 1;
    }
    if (ev->finish != LPX_FINISH_NONE) c->n_cached_tokens = ev->n_cached_tokens;
    if (j->stream) {
        lpx_oa_stream_event(j, c, ev);
    } else {
        if (ev->text_len && !lpx_strbuf_add(&c->text, ev->text, ev->text_len)) j->oom = true;
        if (j->logprobs && ev->token >= 0 && !keep_logprobs(j, c, ev)) j->oom = true;
        if (ev->prompt_logprob && !keep_prompt_logprobs(c, ev)) j->oom = true;
    }
    bool last = false;
    if (ev->finish != LPX_FINISH_NONE) {
        c->done = true;
        c->finish = ev->finish;
        c->n_output_tokens = ev->n_output_tokens;
        if (ev->finish == LPX_FINISH_ERROR && ev->error) {
            size_t n = strlen(ev->error) + 1;
            if ((c->error = malloc(n))) memcpy(c->error, ev->error, n);
        }
        lpx_metrics_finish(j->metrics, ev->finish, (now - j->t_arrival) / 1e3, ev->queue_ms / 1e3);
        atomic_fetch_sub(j->inflight, 1);
        if (++j->n_done == j->n) {
            j->finished = true;
            if (j->stream) lpx_oa_stream_close(j);
        }
        last = --j->refs == 0;
    }
    if (j->waiting && (j->finished || (j->stream && j->out.n > j->out_pos))) {
        j->waiting = false;
        if (j->wake) j->wake(j->wake_arg);
    }
    pthread_mutex_unlock(&j->mu);
    if (last) job_free(j);
}

static char *dup_text(const char *s) {
    size_t n = strlen(s) + 1;
    char *t = malloc(n);
    if (t) memcpy(t, s, n);
    return t;
}

/* The text of prompt k as echo returns it: the text sent, or the ids decoded. */
static char *echo_text(const lpx_job *j, const lpx_srv_params *p, size_t k) {
    const lpx_srv_prompt *q = &p->prompts[k];
    if (q->text) return dup_text(q->text);
    size_t cap = q->n_ids * 16 + 16, need = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        char *t = malloc(cap);
        if (!t || lpx_detokenize(j->tok, q->ids, q->n_ids, p->req.skip_special, t, cap, &need) !=
                      LPX_OK) {
            free(t);
            return NULL;
        }
        if (need < cap) return t;
        free(t);
        cap = need + 1;
    }
    return NULL;
}

bool lpx_job_submit(lpx_job *j, const lpx_srv_params *p, int32_t *const *ids, const size_t *n_ids,
                    lpx_srv_error *err) {
    j->n_prompt = 0;
    for (size_t k = 0; k < lpx_srv_n_prompts(p); k++) {
        j->n_prompt += (int32_t)n_ids[k];
        if (p->kind == LPX_SRV_CHAT) {
            /* chat: the continued assistant message, if any (params.h) */
            if (p->chat_echo && p->chat_echo[0] && !(j->echo[k] = dup_text(p->chat_echo)))
                return lpx_srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        } else if (p->echo && !(j->echo[k] = echo_text(j, p, k))) {
            return lpx_srv_fail(err, 500, "server_error", NULL, NULL,
                                "echo: decoding the prompt: %s", lpx_last_error());
        }
        if (p->req.prompt_logprobs > 0) {
            if (!(j->echo_ids[k] = malloc((n_ids[k] ? n_ids[k] : 1) * sizeof **ids)))
                return lpx_srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
            memcpy(j->echo_ids[k], ids[k], n_ids[k] * sizeof **ids);
            j->n_echo_ids[k] = n_ids[k];
        }
    }
    j->echo_lp = p->echo && p->logprobs && p->kind == LPX_SRV_COMPLETION;
    j->prompt_logprobs = p->prompt_logprobs;
    j->top_n = p->logprobs ? p->top_n : 0;
    if (j->stream) {
        pthread_mutex_lock(&j->mu);
        bool ok = lpx_oa_stream_open(j);
        pthread_mutex_unlock(&j->mu);
        if (!ok) return lpx_srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    for (int32_t i = 0; i < j->n; i++) {
        lpx_request r = p->req;
        r.prompt_ids = ids[j->ch[i].prompt];
        r.n_prompt_ids = n_ids[j->ch[i].prompt];
        r.prompt_text = NULL;
        r.messages = NULL;
        r.n_messages = 0;
        /* Each prompt's choices as those of a request of its own. */
        if (p->seed_given) r.sampling.seed = p->req.sampling.seed + i % p->n;
        /* One group: the engine runs at most max_num_seqs_per_request of them at once. */
        r.group = i > 0 ? j->ch[0].engine_id : 0;
        pthread_mutex_lock(&j->mu);
        j->refs++; /* the engine's, dropped at the finish event */
        pthread_mutex_unlock(&j->mu);
        uint64_t id;
        lpx_status st = lpx_engine_submit(j->engine, &r, on_event, &j->ch[i], &id);
        if (st != LPX_OK) {
            pthread_mutex_lock(&j->mu);
            j->refs--;
            /* Choices never submitted count as done, so the job can finish. */
            j->n_done += j->n - i;
            j->finished = j->n_done == j->n;
            pthread_mutex_unlock(&j->mu);
            if (st == LPX_ERR_TOO_LONG)
                lpx_srv_fail(err, 400, "context_length_exceeded", "context_length_exceeded",
                             p->kind == LPX_SRV_CHAT ? "messages" : "prompt", "%s",
                             lpx_last_error());
            else if (st == LPX_ERR_BUSY)
                lpx_srv_fail(err, 503, "service_unavailable", "draining", NULL, "%s",
                             lpx_last_error());
            else if (st == LPX_ERR_INVALID_ARG)
                lpx_srv_fail(err, 400, "invalid_request_error", NULL, NULL, "%s", lpx_last_error());
            else
                lpx_srv_fail(err, 500, "server_error", NULL, NULL, "%s", lpx_last_error());
            lpx_job_cancel(j, NULL);
            return false;
        }
        atomic_fetch_add(j->inflight, 1);
        pthread_mutex_lock(&j->mu);
        j->ch[i].engine_id = id;
        j->ch[i].submitted = true;
        pthread_mutex_unlock(&j->mu);
    }
    return true;
}

void lpx_job_cancel(lpx_job *j, const lpx_srv_error *err) {
    uint64_t ids[LPX_SRV_MAX_CHOICES];
    int n = 0;
    pthread_mutex_lock(&j->mu);
    if (err && !j->aborted && !j->finished) {
        j->abort = *err;
        j->aborted = true;
    }
    for (int32_t i = 0; i < j->n; i++)
        if (j->ch[i].submitted && !j->ch[i].done) ids[n++] = j->ch[i].engine_id;
    pthread_mutex_unlock(&j->mu);
    for (int i = 0; i < n; i++)
        lpx_engine_cancel(j->engine, ids[i]);
}

size_t lpx_job_take(lpx_job *j, char *buf, size_t max, bool *end) {
    size_t n = j->out.n - j->out_pos;
    if (n > max) n = max;
    if (n) memcpy(buf, j->out.p + j->out_pos, n);
    j->out_pos += n;
    if (j->out_pos == j->out.n) {
        j->out.n = j->out_pos = 0;
    } else if (j->out_pos > j->out.n / 2) {
        memmove(j->out.p, j->out.p + j->out_pos, j->out.n - j->out_pos);
        j->out.n -= j->out_pos;
        j->out_pos = 0;
    }
    if (j->out.p) j->out.p[j->out.n] = '\0';
    *end = j->finished && j->out_pos == j->out.n;
    return n;
}

static bool tokenize(const lpx_tokenizer *t, const char *text, bool add_special, size_t limit,
                     int32_t **ids, size_t *n, lpx_srv_error *err) {
    size_t len = strlen(text), need = 0;
    if (limit && len > lpx_tokenizer_bytes_bound(t, limit)) {
        *n = limit + 1;
        return true;
    }
    /* a token covers at least a byte: len + BOS/EOS is enough, unless stopped sooner */
    size_t cap = (limit && limit + 8 < len ? limit + 8 : len) + 16;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(*ids);
        if (!(*ids = malloc(cap * sizeof **ids)))
            return lpx_srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        if (lpx_tokenize_limit(t, text, len, add_special, true, limit, *ids, cap, &need) != LPX_OK)
            return lpx_srv_fail(err, 400, "invalid_request_error", NULL, "prompt",
                                "tokenizing the prompt: %s", lpx_last_error());
        if (need <= cap) break;
        cap = need;
    }
    *n = need;
    return true;
}

bool lpx_job_prompt_ids(const lpx_model *m, const lpx_srv_params *p, size_t k, size_t limit,
                        int32_t **ids, size_t *n, lpx_srv_error *err) {
    *ids = NULL;
    *n = 0;
    const lpx_tokenizer *t = lpx_model_tokenizer(m);
    const lpx_srv_prompt *q = p->n_prompts ? &p->prompts[k] : NULL;
    if (q && q->ids) {
        if (!(*ids = malloc(q->n_ids * sizeof **ids)))
            return lpx_srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(*ids, q->ids, q->n_ids * sizeof **ids);
        *n = q->n_ids;
        return true;
    }
    if (!t)
        return lpx_srv_fail(err, 400, "invalid_request_error", NULL, NULL,
                            "the model has no tokenizer: send token ids");
    if (q) {
        bool ok = tokenize(t, q->text, p->kind == LPX_SRV_TOKENIZE ? p->add_special : true, limit,
                           ids, n, err);
        if (!ok) {
            free(*ids);
            *ids = NULL;
        }
        return ok;
    }
    char *text = NULL, *vars = lpx_tools_template_vars(&p->tools);
    bool gen_prompt = p->kind == LPX_SRV_TOKENIZE ? p->add_generation_prompt : true;
    lpx_status st = p->tools.n_tools && !vars
                        ? lpx_errorf(LPX_ERR_NOMEM, "out of memory")
                        : lpx_chat_render_json(m, p->messages_json, vars, gen_prompt, -1, &text);
    free(vars);
    if (st != LPX_OK)
        return lpx_srv_fail(err, 400, "invalid_request_error", NULL, "messages",
                            "rendering the chat template: %s", lpx_last_error());
    /* The template writes BOS itself, as transformers assumes. */
    bool ok = tokenize(t, text, false, limit, ids, n, err);
    lpx_free(text);
    if (!ok) {
        free(*ids);
        *ids = NULL;
    }
    return ok;
}
