#include "server/openai.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *lpx_oa_finish(lpx_finish_reason r) {
    switch (r) {
    case LPX_FINISH_STOP:
        return "stop";
    case LPX_FINISH_LENGTH:
        return "length";
    case LPX_FINISH_CANCELLED:
        return "abort";
    case LPX_FINISH_ERROR:
        return "error";
    case LPX_FINISH_NONE:
        break;
    }
    return NULL;
}

char *lpx_oa_error(const lpx_srv_error *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "server_error");
    if (e->param[0])
        cJSON_AddStringToObject(o, "param", e->param);
    else
        cJSON_AddNullToObject(o, "param");
    if (e->code)
        cJSON_AddStringToObject(o, "code", e->code);
    else
        cJSON_AddNullToObject(o, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ---- logprobs ------------------------------------------------------------ */

/* A token may be part of a UTF-8 character: `raw` gets its exact bytes (sent
 * as `bytes`, as OpenAI does), `text` the same with each byte that is not part
 * of a valid character replaced by U+FFFD (text holds 4 * cap bytes), so every
 * response is valid UTF-8. */
static void token_text(const lpx_job *j, int32_t id, char *raw, char *text, size_t cap) {
    size_t n = 0;
    if (lpx_detokenize(j->tok, &id, 1, false, raw, cap, &n) != LPX_OK || n >= cap) n = 0;
    raw[n] = '\0';
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)raw;
    for (size_t i = 0; i < n;) {
        int len = p[i] < 0x80         ? 1
                  : (p[i] >> 5) == 6  ? 2
                  : (p[i] >> 4) == 14 ? 3
                  : (p[i] >> 3) == 30 ? 4
                                      : 0;
        bool ok = len > 0 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++)
            ok = (p[i + k] & 0xC0) == 0x80;
        if (ok) {
            memcpy(text + o, p + i, (size_t)len);
            o += (size_t)len;
            i += (size_t)len;
        } else {
            memcpy(text + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    text[o] = '\0';
}

static cJSON *byte_list(const char *s) {
    cJSON *a = cJSON_CreateArray();
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(*p));
    return a;
}

/* Chat: {"token", "logprob", "bytes", "top_logprobs": [...]}. */
static cJSON *chat_logprob(const lpx_job *j, int32_t id, float lp, const lpx_token_logprob *top,
                           int32_t n_top) {
    char raw[256], t[1024];
    cJSON *o = cJSON_CreateObject();
    token_text(j, id, raw, t, sizeof raw);
    cJSON_AddStringToObject(o, "token", t);
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON_AddItemToObject(o, "bytes", byte_list(raw));
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    for (int32_t k = 0; k < n_top && k < j->top_n; k++) {
        cJSON *x = cJSON_CreateObject();
        token_text(j, top[k].id, raw, t, sizeof raw);
        cJSON_AddStringToObject(x, "token", t);
        cJSON_AddNumberToObject(x, "logprob", top[k].logprob);
        cJSON_AddItemToObject(x, "bytes", byte_list(raw));
        cJSON_AddItemToArray(tops, x);
    }
    return o;
}

/* Completions: parallel lists tokens / token_logprobs / top_logprobs / text_offset. */
typedef struct comp_lp {
    cJSON *obj, *tokens, *values, *tops, *offsets;
} comp_lp;

static comp_lp comp_lp_new(void) {
    comp_lp c;
    c.obj = cJSON_CreateObject();
    c.tokens = cJSON_AddArrayToObject(c.obj, "tokens");
    c.values = cJSON_AddArrayToObject(c.obj, "token_logprobs");
    c.tops = cJSON_AddArrayToObject(c.obj, "top_logprobs");
    c.offsets = cJSON_AddArrayToObject(c.obj, "text_offset");
    return c;
}

/* One token's entries (top NULL: the prompt's first token, whose logprob and top are
 * null as OpenAI gives them); returns its length in bytes, for the next offset. */
static size_t comp_lp_add(const lpx_job *j, comp_lp *c, int32_t id, float lp,
                          const lpx_token_logprob *top, int32_t n_top, size_t offset) {
    char raw[256], t[1024];
    token_text(j, id, raw, t, sizeof raw);
    size_t len = strlen(raw);
    cJSON_AddItemToArray(c->tokens, cJSON_CreateString(t));
    cJSON_AddItemToArray(c->values, top ? cJSON_CreateNumber(lp) : cJSON_CreateNull());
    cJSON_AddItemToArray(c->offsets, cJSON_CreateNumber((double)offset));
    if (j->top_n == 0 || !top) {
        cJSON_AddItemToArray(c->tops, cJSON_CreateNull());
        return len;
    }
    cJSON *m = cJSON_CreateObject();
    for (int32_t k = 0; k < n_top && k < j->top_n; k++) {
        token_text(j, top[k].id, raw, t, sizeof raw);
        if (!cJSON_GetObjectItemCaseSensitive(m, t)) cJSON_AddNumberToObject(m, t, top[k].logprob);
    }
    cJSON_AddItemToArray(c->tops, m);
    return len;
}

/* echo with logprobs: the entries of prompt k's tokens, from *offset on. */
static void comp_lp_prompt(const lpx_job *j, comp_lp *c, int k, const float *plp,
                           const lpx_token_logprob *ptop, int32_t plp_k, size_t *offset) {
    for (size_t i = 0; i < j->n_echo_ids[k]; i++)
        *offset += comp_lp_add(j, c, j->echo_ids[k][i], plp[i], i ? ptop + i * (size_t)plp_k : NULL,
                               plp_k, *offset);
}

/* vLLM's prompt_logprobs of prompt k: null for its first token, then for each token a
 * map from token id to {"logprob", "rank", "decoded_token"}: the token itself first,
 * then the j->prompt_logprobs most likely. The token's own entry takes its place among
 * those when it is one (its rank is then that place, as vLLM writes it). */
static cJSON *prompt_logprobs(const lpx_job *j, int k, const float *plp,
                              const lpx_token_logprob *ptop, int32_t plp_k, const int32_t *rank) {
    cJSON *list = cJSON_CreateArray();
    int32_t want = j->prompt_logprobs < plp_k ? j->prompt_logprobs : plp_k;
    for (size_t i = 0; i < j->n_echo_ids[k]; i++) {
        if (i == 0) {
            cJSON_AddItemToArray(list, cJSON_CreateNull());
            continue;
        }
        const lpx_token_logprob *top = ptop + i * (size_t)plp_k;
        int32_t id = j->echo_ids[k][i], r = rank[i];
        for (int32_t t = 0; t < want; t++)
            if (top[t].id == id) r = t + 1;
        cJSON *m = cJSON_CreateObject();
        for (int32_t t = -1; t < want; t++) {
            int32_t tid = t < 0 ? id : top[t].id;
            if (t >= 0 && (tid == id || tid < 0)) continue;
            /* vLLM clamps -inf, which JSON cannot carry, to -9999 */
            float lp = t < 0 ? plp[i] : top[t].logprob;
            char raw[256], text[1024], key[16];
            token_text(j, tid, raw, text, sizeof raw);
            snprintf(key, sizeof key, "%d", tid);
            cJSON *x = cJSON_AddObjectToObject(m, key);
            cJSON_AddNumberToObject(x, "logprob", lp == -INFINITY ? -9999.0 : lp);
            cJSON_AddNumberToObject(x, "rank", t < 0 ? r : t + 1);
            cJSON_AddStringToObject(x, "decoded_token", text);
        }
        cJSON_AddItemToArray(list, m);
    }
    return list;
}

/* ---- tool calls ------------------------------------------------------------ */

/* Its calls' ids: unique within the server's run (the job's id, the choice, then the
 * call's index). */
static void call_prefix(const lpx_job *j, int choice, char *buf, size_t cap) {
    const char *tail = strchr(j->id, '-');
    snprintf(buf, cap, "call_%s%02x", tail ? tail + 1 : j->id, choice & 0xff);
}

/* A stream's piece of call i: {"index", "id", "type": "function", "function": {"name",
 * "arguments"}} for its first, {"index", "function": {"arguments"}} for the later. */
static cJSON *call_delta(const lpx_job *j, int choice, const lpx_tool_call *c, size_t i,
                         const char *args, bool first) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", (double)i);
    if (first) {
        char prefix[64], id[96];
        call_prefix(j, choice, prefix, sizeof prefix);
        lpx_tool_call_id(j->tool_format, prefix, i, id, sizeof id);
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(o, "function");
    if (first) cJSON_AddStringToObject(f, "name", c->name);
    cJSON_AddStringToObject(f, "arguments", args);
    return o;
}

static const char *tail_of(const lpx_tool_buf *b, size_t from) {
    return b->n > from ? b->p + from : "";
}

/* Whether the parser has content or call text the stream has not sent. */
static bool tool_news(const lpx_job_choice *ch) {
    const lpx_tool_parser *tp = &ch->tp;
    if (tp->content.n > ch->sent_content || tp->n_calls > ch->n_started) return true;
    return ch->n_started && tp->calls[ch->n_started - 1].args.n > ch->sent_args;
}

/* The new content and call pieces into delta d: a call's first delta has its id, type
 * and name, the later ones more of its arguments, as OpenAI streams them. */
static void tool_deltas(const lpx_job *j, lpx_job_choice *ch, cJSON *d) {
    const lpx_tool_parser *tp = &ch->tp;
    if (tp->content.n > ch->sent_content) {
        cJSON_AddStringToObject(d, "content", tail_of(&tp->content, ch->sent_content));
        ch->sent_content = tp->content.n;
    }
    cJSON *calls = NULL;
    for (size_t i = ch->n_started ? ch->n_started - 1 : 0; i < tp->n_calls; i++) {
        bool fresh = i >= ch->n_started;
        size_t from = fresh ? 0 : ch->sent_args;
        if (!fresh && from == tp->calls[i].args.n) continue;
        if (!calls) calls = cJSON_AddArrayToObject(d, "tool_calls");
        cJSON_AddItemToArray(calls, call_delta(j, ch->index, &tp->calls[i], i,
                                               tail_of(&tp->calls[i].args, from), fresh));
        ch->n_started = i + 1;
        ch->sent_args = tp->calls[i].args.n;
    }
}

/* finish_reason: "tool_calls" when the output ended with calls in it. */
static const char *finish_of(lpx_finish_reason r, size_t n_calls) {
    return r == LPX_FINISH_STOP && n_calls ? "tool_calls" : lpx_oa_finish(r);
}

/* ---- streaming ----------------------------------------------------------- */

/* The request's token counts so far (every prompt once, every choice). A prompt's
 * cached tokens (OpenAI's prompt_tokens_details.cached_tokens) are those none of its
 * choices computed: the fewest any finished choice took from the prefix cache. */
static cJSON *usage(const lpx_job *j) {
    int64_t completion = 0, cached = 0;
    for (int32_t i = 0; i < j->n; i++)
        completion += j->ch[i].n_output_tokens;
    for (int32_t i = 0; i < j->n; i++) {
        if (i > 0 && j->ch[i].prompt == j->ch[i - 1].prompt) continue; /* prompt-major */
        int64_t least = -1;
        for (int32_t k = i; k < j->n && j->ch[k].prompt == j->ch[i].prompt; k++)
            if (j->ch[k].done && (least < 0 || j->ch[k].n_cached_tokens < least))
                least = j->ch[k].n_cached_tokens;
        cached += least > 0 ? least : 0;
    }
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_prompt + completion));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    if (d) cJSON_AddNumberToObject(d, "cached_tokens", (double)cached);
    return u;
}

