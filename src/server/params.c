#include "server/params.h"

#include "base/utf8.h"
#include "sample/request_body.h"

#include "grammar/response_format.h"
#include "model/prompt.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD "invalid_request_error"

/* Rewrites s (a buffer of cap bytes) as valid UTF-8, U+FFFD for each invalid
 * byte; what no longer fits is dropped at a character boundary. */
static void utf8_fix(char *s, size_t cap) {
    char tmp[sizeof((lpx_srv_error *)0)->message];
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), o = 0;
    if (cap > sizeof tmp) cap = sizeof tmp;
    for (size_t i = 0; i < n;) {
        size_t k = lpx_utf8_seq(p + i, n - i);
        const char *piece = k ? s + i : "\xEF\xBF\xBD";
        size_t len = k ? k : 3;
        if (o + len >= cap) break;
        memcpy(tmp + o, piece, len);
        o += len;
        i += k ? k : 1;
    }
    memcpy(s, tmp, o);
    s[o] = '\0';
}

bool lpx_srv_fail(lpx_srv_error *e, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    utf8_fix(e->param, sizeof e->param);
    utf8_fix(e->message, sizeof e->message);
    return false;
}

void lpx_srv_params_free(lpx_srv_params *p) {
    free(p->model);
    for (size_t i = 0; i < p->n_prompts; i++) {
        free(p->prompts[i].text);
        free(p->prompts[i].ids);
    }
    free(p->logit_bias);
    free(p->json_schema);
    free(p->messages_json);
    free(p->chat_echo);
    free(p->tool_grammar);
    lpx_tools_free(&p->tools);
    for (size_t i = 0; i < p->n_messages; i++) {
        free((char *)p->messages[i].role);
        free((char *)p->messages[i].content);
    }
    free(p->messages);
    for (size_t i = 0; i < p->req.n_stop; i++)
        free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static bool oom(lpx_srv_error *e) {
    return lpx_srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* A field that is absent or JSON null counts as not given (as OpenAI's API). */
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A field refused by sample/request_body.h: the 400 that names it. */
static bool body_fail(lpx_srv_error *e, const lpx_body_error *be) {
    return lpx_srv_fail(e, 400, BAD, NULL, be->param, "%s", be->message);
}

static bool get_bool(const cJSON *o, const char *name, bool *out, lpx_srv_error *e) {
    lpx_body_error be;
    return lpx_body_bool(o, name, out, &be) || body_fail(e, &be);
}

/* stop: a string or a list of strings. */
static bool parse_stop(const cJSON *o, lpx_srv_params *p, lpx_srv_error *e) {
    const cJSON *v = field(o, "stop");
    if (!v) return true;
    const cJSON *one = cJSON_IsString(v) ? v : NULL;
    if (!one && !cJSON_IsArray(v))
        return lpx_srv_fail(e, 400, BAD, NULL, "stop",
                            "'stop' must be a string or a list of strings");
    int n = one ? 1 : cJSON_GetArraySize(v);
    if (n > LPX_SRV_MAX_STOPS)
        return lpx_srv_fail(e, 400, BAD, NULL, "stop", "'stop' has %d strings: at most %d", n,
                            LPX_SRV_MAX_STOPS);
    for (int i = 0; i < n; i++) {
        const cJSON *s = one ? one : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s))
            return lpx_srv_fail(e, 400, BAD, NULL, "stop",
                                "'stop' must be a string or a list of strings");
        if (!s->valuestring[0])
            return lpx_srv_fail(e, 400, BAD, NULL, "stop", "'stop' strings must not be empty");
        if (!(p->stop[p->req.n_stop] = dup_str(s->valuestring))) return oom(e);
        p->req.n_stop++;
    }
    p->req.stop = (const char *const *)p->stop;
    return true;
}

/* Token ids: a non-empty list of integers in [0, 2^31), into prompt slot q. */
static bool parse_ids(const cJSON *v, const char *name, lpx_srv_prompt *q, lpx_srv_error *e) {
    int n = cJSON_GetArraySize(v);
    if (n == 0) return lpx_srv_fail(e, 400, BAD, NULL, name, "'%s' must not be empty", name);
    if (!(q->ids = malloc((size_t)n * sizeof *q->ids))) return oom(e);
    int i = 0;
    for (const cJSON *x = v->child; x; x = x->next, i++) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble > 2147483647.0)
            return lpx_srv_fail(e, 400, BAD, NULL, name,
                                "'%s' item %d must be a token id (a non-negative integer)", name,
                                i);
        q->ids[i] = (int32_t)x->valuedouble;
    }
    q->n_ids = (size_t)n;
    return true;
}

