/* The batch runner on the in-process engine: a line's request as the engine takes it,
 * and the engine's events into the slot's outcome. */
#include "batch/job.h"

#include <stdlib.h>
#include <string.h>

/* The body as sent: the line's body with the command line's defaults for
 * what it leaves out. The default seed derives from the id, so a resumed or
 * re-run job samples the same tokens. */
cJSON *lpx_batch_effective_body(const job *j, const lpx_batch_task *t) {
    cJSON *b = cJSON_Duplicate(t->body, 1);
    if (!b) return NULL;
    if (!cJSON_GetObjectItemCaseSensitive(b, "max_tokens") &&
        !cJSON_GetObjectItemCaseSensitive(b, "max_completion_tokens"))
        cJSON_AddNumberToObject(b, "max_tokens", j->o.max_tokens);
    if (!cJSON_GetObjectItemCaseSensitive(b, "temperature"))
        cJSON_AddNumberToObject(b, "temperature", j->o.temperature);
    if (!cJSON_GetObjectItemCaseSensitive(b, "top_p"))
        cJSON_AddNumberToObject(b, "top_p", j->o.top_p);
    if (!cJSON_GetObjectItemCaseSensitive(b, "seed")) {
        int64_t seed = j->o.seed >= 0 ? j->o.seed : lpx_batch_shard_of(t->id, INT32_MAX);
        cJSON_AddNumberToObject(b, "seed", (double)seed);
    }
    if (!cJSON_GetObjectItemCaseSensitive(b, "model") && j->model_name[0])
        cJSON_AddStringToObject(b, "model", j->model_name);
    return b;
}

static void on_event(const lpx_event *ev, void *user) {
    slot *s = user;
    outcome *o = &s->out;
    if (ev->text_len) {
        if (o->n_text + ev->text_len + 1 > o->cap_text) {
            size_t nc = 2 * (o->n_text + ev->text_len + 1);
            char *t = realloc(o->text, nc);
            if (t) {
                o->text = t;
                o->cap_text = nc;
            }
        }
        if (o->n_text + ev->text_len + 1 <= o->cap_text) {
            memcpy(o->text + o->n_text, ev->text, ev->text_len);
            o->n_text += ev->text_len;
            o->text[o->n_text] = '\0';
        }
    }
    if (!ev->finish) return;
    snprintf(o->finish, sizeof o->finish, "%s", lpx_finish_reason_name(ev->finish));
    o->prompt_tokens = ev->n_prompt_tokens;
    o->completion_tokens = ev->n_output_tokens;
    if (ev->finish == LPX_FINISH_STOP || ev->finish == LPX_FINISH_LENGTH) {
        o->kind = OUT_OK;
    } else if (ev->finish == LPX_FINISH_CANCELLED) {
        o->kind = OUT_RETRY;
        snprintf(o->error, sizeof o->error, "%s", s->timed_out ? "timeout" : "cancelled");
    } else {
        o->kind = OUT_RETRY;
        snprintf(o->error, sizeof o->error, "engine error: %s", ev->error ? ev->error : "?");
    }
    job *j = s->job;
    pthread_mutex_lock(&j->mu);
    j->doneq[j->n_doneq++] = (size_t)(s - j->slots);
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Text of one chat message content: a string or text parts joined. */
static char *content_text(const cJSON *c) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    size_t n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) n += strlen(cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
    char *s = malloc(n + 1);
    if (!s) return NULL;
    s[0] = '\0';
    cJSON_ArrayForEach(p, c) strcat(s, cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
    return s;
}

/* Submits one attempt to the engine; false with o->error set when refused. */
bool lpx_batch_engine_submit(job *j, slot *s, const cJSON *b) {
    const lpx_batch_task *t = &j->in.tasks[s->task];
    lpx_request r;
    lpx_request_init(&r);
    r.max_tokens = (int32_t)lpx_batch_num(
        b, "max_tokens", lpx_batch_num(b, "max_completion_tokens", j->o.max_tokens));
    r.sampling.temperature = (float)lpx_batch_num(b, "temperature", 0);
    r.sampling.top_p = (float)lpx_batch_num(b, "top_p", 1);
    r.sampling.top_k = (int32_t)lpx_batch_num(b, "top_k", 0);
    r.sampling.min_p = (float)lpx_batch_num(b, "min_p", 0);
    r.sampling.presence_penalty = (float)lpx_batch_num(b, "presence_penalty", 0);
    r.sampling.frequency_penalty = (float)lpx_batch_num(b, "frequency_penalty", 0);
    r.sampling.repetition_penalty = (float)lpx_batch_num(b, "repetition_penalty", 1);
    r.sampling.seed = (int64_t)lpx_batch_num(b, "seed", 0);
    const cJSON *ie = cJSON_GetObjectItemCaseSensitive(b, "ignore_eos");
    r.ignore_eos = cJSON_IsTrue(ie);
    const char *stops[LPX_BATCH_MAX_STOP]; /* the input check allows no more */
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(b, "stop"), *sv;
    if (cJSON_IsString(stop)) {
        stops[r.n_stop++] = stop->valuestring;
    } else {
        cJSON_ArrayForEach(sv, stop) {
            if (r.n_stop < LPX_BATCH_MAX_STOP) stops[r.n_stop++] = sv->valuestring;
        }
    }
    r.stop = stops;
    lpx_chat_message *msgs = NULL;
    size_t n_msgs = 0;
    bool ok = true;
    if (t->chat) {
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(b, "messages"), *m;
        msgs = calloc((size_t)cJSON_GetArraySize(ms) + 1, sizeof *msgs);
        ok = msgs != NULL;
        cJSON_ArrayForEach(m, ms) {
            if (!ok) break;
            msgs[n_msgs].role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
            msgs[n_msgs].content = content_text(cJSON_GetObjectItemCaseSensitive(m, "content"));
            ok = msgs[n_msgs++].content != NULL;
        }
        r.messages = msgs;
        r.n_messages = n_msgs;
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
        if (cJSON_IsArray(p)) p = cJSON_GetArrayItem(p, 0);
        r.prompt_text = p->valuestring;
    }
    lpx_status st = ok ? lpx_engine_submit(j->eng, &r, on_event, s, &s->eng_id) : LPX_ERR_NOMEM;
    for (size_t i = 0; i < n_msgs; i++)
        free((char *)msgs[i].content);
    free(msgs);
    if (st == LPX_OK) return true;
    s->out.kind = st == LPX_ERR_BUSY || st == LPX_ERR_NOMEM ? OUT_RETRY : OUT_FAIL;
    snprintf(s->out.error, sizeof s->out.error, "%s: %s", lpx_status_name(st),
             ok ? lpx_last_error() : "out of memory");
    return false;
}