static cJSON *chunk_base(const lpx_job *j) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object",
                            j->kind == LPX_SRV_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model_name);
    return o;
}

/* continuous_usage_stats: every chunk with choices carries the usage so far. */
static bool emit(lpx_job *j, cJSON *o) {
    if (o && j->continuous_usage && cJSON_GetArraySize(cJSON_GetObjectItem(o, "choices")) > 0)
        cJSON_AddItemToObject(o, "usage", usage(j));
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    bool ok = s && lpx_strbuf_add(&j->out, "data: ", 6) && lpx_strbuf_add(&j->out, s, strlen(s)) &&
              lpx_strbuf_add(&j->out, "\n\n", 2);
    free(s);
    if (!ok) j->oom = true;
    return ok;
}

bool lpx_oa_stream_open(lpx_job *j) {
    /* Something to send at once, so the client gets its 200 and headers while
     * the request may still wait for a batch slot (an SSE comment line). */
    if (j->kind != LPX_SRV_CHAT) {
        static const char hello[] = ": lpx\n\n";
        if (!lpx_strbuf_add(&j->out, hello, sizeof hello - 1)) j->oom = true;
        /* echo: each choice's prompt first (with logprobs: at its first token). */
        for (int32_t i = 0; i < j->n && !j->oom && !j->echo_lp && j->echo[j->ch[i].prompt]; i++) {
            cJSON *o = chunk_base(j), *choices = cJSON_AddArrayToObject(o, "choices");
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", i);
            cJSON_AddStringToObject(c, "text", j->echo[j->ch[i].prompt]);
            cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddNullToObject(c, "finish_reason");
            cJSON_AddItemToArray(choices, c);
            emit(j, o);
        }
        return !j->oom;
    }
    /* each choice's role, then (echo) the continued message, as vLLM streams them */
    for (int pass = 0; pass < (j->echo[0] ? 2 : 1); pass++)
        for (int32_t i = 0; i < j->n; i++) {
            cJSON *o = chunk_base(j), *choices = cJSON_AddArrayToObject(o, "choices");
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", i);
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            if (pass == 0) cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", pass == 0 ? "" : j->echo[0]);
            cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddNullToObject(c, "finish_reason");
            cJSON_AddItemToArray(choices, c);
            if (!emit(j, o)) return false;
        }
    return true;
}