/* One prompt into slot q: a non-empty string, or (completions) token ids. */
static bool parse_one_prompt(const cJSON *v, lpx_srv_params *p, lpx_srv_prompt *q,
                             lpx_srv_error *e) {
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0])
            return lpx_srv_fail(e, 400, BAD, NULL, "prompt", "'prompt' must not be empty");
        return (q->text = dup_str(v->valuestring)) ? true : oom(e);
    }
    if (cJSON_IsArray(v) && p->kind == LPX_SRV_COMPLETION) return parse_ids(v, "prompt", q, e);
    return lpx_srv_fail(e, 400, BAD, NULL, "prompt",
                        p->kind == LPX_SRV_COMPLETION
                            ? "'prompt' must be a string, a list of strings, a list of token ids "
                              "or a list of token id lists"
                            : "'prompt' must be a string");
}

/* prompt: a string, a list of token ids, or (completions: a batch, one set of
 * choices each) a list of strings or of token id lists. Other endpoints take
 * a list of one string. */
static bool parse_prompt(const cJSON *o, lpx_srv_params *p, lpx_srv_error *e) {
    const cJSON *v = field(o, "prompt");
    if (!v) return lpx_srv_fail(e, 400, BAD, NULL, "prompt", "'prompt' is required");
    bool batch =
        cJSON_IsArray(v) && v->child && (cJSON_IsString(v->child) || cJSON_IsArray(v->child));
    if (!batch) {
        p->n_prompts = 1;
        return parse_one_prompt(v, p, &p->prompts[0], e);
    }
    int n = cJSON_GetArraySize(v);
    if (n > 1 && p->kind != LPX_SRV_COMPLETION)
        return lpx_srv_fail(e, 400, BAD, NULL, "prompt",
                            "'prompt' takes one prompt here: send a list to /v1/completions");
    if (n > LPX_SRV_MAX_PROMPTS)
        return lpx_srv_fail(e, 400, BAD, NULL, "prompt", "'prompt' has %d prompts: at most %d", n,
                            LPX_SRV_MAX_PROMPTS);
    for (const cJSON *x = v->child; x; x = x->next) {
        if (cJSON_IsString(x) != cJSON_IsString(v->child))
            return lpx_srv_fail(e, 400, BAD, NULL, "prompt",
                                "'prompt' lists must hold only strings or only token id lists");
        if (!parse_one_prompt(x, p, &p->prompts[p->n_prompts++], e)) return false;
    }
    return true;
}

size_t lpx_srv_n_prompts(const lpx_srv_params *p) {
    return p->n_prompts ? p->n_prompts : 1;
}

/* content: a string, or a list of {"type": "text", "text": ...} parts (joined with sep
 * between them). */
