/* Reading and checking batch input lines (see input.h). */
#include "batch/input.h"

#include "base/error.h"
#include "base/json_text.h"
#include "base/utf8.h"
#include "grammar/response_format.h"
#include "grammar/tool_calls.h"
#include "model/prompt.h"
#include "sample/request_body.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t lpx_batch_shard_of(const char *id, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return n > 0 ? (int32_t)(h % (uint64_t)n) : 0;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Checks the fields lpx reads; returns NULL when fine, else the reason, with *param
 * the field refused as lpx serve's 400 names it (NULL when none). */
static const char *check_body(const cJSON *body, bool chat, const char **param) {
    *param = chat ? "messages" : "prompt";
    if (chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
        if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
            return "messages must be a non-empty array";
        const cJSON *m;
        static __thread char rmsg[128];
        int i = 0;
        cJSON_ArrayForEach(m, msgs) {
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
            /* the roles and the wording of lpx serve (model/prompt.h) */
            if (!cJSON_IsObject(m) || !cJSON_IsString(role) || !lpx_chat_role(role->valuestring)) {
                snprintf(rmsg, sizeof rmsg,
                         "messages[%d] must be an object with a role of " LPX_CHAT_ROLES, i);
                return rmsg;
            }
            i++;
            if (cJSON_IsString(content)) continue;
            /* an assistant's turn may be tool calls alone, as in lpx serve */
            if ((!content || cJSON_IsNull(content)) && !strcmp(role->valuestring, "assistant"))
                continue;
            if (!cJSON_IsArray(content))
                return "every message needs \"content\" (a string or text parts)";
            const cJSON *part;
            cJSON_ArrayForEach(part, content) {
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsString(t))
                    return "content parts must be {\"type\":\"text\",\"text\":...}";
            }
        }
        /* tool calls as serve reads them (grammar/tool_calls.h) */
        static __thread char tmsg[640];
        char *mj = NULL, why[600];
        bool ok = lpx_chat_messages_json(msgs, &mj, why, sizeof why);
        free(mj);
        lpx_tools tools;
        if (ok && !lpx_tools_parse(body, &tools, why, sizeof why, param)) ok = false;
        if (ok) lpx_tools_free(&tools);
        if (!ok) {
            snprintf(tmsg, sizeof tmsg, "%s", why);
            return tmsg;
        }
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "prompt");
        if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = cJSON_GetArrayItem(p, 0);
        if (!cJSON_IsString(p)) return "prompt must be a string";
        if (p->valuestring[0] == '\0') return "prompt is empty";
    }
    /* the numbers as serve reads them (sample/request_body.h): its ranges and words */
    static __thread char msg[sizeof((lpx_body_error *)0)->message];
    static __thread char msg_param[sizeof((lpx_body_error *)0)->param];
    lpx_sampling_params sp = {0};
    bool seed_given, given, logprobs;
    int32_t max_tokens, n, top_n;
    lpx_body_error be;
    if (!lpx_body_sampling(body, &sp, &seed_given, &be) ||
        !lpx_body_max_tokens(body, chat, NULL, &max_tokens, &given, &be) ||
        !lpx_body_n(body, &n, &be) || !lpx_body_logprobs(body, chat, &logprobs, &top_n, &be)) {
        snprintf(msg, sizeof msg, "%s", be.message);
        snprintf(msg_param, sizeof msg_param, "%s", be.param);
        *param = msg_param;
        return msg;
    }
    /* response_format as serve reads it (its schema compiled: a bad one names its path) */
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, "response_format");
    *param = "response_format";
    if (rf && !cJSON_IsNull(rf)) {
        static __thread char rfmsg[600];
        lpx_output_format format;
        char *schema;
        if (!lpx_response_format_parse(rf, &format, &schema, rfmsg, sizeof rfmsg)) return rfmsg;
        free(schema);
    }
    *param = "n";
    if (n != 1) return "only n = 1 is supported";
    *param = "stop";
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(body, "stop");
    if (stop && !cJSON_IsNull(stop) && !cJSON_IsString(stop)) {
        if (!cJSON_IsArray(stop)) return "stop must be a string or an array of strings";
        const cJSON *s;
        cJSON_ArrayForEach(s, stop) {
            if (!cJSON_IsString(s)) return "stop must be a string or an array of strings";
        }
        if (cJSON_GetArraySize(stop) > LPX_BATCH_MAX_STOP) {
            snprintf(msg, sizeof msg, "stop takes at most %d strings", LPX_BATCH_MAX_STOP);
            return msg;
        }
    }
    *param = NULL;
    return NULL;
}

/* Parses one line into a task, or returns the reason it is bad (*id set when known,
 * *param when a field of the body was refused). */