/* echo with logprobs: the choice's prompt and its logprobs, before its first token. */
static bool stream_echo(lpx_job *j, lpx_job_choice *ch, const lpx_event *ev) {
    cJSON *o = chunk_base(j), *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", ch->index);
    cJSON_AddStringToObject(c, "text", j->echo[ch->prompt]);
    comp_lp lp = comp_lp_new();
    comp_lp_prompt(j, &lp, ch->prompt, ev->prompt_logprob, ev->prompt_top, ev->n_prompt_top,
                   &ch->offset);
    cJSON_AddItemToObject(c, "logprobs", lp.obj);
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    return emit(j, o);
}

bool lpx_oa_stream_event(lpx_job *j, lpx_job_choice *ch, const lpx_event *ev) {
    bool has_lp = j->logprobs && ev->token >= 0;
    if (j->echo_lp && ev->prompt_logprob && !stream_echo(j, ch, ev)) return false;
    const char *fin = lpx_oa_finish(ev->finish);
    if (j->kind == LPX_SRV_CHAT && j->tool_format != LPX_TOOLS_NONE) {
        bool ok = lpx_tool_parser_feed(&ch->tp, ev->text, ev->text_len);
        if (fin) ok = lpx_tool_parser_finish(&ch->tp) && ok;
        if (!ok) j->oom = true;
        fin = fin ? finish_of(ev->finish, ch->tp.n_calls) : NULL;
        if (!tool_news(ch) && !has_lp && !fin) return true;
        if (ev->finish == LPX_FINISH_CANCELLED && !tool_news(ch) && !has_lp) return true;
    } else if (ev->text_len == 0 && !has_lp && !fin) {
        return true;
    }
    /* A cancelled choice ends without a finish chunk: the job's end tells why. */
    if (ev->finish == LPX_FINISH_CANCELLED && ev->text_len == 0 && !has_lp) return true;
    cJSON *o = chunk_base(j), *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", ch->index);
    cJSON *text = cJSON_CreateStringReference("");
    if (ev->text_len) {
        char *t = malloc(ev->text_len + 1);
        if (t) {
            memcpy(t, ev->text, ev->text_len);
            t[ev->text_len] = '\0';
            cJSON_Delete(text);
            text = cJSON_CreateString(t);
            free(t);
        }
    }
    if (j->kind == LPX_SRV_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (j->tool_format != LPX_TOOLS_NONE) {
            cJSON_Delete(text);
            tool_deltas(j, ch, d);
        } else if (ev->text_len) {
            cJSON_AddItemToObject(d, "content", text);
        } else {
            cJSON_Delete(text);
        }
        if (has_lp) {
            cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
            cJSON *content = cJSON_AddArrayToObject(lp, "content");
            cJSON_AddItemToArray(content,
                                 chat_logprob(j, ev->token, ev->logprob, ev->top, ev->n_top));
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    } else {
        cJSON_AddItemToObject(c, "text", text);
        if (has_lp) {
            comp_lp lp = comp_lp_new();
            ch->offset +=
                comp_lp_add(j, &lp, ev->token, ev->logprob, ev->top, ev->n_top, ch->offset);
            cJSON_AddItemToObject(c, "logprobs", lp.obj);
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    }
    if (fin && ev->finish != LPX_FINISH_CANCELLED)
        cJSON_AddStringToObject(c, "finish_reason", fin);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    return emit(j, o);
}

bool lpx_oa_stream_close(lpx_job *j) {
    if (j->aborted) {
        char *s = lpx_oa_error(&j->abort);
        bool ok = s && lpx_strbuf_add(&j->out, "data: ", 6) &&
                  lpx_strbuf_add(&j->out, s, strlen(s)) && lpx_strbuf_add(&j->out, "\n\n", 2);
        free(s);
        if (!ok) j->oom = true;
    } else if (j->include_usage) {
        cJSON *o = chunk_base(j);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage(j));
        emit(j, o);
    }
    static const char done[] = "data: [DONE]\n\n";
    if (!lpx_strbuf_add(&j->out, done, sizeof done - 1)) j->oom = true;
    return !j->oom;
}

/* ---- whole responses ------------------------------------------------------- */

static cJSON *choice_logprobs(const lpx_job *j, const lpx_job_choice *c) {
    if (!j->logprobs) return cJSON_CreateNull();
    if (j->kind == LPX_SRV_CHAT) {
        cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
        for (int32_t t = 0; t < c->n_lp; t++)
            cJSON_AddItemToArray(content, chat_logprob(j, c->lp_token[t], c->lp_value[t],
                                                       c->lp_top + (size_t)t * (size_t)j->top_n,
                                                       c->lp_n_top[t]));
        return o;
    }
    comp_lp lp = comp_lp_new();
    size_t offset = 0;
    if (j->echo_lp && c->plp) comp_lp_prompt(j, &lp, c->prompt, c->plp, c->ptop, c->plp_k, &offset);
    for (int32_t t = 0; t < c->n_lp; t++)
        offset += comp_lp_add(j, &lp, c->lp_token[t], c->lp_value[t],
                              c->lp_top + (size_t)t * (size_t)j->top_n, c->lp_n_top[t], offset);
    return lp.obj;
}

/* prefix (or NULL) and then b's text. */
static cJSON *string_n(const char *prefix, const lpx_strbuf *b) {
    /* Text bytes are NUL-free: the engine's detokenizer writes UTF-8 text. */
    size_t np = prefix ? strlen(prefix) : 0;
    char *t = malloc(np + b->n + 1);
    if (!t) return NULL;
    if (np) memcpy(t, prefix, np);
    if (b->n) memcpy(t + np, b->p, b->n);
    t[np + b->n] = '\0';
    cJSON *s = cJSON_CreateString(t);
    free(t);
    return s;
}

/* The message of a choice whose output is parsed for tool calls (echo: the continued
 * message before its content, as vLLM puts it); returns how many. */
static size_t tool_message(const lpx_job *j, const lpx_job_choice *c, cJSON *x) {
    char prefix[64];
    size_t n = 0;
    call_prefix(j, c->index, prefix, sizeof prefix);
    cJSON *m = lpx_tool_message(&j->tool_rules, c->text.p, c->text.n, prefix, &n);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (m && j->echo[0]) {
        const char *t = cJSON_IsString(content) ? content->valuestring : "";
        lpx_strbuf view = {(char *)t, strlen(t), 0}; /* read only */
        cJSON *s = string_n(j->echo[0], &view);
        if (s) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", s);
    }
    if (m) cJSON_AddItemToObject(x, "message", m);
    return n;
}

char *lpx_oa_response(const lpx_job *j, double elapsed_ms) {
    cJSON *o = cJSON_CreateObject();
    if (j->kind == LPX_SRV_GENERATE) {
        const lpx_job_choice *c = &j->ch[0];
        cJSON_AddItemToObject(o, "text", string_n(NULL, &c->text));
        cJSON_AddNumberToObject(o, "elapsed_ms", elapsed_ms);
        cJSON_AddNumberToObject(o, "prompt_tokens", j->n_prompt);
        cJSON_AddNumberToObject(o, "generated_tokens", c->n_output_tokens);
        cJSON_AddNumberToObject(o, "tokens_per_second",
                                elapsed_ms > 0 ? c->n_output_tokens / (elapsed_ms / 1e3) : 0);
        cJSON_AddStringToObject(o, "finish_reason", lpx_oa_finish(c->finish));
    } else {
        bool chat = j->kind == LPX_SRV_CHAT;
        cJSON_AddStringToObject(o, "id", j->id);
        cJSON_AddStringToObject(o, "object", chat ? "chat.completion" : "text_completion");
        cJSON_AddNumberToObject(o, "created", (double)j->created);
        cJSON_AddStringToObject(o, "model", j->model_name);
        cJSON *choices = cJSON_AddArrayToObject(o, "choices");
        for (int32_t i = 0; i < j->n; i++) {
            const lpx_job_choice *c = &j->ch[i];
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "index", i);
            size_t n_calls = 0;
            if (chat && j->tool_format != LPX_TOOLS_NONE) {
                n_calls = tool_message(j, c, x);
            } else if (chat) {
                cJSON *m = cJSON_AddObjectToObject(x, "message");
                cJSON_AddStringToObject(m, "role", "assistant");
                cJSON_AddItemToObject(m, "content", string_n(j->echo[0], &c->text));
            } else {
                cJSON_AddItemToObject(x, "text", string_n(j->echo[c->prompt], &c->text));
            }
            cJSON_AddItemToObject(x, "logprobs", choice_logprobs(j, c));
            cJSON_AddStringToObject(x, "finish_reason", finish_of(c->finish, n_calls));
            if (!chat && j->prompt_logprobs >= 0 && c->plp)
                cJSON_AddItemToObject(
                    x, "prompt_logprobs",
                    prompt_logprobs(j, c->prompt, c->plp, c->ptop, c->plp_k, c->prank));
            cJSON_AddItemToArray(choices, x);
        }
        cJSON_AddItemToObject(o, "usage", usage(j));
        /* chat: one prompt, so vLLM gives its logprobs once, beside the choices */
        const lpx_job_choice *c0 = &j->ch[0];
        if (chat && j->prompt_logprobs >= 0 && c0->plp)
            cJSON_AddItemToObject(o, "prompt_logprobs",
                                  prompt_logprobs(j, 0, c0->plp, c0->ptop, c0->plp_k, c0->prank));
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