static bool message_content(const cJSON *c, int i, const char *sep, char **out, lpx_srv_error *e) {
    if (cJSON_IsString(c)) return (*out = dup_str(c->valuestring)) ? true : oom(e);
    if (!cJSON_IsArray(c))
        return lpx_srv_fail(e, 400, BAD, NULL, "messages",
                            "messages[%d].content must be a string or a list of text parts", i);
    size_t len = 0;
    for (const cJSON *part = c->child; part; part = part->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            return lpx_srv_fail(e, 400, BAD, NULL, "messages",
                                "messages[%d].content: only parts {\"type\": \"text\", \"text\": "
                                "string} are supported",
                                i);
        len += strlen(text->valuestring) + strlen(sep);
    }
    if (!(*out = malloc(len + 1))) return oom(e);
    size_t at = 0;
    for (const cJSON *part = c->child; part; part = part->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t), k = part == c->child ? 0 : strlen(sep);
        memcpy(*out + at, sep, k);
        memcpy(*out + at + k, t, n);
        at += k + n;
    }
    (*out)[at] = '\0';
    return true;
}

static bool parse_messages(const cJSON *o, lpx_srv_params *p, lpx_srv_error *e) {
    const cJSON *v = field(o, "messages");
    if (!v) return lpx_srv_fail(e, 400, BAD, NULL, "messages", "'messages' is required");
    if (!cJSON_IsArray(v))
        return lpx_srv_fail(e, 400, BAD, NULL, "messages", "'messages' must be a list");
    int n = cJSON_GetArraySize(v);
    if (n == 0) return lpx_srv_fail(e, 400, BAD, NULL, "messages", "'messages' must not be empty");
    if (!(p->messages = calloc((size_t)n, sizeof *p->messages))) return oom(e);
    int i = 0;
    for (const cJSON *m = v->child; m; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        /* the roles lpx batch takes too (model/prompt.h) */
        const char *rs = cJSON_IsString(role) ? lpx_chat_role(role->valuestring) : NULL;
        if (!cJSON_IsObject(m) || !rs)
            return lpx_srv_fail(e, 400, BAD, NULL, "messages",
                                "messages[%d] must be an object with a role of " LPX_CHAT_ROLES, i);
        const cJSON *c = field(m, "content");
        char *content = NULL;
        if (!c) {
            if (strcmp(rs, "assistant"))
                return lpx_srv_fail(e, 400, BAD, NULL, "messages",
                                    "messages[%d].content is required", i);
            content = dup_str("");
        } else if (!message_content(c, i, "", &content, e)) {
            p->n_messages = (size_t)i;
            return false;
        }
        p->messages[i].role = dup_str(rs);
        p->messages[i].content = content;
        p->n_messages = (size_t)i + 1;
        if (!p->messages[i].role || !content) return oom(e);
    }
    char msg[300];
    if (!lpx_chat_messages_json(v, &p->messages_json, msg, sizeof msg))
        return lpx_srv_fail(e, 400, BAD, NULL, "messages", "%s", msg);
    return true;
}

/* vLLM's chat echo: the last message's content goes before the output when that message
 * is the assistant's (the role of the reply: a reply continued), its text parts joined
 * with newlines as vLLM joins them; else nothing. */
static bool chat_echo(const cJSON *o, lpx_srv_params *p, lpx_srv_error *e) {
    const cJSON *msgs = field(o, "messages"), *last = msgs ? msgs->child : NULL;
    while (last && last->next)
        last = last->next;
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(last, "role");
    const char *rs = cJSON_IsString(role) ? lpx_chat_role(role->valuestring) : NULL;
    const cJSON *c = last ? field(last, "content") : NULL;
    if (!rs || strcmp(rs, "assistant") || !c) return true;
    return message_content(c, (int)p->n_messages - 1, "\n", &p->chat_echo, e);
}

static bool parse_sampling(const cJSON *o, const lpx_gen_defaults *gen, lpx_srv_params *p,
                           lpx_srv_error *e) {
    lpx_sampling_params *s = &p->req.sampling;
    /* Model defaults first (generation_config.json / GGUF), then OpenAI's. */
    s->temperature = gen && gen->temperature >= 0 ? gen->temperature : 1.0f;
    s->top_p = gen && gen->top_p > 0 ? gen->top_p : 1.0f;
    s->top_k = gen && gen->top_k > 0 ? gen->top_k : 0;
    s->repetition_penalty = gen && gen->repetition_penalty > 0 ? gen->repetition_penalty : 1.0f;
    lpx_body_error be;
    return lpx_body_sampling(o, s, &p->seed_given, &be) || body_fail(e, &be);
}

