/* The batch runner's outcomes: a result record (with its quality flags), a retry after
 * backoff for a transient failure, or a failure record once the attempts ran out. */
#include "batch/job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static cJSON *quality_array(uint32_t flags) {
    cJSON *a = cJSON_CreateArray();
    for (int b = 0; b < LPX_BQ_COUNT; b++)
        if (flags & (1u << b)) cJSON_AddItemToArray(a, cJSON_CreateString(lpx_bq_flag_name(b)));
    return a;
}

/* The OpenAI completion / chat.completion object of an engine result. */
static cJSON *engine_body(job *j, slot *s) {
    const lpx_batch_task *t = &j->in.tasks[s->task];
    cJSON *b = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "%s-lpx%zu", t->chat ? "chatcmpl" : "cmpl", s->task);
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "object", t->chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(b, "created", (double)time(NULL));
    cJSON_AddStringToObject(b, "model", j->model_name);
    cJSON *ch = cJSON_AddArrayToObject(b, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    const char *text = s->out.text ? s->out.text : "";
    const char *finish = s->out.finish;
    if (t->chat && s->tools.f != LPX_TOOLS_NONE) {
        char prefix[64];
        size_t n_calls = 0;
        snprintf(prefix, sizeof prefix, "call_lpx%zu_", s->task);
        cJSON *m = lpx_tool_message(&s->tools, text, strlen(text), prefix, &n_calls);
        if (m) cJSON_AddItemToObject(c, "message", m);
        if (n_calls && !strcmp(finish, "stop")) finish = "tool_calls";
    } else if (t->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", text);
    } else {
        cJSON_AddStringToObject(c, "text", text);
        cJSON_AddNullToObject(c, "logprobs");
    }
    cJSON_AddStringToObject(c, "finish_reason", finish);
    cJSON_AddItemToArray(ch, c);
    cJSON *u = cJSON_AddObjectToObject(b, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)s->out.prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)s->out.completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens",
                            (double)(s->out.prompt_tokens + s->out.completion_tokens));
    return b;
}

/* The generated text inside a response body (chat or completion). */
static const char *body_text(const cJSON *body) {
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(body, "choices"), 0);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "message");
    const cJSON *t = m ? cJSON_GetObjectItemCaseSensitive(m, "content")
                       : cJSON_GetObjectItemCaseSensitive(c, "text");
    return cJSON_IsString(t) ? t->valuestring : "";
}

/* Backoff before retry k (1-based): 0.5 s doubling, at most 8 s. */
static double backoff_s(int32_t k) {
    double d = 0.5 * pow(2.0, k - 1);
    return d > 8 ? 8 : d;
}

/* Returns false when a record could not be written (disk full...). */
bool lpx_batch_handle_outcome(job *j, size_t si) {
    slot *s = &j->slots[si];
    const lpx_batch_task *t = &j->in.tasks[s->task];
    double lat_ms = 1000.0 * (lpx_batch_now_s() - s->t_submit);
    bool ok = true;
    if (s->out.kind == OUT_OK) {
        cJSON *body = s->out.body ? s->out.body : engine_body(j, s);
        s->out.body = NULL;
        const char *text = body_text(body);
        uint32_t flags =
            lpx_bq_check(&j->o.quality, text, strlen(text), !strcmp(s->out.finish, "length"));
        cJSON *rec = cJSON_CreateObject();
        char rid[64];
        snprintf(rid, sizeof rid, "batch_req_%lld", (long long)t->line);
        cJSON_AddStringToObject(rec, "id", rid);
        cJSON_AddStringToObject(rec, "custom_id", t->id);
        cJSON *resp = cJSON_AddObjectToObject(rec, "response");
        cJSON_AddNumberToObject(resp, "status_code", 200);
        cJSON_AddItemToObject(resp, "body", body);
        cJSON_AddNullToObject(rec, "error");
        cJSON *lx = cJSON_AddObjectToObject(rec, "lpx");
        cJSON_AddItemToObject(lx, "quality", quality_array(flags));
        cJSON_AddNumberToObject(lx, "latency_ms", round(lat_ms * 1000) / 1000);
        cJSON_AddNumberToObject(lx, "attempts", s->attempts);
        cJSON_AddNumberToObject(lx, "line", (double)t->line);
        ok = lpx_batch_append_line(j->results_fd, rec);
        if (ok) {
            lpx_batch_account(j, rec);
            if (s->failed_before) j->n_failed--;
            s->failed_before = false;
            j->run_tokens += s->out.completion_tokens;
            j->run_done++;
            if (!j->n_eng) j->streamed += s->out.completion_tokens; /* a server's, whole */
            char names[96] = "";
            for (int b = 0; b < LPX_BQ_COUNT; b++)
                if (flags & (1u << b))
                    snprintf(names + strlen(names), sizeof names - strlen(names), " %s",
                             lpx_bq_flag_name(b));
            lpx_batch_log(j, "done %s attempt %d: %lld tokens, %.1f ms, finish %s%s%s", t->id,
                          s->attempts, (long long)s->out.completion_tokens, lat_ms, s->out.finish,
                          flags ? ", flags:" : "", names);
        }
        cJSON_Delete(rec);
    } else if (s->out.kind == OUT_RETRY && s->attempts <= j->o.retries &&
               !lpx_batch_interrupts(j)) {
        double d = backoff_s(s->attempts);
        lpx_batch_log(j, "attempt %d of %s failed: %s; retrying in %.1f s", s->attempts, t->id,
                      s->out.error, d);
        s->not_before = lpx_batch_now_s() + d;
        j->ready[j->n_ready++] = si;
    } else if (s->out.kind == OUT_RETRY && lpx_batch_interrupts(j)) {
        lpx_batch_log(j, "attempt %d of %s ended by the interrupt (%s): left for --resume",
                      s->attempts, t->id, s->out.error);
    } else {
        lpx_batch_log(j, "failed %s after %d attempt(s): %s", t->id, s->attempts, s->out.error);
        ok = lpx_batch_write_failure(j, t->id, t->line, s->out.error, s->out.param, s->attempts);
        if (!s->failed_before) j->n_failed++;
        s->failed_before = true;
    }
    free(s->out.text);
    cJSON_Delete(s->out.body);
    memset(&s->out, 0, sizeof s->out);
    return ok;
}
