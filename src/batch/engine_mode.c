/* The batch runner on the in-process engine: a line's request as the engine takes it,
 * and the engine's events into the slot's outcome. */
#include "batch/job.h"
#include "base/error.h"
#include "grammar/response_format.h"
#include "grammar/tool_calls.h"
#include "model/model.h"
#include "model/prompt.h"
#include "sample/request_body.h"

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
    /* --server with -m NAME: NAME for every line (exports carry their own names) */
    if (j->o.server && j->o.model) cJSON_DeleteItemFromObjectCaseSensitive(b, "model");
    if (!cJSON_GetObjectItemCaseSensitive(b, "model") && j->model_name[0])
        cJSON_AddStringToObject(b, "model", j->model_name);
    return b;
}

static void on_event(const lpx_event *ev, void *user) {
    slot *s = user;
    outcome *o = &s->out;
    if (ev->token >= 0) atomic_fetch_add_explicit(&s->job->streamed, 1, memory_order_relaxed);
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

/* Submits one attempt to the engine; false with o->error set when refused. */
bool lpx_batch_engine_submit(job *j, slot *s, const cJSON *b) {
    const lpx_batch_task *t = &j->in.tasks[s->task];
    lpx_request r;
    lpx_request_init(&r);
    /* the numbers as serve reads them (checked with the input: these cannot fail) */
    bool seed_given, given;
    lpx_body_error be;
    r.max_tokens = j->o.max_tokens;
    lpx_body_max_tokens(b, t->chat, NULL, &r.max_tokens, &given, &be);
    lpx_body_sampling(b, &r.sampling, &seed_given, &be);
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
    /* response_format: checked with the input (input.c) */
    char *schema = NULL, rfmsg[8];
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(b, "response_format");
    if (rf && !cJSON_IsNull(rf))
        lpx_response_format_parse(rf, &r.output_format, &schema, rfmsg, sizeof rfmsg);
    r.json_schema = schema;
    /* chat: the messages and tools as serve renders them (checked with the input), and
     * the grammar of a forced call */
    char *msgs = NULL, *vars = NULL, *tool_grammar = NULL, why[600];
    const char *why_param;
    lpx_tools tools = {0};
    bool ok = true;
    lpx_status st = LPX_OK;
    lpx_tool_rules_free(&s->tools);
    if (t->chat) {
        ok = lpx_chat_messages_json(cJSON_GetObjectItemCaseSensitive(b, "messages"), &msgs, why,
                                    sizeof why) &&
             lpx_tools_parse(b, &tools, why, sizeof why, &why_param);
        lpx_tool_format f = lpx_tool_format_of(j->model->chat_template);
        if (ok && !lpx_tools_check_format(&tools, f, why, sizeof why, &why_param))
            st = lpx_errorf(LPX_ERR_UNSUPPORTED, "%s", why);
        if (ok && st == LPX_OK && !lpx_tool_rules_of(&tools, f, &s->tools))
            st = lpx_errorf(LPX_ERR_NOMEM, "tools: out of memory");
        if (ok && st == LPX_OK && (tool_grammar = lpx_tools_grammar_text(&tools, f))) {
            r.output_format = LPX_OUTPUT_TOOL_CALLS;
            r.json_schema = tool_grammar;
        }
        vars = lpx_tools_template_vars(&tools);
        ok = ok && (!tools.n_tools || vars);
    }
    /* the prompt's ids as the server makes them, counted no further than the context,
     * and the server's context check: a line asking for more than fits fails with its
     * message; the command line's default max_tokens is cut to what is left */
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (ok && st == LPX_OK && t->chat) {
        st = lpx_prompt_ids_json(j->model, msgs, vars, (size_t)j->max_model_len, &ids, &n_ids);
    } else if (ok && st == LPX_OK) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
        if (cJSON_IsArray(p)) p = cJSON_GetArrayItem(p, 0);
        st = lpx_prompt_ids(j->model, p->valuestring, NULL, 0, (size_t)j->max_model_len, &ids,
                            &n_ids);
    } else if (!ok) {
        st = LPX_ERR_NOMEM;
    }
    bool own_max = cJSON_GetObjectItemCaseSensitive(t->body, "max_tokens") ||
                   cJSON_GetObjectItemCaseSensitive(t->body, "max_completion_tokens");
    char msg[sizeof s->out.error - 32];
    const char *param;
    if (st == LPX_OK &&
        !lpx_prompt_fits(j->max_model_len, n_ids, ids != NULL && n_ids <= (size_t)j->max_model_len,
                         own_max ? r.max_tokens : 0, t->chat ? "messages" : "prompt", msg,
                         sizeof msg, &param)) {
        s->out.kind = OUT_FAIL;
        snprintf(s->out.error, sizeof s->out.error, "context_length_exceeded: %s", msg);
        snprintf(s->out.param, sizeof s->out.param, "%s", param ? param : "");
        st = LPX_ERR_TOO_LONG;
    } else if (st == LPX_OK) {
        if (!own_max && (int64_t)n_ids + r.max_tokens > j->max_model_len)
            r.max_tokens = j->max_model_len - (int32_t)n_ids;
        r.prompt_ids = ids;
        r.n_prompt_ids = n_ids;
        s->engine = lpx_dp_place(j->eng_load, j->n_eng);
        st = lpx_engine_submit(j->eng[s->engine], &r, on_event, s, &s->eng_id);
        if (st == LPX_OK) atomic_fetch_add(&j->eng_load[s->engine], 1);
        if (st != LPX_OK) {
            s->out.kind = st == LPX_ERR_BUSY || st == LPX_ERR_NOMEM ? OUT_RETRY : OUT_FAIL;
            snprintf(s->out.error, sizeof s->out.error, "%s: %s", lpx_status_name(st),
                     lpx_last_error());
        }
    } else {
        s->out.kind = st == LPX_ERR_NOMEM ? OUT_RETRY : OUT_FAIL;
        snprintf(s->out.error, sizeof s->out.error, "%s: %s", lpx_status_name(st),
                 ok ? lpx_last_error() : "out of memory");
    }
    free(ids);
    free(schema);
    free(msgs);
    free(vars);
    free(tool_grammar);
    lpx_tools_free(&tools);
    return st == LPX_OK;
}