static const char *parse_line(const char *s, size_t len, lpx_batch_task *t, const char **id,
                              const char **param) {
    *id = NULL;
    *param = NULL;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, len, &end, false);
    if (!j) return "not valid JSON";
    /* text after the object is an error of the line, reported with its id */
    static __thread char trailing[96];
    size_t at = end ? (size_t)(end - s) : len;
    while (at < len && (s[at] == ' ' || s[at] == '\t' || s[at] == '\r'))
        at++;
    if (at < len)
        snprintf(trailing, sizeof trailing, "text after the JSON object (at byte %zu)", at);
    const char *why = NULL;
    cJSON *body = NULL;
    if (!cJSON_IsObject(j)) {
        why = "not a JSON object";
        goto out;
    }
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(j, "custom_id");
    const cJSON *url = cJSON_GetObjectItemCaseSensitive(j, "url");
    if (cid || url || cJSON_GetObjectItemCaseSensitive(j, "body")) {
        if (!cJSON_IsString(cid) || !cid->valuestring[0]) {
            why = "custom_id must be a non-empty string";
            goto out;
        }
        *id = cid->valuestring;
        const cJSON *method = cJSON_GetObjectItemCaseSensitive(j, "method");
        if (method && !(cJSON_IsString(method) && !strcmp(method->valuestring, "POST"))) {
            why = "method must be \"POST\"";
            goto out;
        }
        if (!cJSON_IsString(url) || (strcmp(url->valuestring, "/v1/chat/completions") &&
                                     strcmp(url->valuestring, "/v1/completions"))) {
            why = "url must be \"/v1/chat/completions\" or \"/v1/completions\"";
            goto out;
        }
        t->chat = !strcmp(url->valuestring, "/v1/chat/completions");
        body = cJSON_DetachItemFromObjectCaseSensitive(j, "body");
        if (!cJSON_IsObject(body)) {
            why = "body must be a JSON object";
            goto out;
        }
    } else {
        const cJSON *sid = cJSON_GetObjectItemCaseSensitive(j, "id");
        if (!cJSON_IsString(sid) || !sid->valuestring[0]) {
            why = "needs \"custom_id\" (OpenAI batch format) or \"id\" (a non-empty string)";
            goto out;
        }
        *id = sid->valuestring;
        cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "messages");
        if (!!p == !!m) {
            why = "needs exactly one of \"prompt\" and \"messages\"";
            goto out;
        }
        t->chat = m != NULL;
        /* the short form's other fields (max_tokens, temperature, ...) are the body */
        body = cJSON_Duplicate(j, 1);
        if (!body) {
            why = "out of memory";
            goto out;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(body, "id");
    }
    static __thread char badutf8[64];
    size_t bad = lpx_utf8_invalid_at(s, len);
    if (bad < len)
        snprintf(badutf8, sizeof badutf8, "not valid UTF-8 (byte %zu: 0x%02X)", bad,
                 (unsigned char)s[bad]);
    why = at < len    ? trailing
          : bad < len ? badutf8
          : lpx_json_nul_escape(s, len, 0) < len
              ? "a string holds \\u0000 (a NUL character): not supported"
              : check_body(body, t->chat, param);
    if (!why) {
        t->id = dup_str(*id);
        t->body = body;
        body = NULL;
        if (!t->id) why = "out of memory";
    }
out:
    if (why && *id) {
        /* the id's text lives in j or body; copy before freeing, a long one cut
         * on a character boundary (the cut id is written into JSON records) */
        static __thread char idbuf[512];
        size_t n = lpx_utf8_prefix(*id, sizeof idbuf - 1);
        memcpy(idbuf, *id, n);
        idbuf[n] = '\0';
        *id = idbuf;
    }
    cJSON_Delete(body);
    cJSON_Delete(j);
    return why;
}

typedef struct id_ref {
    const char *id;
    size_t task;
} id_ref;

static int cmp_ref(const void *a, const void *b) {
    const id_ref *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    return c ? c : (x->task > y->task) - (x->task < y->task);
}

static lpx_status add_reject(lpx_batch_input *in, size_t *cap, const char *id, int64_t line,
                             const char *reason, const char *param) {
    if (in->n_rejects == *cap) {
        size_t nc = *cap ? 2 * *cap : 16;
        lpx_batch_reject *r = realloc(in->rejects, nc * sizeof *r);
        if (!r) return lpx_errorf(LPX_ERR_NOMEM, "batch input: out of memory");
        in->rejects = r;
        *cap = nc;
    }
    lpx_batch_reject *r = &in->rejects[in->n_rejects++];
    r->id = id ? dup_str(id) : NULL;
    r->line = line;
    r->reason = dup_str(reason);
    r->param = param ? dup_str(param) : NULL;
    return LPX_OK;
}

