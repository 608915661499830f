/* The batch runner against an OpenAI-compatible server: worker threads, one HTTP handle
 * each (base/http_client.h), classify each exchange into the slot's outcome. */
#include "batch/job.h"

#include "base/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Classifies one HTTP exchange into s->out. */
static void server_exchange(job *j, lpx_http *h, slot *s, const char *payload) {
    const lpx_batch_task *t = &j->in.tasks[s->task];
    outcome *o = &s->out;
    char url[2048];
    lpx_http_url(url, sizeof url, j->o.server,
                 t->chat ? "/v1/chat/completions" : "/v1/completions");
    lpx_http_request rq = {
        .url = url, .body = payload, .api_key = j->o.api_key, .timeout_s = j->o.timeout_s};
    lpx_http_response rs;
    lpx_status st = lpx_http_do(h, &rq, &rs);
    long code = rs.status;
    if (st != LPX_OK && rs.timed_out) {
        o->kind = OUT_RETRY;
        snprintf(o->error, sizeof o->error, "timeout after %.3g s", j->o.timeout_s);
    } else if (st != LPX_OK) {
        o->kind = OUT_RETRY;
        snprintf(o->error, sizeof o->error, "%s", rs.error[0] ? rs.error : lpx_last_error());
    } else {
        cJSON *body = cJSON_Parse(rs.body);
        const cJSON *choice =
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(body, "choices"), 0);
        if (code == 200 && choice) {
            o->kind = OUT_OK;
            const cJSON *fr = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
            snprintf(o->finish, sizeof o->finish, "%s", cJSON_IsString(fr) ? fr->valuestring : "");
            const cJSON *usage = cJSON_GetObjectItemCaseSensitive(body, "usage");
            o->prompt_tokens = (int64_t)lpx_batch_num(usage, "prompt_tokens", 0);
            o->completion_tokens = (int64_t)lpx_batch_num(usage, "completion_tokens", 0);
            o->body = body;
            body = NULL;
        } else {
            const char *msg = rs.body;
            const cJSON *err = cJSON_GetObjectItemCaseSensitive(body, "error");
            const cJSON *em = cJSON_GetObjectItemCaseSensitive(err, "message");
            if (cJSON_IsString(em))
                msg = em->valuestring;
            else if (cJSON_IsString(err))
                msg = err->valuestring;
            /* rate limits, overload and server faults pass; a request the
             * server refuses (context length, bad parameters) fails again */
            bool transient = code == 408 || code == 429 || code >= 500 || (code == 200 && !choice);
            o->kind = transient ? OUT_RETRY : OUT_FAIL;
            snprintf(o->error, sizeof o->error, "HTTP %ld: %.400s", code, msg);
            const cJSON *param = cJSON_GetObjectItemCaseSensitive(err, "param");
            if (cJSON_IsString(param))
                snprintf(o->param, sizeof o->param, "%.*s",
                         (int)lpx_utf8_prefix(param->valuestring, sizeof o->param - 1),
                         param->valuestring);
        }
        cJSON_Delete(body);
    }
    lpx_http_response_free(&rs);
}

/* The server's first model id (GET /v1/models), for lines without "model"
 * when no -m names one; "" when the server does not list models. */
void lpx_batch_server_model(job *j) {
    char url[2048];
    lpx_http_url(url, sizeof url, j->o.server, "/v1/models");
    lpx_http_request rq = {.url = url, .api_key = j->o.api_key, .timeout_s = 30};
    lpx_http_response rs;
    bool ok = lpx_http_fetch(&rq, &rs) == LPX_OK && rs.status == 200;
    cJSON *r = ok ? cJSON_Parse(rs.body) : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(r, "data");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, 0), "id");
    if (cJSON_IsString(id)) snprintf(j->model_name, sizeof j->model_name, "%s", id->valuestring);
    lpx_batch_log(j, "server model: %s", j->model_name[0] ? j->model_name : "(none listed)");
    cJSON_Delete(r);
    lpx_http_response_free(&rs);
}

void *lpx_batch_server_worker(void *arg) {
    job *j = arg;
    lpx_http *c = NULL;
    lpx_http_create(&c);
    for (;;) {
        pthread_mutex_lock(&j->mu);
        while (!j->n_sendq && !j->stop_workers)
            pthread_cond_wait(&j->cv_send, &j->mu);
        if (!j->n_sendq) {
            pthread_mutex_unlock(&j->mu);
            break;
        }
        size_t si = j->sendq[0];
        memmove(j->sendq, j->sendq + 1, --j->n_sendq * sizeof *j->sendq);
        pthread_mutex_unlock(&j->mu);
        slot *s = &j->slots[si];
        cJSON *b = lpx_batch_effective_body(j, &j->in.tasks[s->task]);
        char *payload = b ? cJSON_PrintUnformatted(b) : NULL;
        cJSON_Delete(b);
        if (!c || !payload) {
            s->out.kind = OUT_RETRY;
            snprintf(s->out.error, sizeof s->out.error, "out of memory");
        } else {
            server_exchange(j, c, s, payload);
        }
        free(payload);
        pthread_mutex_lock(&j->mu);
        j->doneq[j->n_doneq++] = si;
        pthread_cond_signal(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    lpx_http_destroy(c);
    return NULL;
}