static bool parse_logprobs(const cJSON *o, lpx_srv_params *p, lpx_srv_error *e) {
    lpx_body_error be;
    if (!lpx_body_logprobs(o, p->kind == LPX_SRV_CHAT, &p->logprobs, &p->top_n, &be) ||
        !lpx_body_prompt_logprobs(o, &p->prompt_logprobs, &be))
        return body_fail(e, &be);
    /* The engine computes logprobs only when asked for at least one. */
    p->req.sampling.logprobs = p->logprobs ? (p->top_n > 0 ? p->top_n : 1) : 0;
    return true;
}

/* logit_bias: {"token id": bias in [-100, 100], ...}, at most
 * LPX_SRV_MAX_LOGIT_BIAS entries (ids are checked against the vocabulary by
 * lpx_srv_check_vocab). */
static bool parse_logit_bias(const cJSON *o, lpx_srv_params *p, lpx_srv_error *e) {
    const cJSON *v = field(o, "logit_bias");
    if (!v) return true;
    if (!cJSON_IsObject(v))
        return lpx_srv_fail(e, 400, BAD, NULL, "logit_bias",
                            "'logit_bias' must be an object of token id: bias");
    int n = cJSON_GetArraySize(v);
    if (n > LPX_SRV_MAX_LOGIT_BIAS)
        return lpx_srv_fail(e, 400, BAD, NULL, "logit_bias",
                            "'logit_bias' has %d entries: at most %d", n, LPX_SRV_MAX_LOGIT_BIAS);
    if (n == 0) return true;
    if (!(p->logit_bias = malloc((size_t)n * sizeof *p->logit_bias))) return oom(e);
    int i = 0;
    for (const cJSON *x = v->child; x; x = x->next, i++) {
        const char *k = x->string;
        char *end = NULL;
        long id = k[0] >= '0' && k[0] <= '9' ? strtol(k, &end, 10) : -1;
        if (id < 0 || id > INT32_MAX || *end)
            return lpx_srv_fail(e, 400, BAD, NULL, "logit_bias",
                                "'logit_bias' key '%.40s' must be a token id (a non-negative "
                                "integer)",
                                k);
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= -100 && x->valuedouble <= 100))
            return lpx_srv_fail(e, 400, BAD, NULL, "logit_bias",
                                "'logit_bias' value of token %ld must be a number in [-100, 100]",
                                id);
        p->logit_bias[i] = (lpx_logit_bias){(int32_t)id, (float)x->valuedouble};
    }
    p->req.sampling.logit_bias = p->logit_bias;
    p->req.sampling.n_logit_bias = n;
    return true;
}

bool lpx_srv_check_vocab(const lpx_srv_params *p, int32_t vocab, lpx_srv_error *e) {
    for (size_t k = 0; k < p->n_prompts; k++)
        for (size_t i = 0; i < p->prompts[k].n_ids; i++)
            if (p->prompts[k].ids[i] >= vocab)
                return lpx_srv_fail(e, 400, BAD, NULL,
                                    p->kind == LPX_SRV_DETOKENIZE ? "tokens" : "prompt",
                                    "token id %d at %zu is out of the vocabulary (size %d)",
                                    p->prompts[k].ids[i], i, vocab);
    for (int32_t i = 0; i < p->req.sampling.n_logit_bias; i++)
        if (p->logit_bias[i].id >= vocab)
            return lpx_srv_fail(e, 400, BAD, NULL, "logit_bias",
                                "'logit_bias' token id %d is out of the vocabulary (size %d)",
                                p->logit_bias[i].id, vocab);
    return true;
}

/* The fields each endpoint takes. A field not listed for the endpoint is a 400
 * naming it: lpx never answers 200 to a request it did not carry out. The
 * IGNORED ones change nothing in what a model generates and are accepted on
 * purpose (docs/server.md lists them); the LIMITED ones are accepted only with
 * the values lpx implements (check_limited). */