lpx_status lpx_batch_input_read(const char *path, lpx_batch_input *in) {
    memset(in, 0, sizeof *in);
    FILE *f = fopen(path, "rb");
    if (!f) return lpx_errorf(LPX_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    lpx_status st = lpx_batch_input_read_stream(f, path, in);
    fclose(f);
    return st;
}

lpx_status lpx_batch_input_read_stream(FILE *f, const char *path, lpx_batch_input *in) {
    memset(in, 0, sizeof *in);
    size_t task_cap = 0, rej_cap = 0, line_cap = 4096;
    char *line = malloc(line_cap);
    int64_t lineno = 0;
    lpx_status st = LPX_OK;
    while (line && st == LPX_OK) {
        size_t n = 0;
        int c = 0;
        bool too_long = false;
        while ((c = fgetc(f)) != EOF && c != '\n') {
            if (n == LPX_BATCH_MAX_LINE) {
                too_long = true; /* the rest of the line is read and dropped */
                continue;
            }
            if (n + 1 == line_cap) {
                size_t nc =
                    2 * line_cap > LPX_BATCH_MAX_LINE + 1 ? LPX_BATCH_MAX_LINE + 1 : 2 * line_cap;
                char *l = realloc(line, nc);
                if (!l) {
                    st = lpx_errorf(LPX_ERR_NOMEM, "batch input: out of memory");
                    break;
                }
                line = l;
                line_cap = nc;
            }
            line[n++] = (char)c;
        }
        if (st != LPX_OK || (c == EOF && n == 0)) break;
        lineno++;
        line[n] = '\0';
        if (too_long) {
            char why[64];
            snprintf(why, sizeof why, "longer than %zu bytes", LPX_BATCH_MAX_LINE);
            in->n_lines++;
            st = add_reject(in, &rej_cap, NULL, lineno, why, NULL);
            continue;
        }
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
            k++;
        if (k == n) continue;
        in->n_lines++;
        lpx_batch_task t = {0};
        t.line = lineno;
        const char *id, *param;
        const char *why = parse_line(line, n, &t, &id, &param);
        if (why) {
            st = add_reject(in, &rej_cap, id, lineno, why, param);
            continue;
        }
        if (in->n_tasks == task_cap) {
            size_t nc = task_cap ? 2 * task_cap : 64;
            lpx_batch_task *ts = realloc(in->tasks, nc * sizeof *ts);
            if (!ts) {
                free(t.id);
                cJSON_Delete(t.body);
                st = lpx_errorf(LPX_ERR_NOMEM, "batch input: out of memory");
                break;
            }
            in->tasks = ts;
            task_cap = nc;
        }
        in->tasks[in->n_tasks++] = t;
    }
    bool err = ferror(f);
    free(line);
    if (st == LPX_OK && err) st = lpx_errorf(LPX_ERR_IO, "reading %s failed", path);
    if (st == LPX_OK && !line) st = lpx_errorf(LPX_ERR_NOMEM, "batch input: out of memory");
    if (st != LPX_OK) {
        lpx_batch_input_free(in);
        return st;
    }
    /* duplicates: the first occurrence runs, later ones are rejected */
    /* one more than needed: qsort must not get NULL when no line was valid */
    id_ref *refs = malloc((in->n_tasks + 1) * sizeof *refs);
    if (!refs) {
        lpx_batch_input_free(in);
        return lpx_errorf(LPX_ERR_NOMEM, "batch input: out of memory");
    }
    for (size_t i = 0; i < in->n_tasks; i++)
        refs[i] = (id_ref){in->tasks[i].id, i};
    qsort(refs, in->n_tasks, sizeof *refs, cmp_ref);
    /* dup[i]: 1 + the line of the first occurrence, 0 when task i is the first */
    int64_t *dup = calloc(in->n_tasks + 1, sizeof *dup);
    for (size_t i = 1, first = 0; dup && i < in->n_tasks; i++) {
        if (strcmp(refs[i].id, refs[first].id)) {
            first = i;
            continue;
        }
        dup[refs[i].task] = 1 + in->tasks[refs[first].task].line;
    }
    free(refs);
    if (!dup) {
        lpx_batch_input_free(in);
        return lpx_errorf(LPX_ERR_NOMEM, "batch input: out of memory");
    }
    size_t w = 0;
    for (size_t i = 0; i < in->n_tasks; i++) {
        if (!dup[i]) {
            in->tasks[w++] = in->tasks[i];
            continue;
        }
        char reason[128];
        snprintf(reason, sizeof reason, "duplicate id (first on line %lld)",
                 (long long)(dup[i] - 1));
        if (st == LPX_OK)
            st = add_reject(in, &rej_cap, in->tasks[i].id, in->tasks[i].line, reason, NULL);
        free(in->tasks[i].id);
        cJSON_Delete(in->tasks[i].body);
    }
    in->n_tasks = w;
    free(dup);
    return st;
}

void lpx_batch_input_free(lpx_batch_input *in) {
    for (size_t i = 0; i < in->n_tasks; i++) {
        free(in->tasks[i].id);
        cJSON_Delete(in->tasks[i].body);
    }
    for (size_t i = 0; i < in->n_rejects; i++) {
        free(in->rejects[i].id);
        free(in->rejects[i].reason);
        free(in->rejects[i].param);
    }
    free(in->tasks);
    free(in->rejects);
    memset(in, 0, sizeof *in);
}