#define K_CMPL (1u << LPX_SRV_COMPLETION)
#define K_CHAT (1u << LPX_SRV_CHAT)
#define K_GEN (1u << LPX_SRV_GENERATE)
#define K_TOK (1u << LPX_SRV_TOKENIZE)
#define K_DETOK (1u << LPX_SRV_DETOKENIZE)
#define K_OAI (K_CMPL | K_CHAT)
#define K_SAMPLE (K_CMPL | K_CHAT | K_GEN)

static const struct known_field {
    const char *name;
    unsigned kinds;
} known_fields[] = {
    {"model", K_SAMPLE | K_TOK | K_DETOK},
    {"prompt", K_CMPL | K_GEN | K_TOK},
    {"messages", K_CHAT | K_TOK},
    {"tokens", K_DETOK},
    {"add_special_tokens", K_TOK},
    {"add_generation_prompt", K_TOK},
    {"max_tokens", K_OAI},
    {"max_completion_tokens", K_CHAT},
    {"max_new_tokens", K_GEN},
    {"temperature", K_SAMPLE},
    {"top_p", K_SAMPLE},
    {"top_k", K_SAMPLE},
    {"min_p", K_SAMPLE},
    {"presence_penalty", K_SAMPLE},
    {"frequency_penalty", K_SAMPLE},
    {"repetition_penalty", K_SAMPLE},
    {"seed", K_SAMPLE},
    {"stop", K_SAMPLE},
    {"n", K_SAMPLE},
    {"logprobs", K_OAI},
    {"top_logprobs", K_CHAT},
    {"prompt_logprobs", K_OAI},
    {"logit_bias", K_SAMPLE},
    {"ignore_eos", K_SAMPLE},
    {"skip_special_tokens", K_SAMPLE},
    {"stream", K_SAMPLE},
    {"stream_options", K_OAI},
    {"echo", K_OAI},
    /* LIMITED */
    {"best_of", K_CMPL},
    {"suffix", K_CMPL},
    {"response_format", K_OAI},
    {"tools", K_CHAT | K_TOK},
    {"tool_choice", K_CHAT},
    {"parallel_tool_calls", K_CHAT},
    {"functions", K_CHAT},
    {"function_call", K_CHAT},
    /* IGNORED */
    {"user", K_OAI},
    {"service_tier", K_OAI},
    {"store", K_OAI},
    {"metadata", K_OAI},
};

static bool check_known(const cJSON *o, lpx_srv_kind kind, lpx_srv_error *e) {
    for (const cJSON *x = o->child; x; x = x->next) {
        bool ok = false;
        for (size_t i = 0; !ok && i < sizeof known_fields / sizeof *known_fields; i++)
            ok = !strcmp(x->string, known_fields[i].name) && (known_fields[i].kinds >> kind & 1);
        if (!ok)
            return lpx_srv_fail(e, 400, BAD, "unknown_parameter", x->string,
                                "'%.40s' is not supported by this endpoint of lpx (docs/server.md "
                                "lists the fields it takes)",
                                x->string);
    }
    return true;
}

static bool is_str(const cJSON *v, const char *s) {
    return cJSON_IsString(v) && !strcmp(v->valuestring, s);
}

static bool empty_list(const cJSON *v) {
    return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0;
}

static bool unsupported(lpx_srv_error *e, const char *name, const char *why) {
    return lpx_srv_fail(e, 400, BAD, "unsupported_value", name, "'%s': %s", name, why);
}

/* The LIMITED fields: the values that ask for nothing lpx does not do. */
/* response_format: text, json_object, or json_schema with a schema of the supported
 * subset (compiled here, so that a bad one is a 400 naming its keyword). */
static bool parse_response_format(const cJSON *o, lpx_srv_params *p, lpx_srv_error *e) {
    const cJSON *v = field(o, "response_format");
    if (!v) return true;
    char msg[600];
    if (!lpx_response_format_parse(v, &p->req.output_format, &p->json_schema, msg, sizeof msg))
        return lpx_srv_fail(e, 400, BAD, NULL, "response_format", "%s", msg);
    p->req.json_schema = p->json_schema;
    return true;
}

static bool check_limited(const cJSON *o, const lpx_srv_params *p, lpx_srv_error *e) {
    const cJSON *v;
    if ((v = field(o, "suffix")) && !is_str(v, ""))
        return unsupported(e, "suffix", "insertion (a suffix) is not supported");
    if ((v = field(o, "best_of"))) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1)
            return lpx_srv_fail(e, 400, BAD, NULL, "best_of", "'best_of' must be an integer >= 1");
        if (v->valuedouble != 1 && v->valuedouble != p->n)
            return unsupported(e, "best_of",
                               "ranking more candidates than 'n' is not supported (best_of must "
                               "be 1 or equal n)");
    }
    const cJSON *fns = field(o, "functions");
    if (fns && !empty_list(fns))
        return unsupported(e, "functions",
                           "the legacy function calls are not supported: send 'tools'");
    if ((v = field(o, "function_call")) && !is_str(v, "none") && !is_str(v, "auto"))
        return unsupported(e, "function_call",
                           "the legacy function calls are not supported: send 'tool_choice'");
    return true;
}

/* tools, tool_choice, parallel_tool_calls (grammar/tool_calls.h, shared with batch). */
static bool parse_tools(const cJSON *o, lpx_srv_params *p, lpx_srv_error *e) {
    char msg[600];
    const char *param = NULL;
    if (!lpx_tools_parse(o, &p->tools, msg, sizeof msg, &param))
        return lpx_srv_fail(e, 400, BAD, NULL, param, "%s", msg);
    if (lpx_tools_parsed(&p->tools) && p->req.output_format != LPX_OUTPUT_TEXT &&
        (p->tools.choice == LPX_TOOL_CHOICE_REQUIRED || p->tools.choice == LPX_TOOL_CHOICE_NAMED))
        return unsupported(e, "tool_choice",
                           "a forced tool call (\"required\" or a named function) together with "
                           "'response_format' is not supported");
    return true;
}

bool lpx_srv_bind_model(const lpx_model *m, lpx_srv_params *p, lpx_srv_error *e) {
    if (!p->tools.n_tools) return true;
    lpx_tool_format f = lpx_tool_format_of(m->chat_template);
    char msg[300];
    const char *param;
    if (!lpx_tools_check_format(&p->tools, f, msg, sizeof msg, &param))
        return lpx_srv_fail(e, 400, BAD, "unsupported_value", param, "%s", msg);
    if (!lpx_tools_parsed(&p->tools)) return true;
    p->tool_format = f;
    if (p->tools.choice != LPX_TOOL_CHOICE_REQUIRED && p->tools.choice != LPX_TOOL_CHOICE_NAMED)
        return true;
    if (!(p->tool_grammar = lpx_tools_grammar_text(&p->tools, f))) return oom(e);
    p->req.output_format = LPX_OUTPUT_TOOL_CALLS;
    p->req.json_schema = p->tool_grammar;
    return true;
}

/* The IGNORED fields, checked for their type. */
static bool check_ignored(const cJSON *o, lpx_srv_error *e) {
    static const struct {
        const char *name;
        cJSON_bool (*ok)(const cJSON *);
        const char *what;
    } f[] = {{"user", cJSON_IsString, "a string"},
             {"service_tier", cJSON_IsString, "a string"},
             {"store", cJSON_IsBool, "a boolean"},
             {"metadata", cJSON_IsObject, "an object"}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        const cJSON *v = field(o, f[i].name);
        if (v && !f[i].ok(v))
            return lpx_srv_fail(e, 400, BAD, NULL, f[i].name, "'%s' must be %s", f[i].name,
                                f[i].what);
    }
    return true;
}

static bool parse_object(const cJSON *o, const lpx_gen_defaults *gen, lpx_srv_params *p,
                         lpx_srv_error *e) {
    if (!check_known(o, p->kind, e)) return false;
    const cJSON *model = field(o, "model");
    if (model && !cJSON_IsString(model))
        return lpx_srv_fail(e, 400, BAD, NULL, "model", "'model' must be a string");
    if (model && !(p->model = dup_str(model->valuestring))) return oom(e);

    switch (p->kind) {
    case LPX_SRV_DETOKENIZE: {
        const cJSON *t = field(o, "tokens");
        if (!t || !cJSON_IsArray(t))
            return lpx_srv_fail(e, 400, BAD, NULL, "tokens",
                                "'tokens' must be a list of token ids");
        p->n_prompts = 1;
        return parse_ids(t, "tokens", &p->prompts[0], e);
    }
    case LPX_SRV_TOKENIZE:
        p->add_special = true;
        p->add_generation_prompt = true;
        if (!get_bool(o, "add_special_tokens", &p->add_special, e) ||
            !get_bool(o, "add_generation_prompt", &p->add_generation_prompt, e))
            return false;
        if (!(field(o, "messages") ? parse_messages(o, p, e) : parse_prompt(o, p, e))) return false;
        return parse_tools(o, p, e);
    case LPX_SRV_CHAT:
        if (!parse_messages(o, p, e)) return false;
        break;
    case LPX_SRV_COMPLETION:
    case LPX_SRV_GENERATE:
        if (!parse_prompt(o, p, e)) return false;
        break;
    }

    if (!parse_sampling(o, gen, p, e) || !parse_logprobs(o, p, e) || !parse_stop(o, p, e) ||
        !parse_logit_bias(o, p, e) || !get_bool(o, "echo", &p->echo, e) ||
        !get_bool(o, "ignore_eos", &p->req.ignore_eos, e) || !get_bool(o, "stream", &p->stream, e))
        return false;
    if (p->kind == LPX_SRV_CHAT && p->echo && !chat_echo(o, p, e)) return false;
    bool skip = true;
    if (!get_bool(o, "skip_special_tokens", &skip, e)) return false;
    p->req.skip_special = skip;

    /* max_tokens: chat also takes OpenAI's newer max_completion_tokens,
     * /generate calls it max_new_tokens. */
    bool given;
    lpx_body_error be;
    if (!lpx_body_max_tokens(o, p->kind == LPX_SRV_CHAT,
                             p->kind == LPX_SRV_GENERATE ? "max_new_tokens" : NULL,
                             &p->req.max_tokens, &given, &be) ||
        !lpx_body_n(o, &p->n, &be))
        return body_fail(e, &be);
    /* Not given: completions 16 (OpenAI), /generate 128, chat up to the context. */
    if (!given)
        p->req.max_tokens = p->kind == LPX_SRV_COMPLETION ? 16
                            : p->kind == LPX_SRV_GENERATE ? 128
                                                          : -1;
    if (lpx_srv_n_prompts(p) * (size_t)p->n > LPX_SRV_MAX_CHOICES)
        return lpx_srv_fail(
            e, 400, BAD, NULL, "n", "%zu prompts with 'n' %d make %zu choices: at most %d",
            lpx_srv_n_prompts(p), p->n, lpx_srv_n_prompts(p) * (size_t)p->n, LPX_SRV_MAX_CHOICES);
    /* echo with logprobs (completions) and prompt_logprobs: the engine computes the
     * prompt's for both (the larger count of alternatives; at least 1, the engine's "on"). */
    int32_t plp = p->echo && p->logprobs && p->kind == LPX_SRV_COMPLETION ? p->top_n : -1;
    if (p->prompt_logprobs > plp) plp = p->prompt_logprobs;
    if (plp >= 0) p->req.prompt_logprobs = plp > 0 ? plp : 1;
    if (!check_limited(o, p, e) || !check_ignored(o, e) || !parse_response_format(o, p, e) ||
        !parse_tools(o, p, e))
        return false;
    if (p->kind == LPX_SRV_GENERATE && p->n != 1)
        return lpx_srv_fail(e, 400, BAD, NULL, "n",
                            "/generate makes one output: use /v1/completions for n > 1");
    if (p->kind == LPX_SRV_GENERATE && p->stream)
        return lpx_srv_fail(e, 400, BAD, NULL, "stream",
                            "/generate does not stream: use /v1/completions");

    const cJSON *so = field(o, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so))
            return lpx_srv_fail(e, 400, BAD, NULL, "stream_options",
                                "'stream_options' must be an object");
        if (!p->stream)
            return lpx_srv_fail(e, 400, BAD, NULL, "stream_options",
                                "'stream_options' is only allowed with 'stream': true");
        for (const cJSON *x = so->child; x; x = x->next)
            if (strcmp(x->string, "include_usage") && strcmp(x->string, "continuous_usage_stats"))
                return lpx_srv_fail(e, 400, BAD, "unknown_parameter", "stream_options",
                                    "'stream_options.%.40s' is not supported (include_usage and "
                                    "continuous_usage_stats are)",
                                    x->string);
        if (!get_bool(so, "include_usage", &p->include_usage, e) ||
            !get_bool(so, "continuous_usage_stats", &p->continuous_usage, e))
            return false;
    }
    return true;
}

/* A \u0000 escape: a backslash preceded by an even run of backslashes (not
 * itself escaped), then u0000. */
static bool has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 6 <= n; i++) {
        if (s[i] != '\\' || memcmp(s + i + 1, "u0000", 5)) continue;
        size_t run = 0;
        while (run < i && s[i - 1 - run] == '\\')
            run++;
        if (run % 2 == 0) return true;
    }
    return false;
}

bool lpx_srv_parse(lpx_srv_kind kind, const char *body, size_t len, const lpx_gen_defaults *gen,
                   lpx_srv_params *p, lpx_srv_error *err) {
    memset(p, 0, sizeof *p);
    lpx_request_init(&p->req);
    p->kind = kind;
    /* cJSON would take a NUL (raw, or escaped as \u0000) as the end of the
     * string and silently drop the rest, and it ignores text after the value:
     * each would run a request other than the one sent. */
    const char *end = NULL;
    bool nul = (len && memchr(body, 0, len)) || has_nul_escape(body, len);
    /* JSON text is UTF-8 (RFC 8259): other bytes would be echoed into answers */
    size_t bad = nul ? len : lpx_utf8_invalid_at(body, len);
    cJSON *root = nul || bad < len ? NULL : cJSON_ParseWithLengthOpts(body, len, &end, false);
    while (root && end < body + len && strchr(" \t\r\n", *end))
        end++;
    bool ok;
    if (nul)
        ok = lpx_srv_fail(err, 400, BAD, NULL, NULL,
                          "the request body contains a NUL character (\\u0000), which lpx "
                          "cannot carry in a string");
    else if (bad < len)
        ok = lpx_srv_fail(err, 400, BAD, NULL, NULL,
                          "the request body is not valid UTF-8 (byte %zu: 0x%02X)", bad,
                          (unsigned char)body[bad]);
    else if (!root)
        ok = lpx_srv_fail(err, 400, BAD, NULL, NULL, "the request body is not valid JSON");
    else if (end != body + len)
        ok = lpx_srv_fail(err, 400, BAD, NULL, NULL,
                          "the request body has text after the JSON value (at byte %zu)",
                          (size_t)(end - body));
    else if (!cJSON_IsObject(root))
        ok = lpx_srv_fail(err, 400, BAD, NULL, NULL, "the request body must be a JSON object");
    else
        ok = parse_object(root, gen, p, err);
    cJSON_Delete(root);
    if (!ok) lpx_srv_params_free(p);
    return ok;
}
