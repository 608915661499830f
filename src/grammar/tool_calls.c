/* Tool calls: the request's tools, the messages for the template, the formats and the
 * forcing grammar's text (tool_calls.h; the parser is tool_parse.c). */
#include "grammar/tool_calls.h"

#include "base/error.h"
#include "grammar/grammar.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lpx_tool_format lpx_tool_format_of(const char *tmpl) {
    if (!tmpl) return LPX_TOOLS_NONE;
    /* Qwen2.5 / Qwen3 (and other Hermes-style templates) spell out the tag; Llama
     * 3.1-3.3 ask for {"name": function name, "parameters": ...} in their header
     * blocks. */
    if (strstr(tmpl, "<tool_call>")) return LPX_TOOLS_HERMES;
    /* vLLM's Llama 3.2 / 4 pythonic templates (and Gemma 3's tool prompt) show the call
     * list they want; checked before the Llama header blocks, which they also have. */
    if (strstr(tmpl, "[func_name1(")) return LPX_TOOLS_PYTHONIC;
    /* Mistral's v0.3 template lists the tools and writes an assistant's calls */
    if (strstr(tmpl, "[AVAILABLE_TOOLS]") && strstr(tmpl, "[TOOL_CALLS]")) return LPX_TOOLS_MISTRAL;
    if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "\"parameters\"") &&
        strstr(tmpl, "tools"))
        return LPX_TOOLS_LLAMA3;
    return LPX_TOOLS_NONE;
}

const char *lpx_tool_format_name(lpx_tool_format f) {
    return f == LPX_TOOLS_HERMES     ? "hermes"
           : f == LPX_TOOLS_LLAMA3   ? "llama3"
           : f == LPX_TOOLS_PYTHONIC ? "pythonic"
           : f == LPX_TOOLS_MISTRAL  ? "mistral"
                                     : "none";
}

void lpx_tool_call_id(lpx_tool_format f, const char *prefix, size_t i, char *out, size_t cap) {
    if (f != LPX_TOOLS_MISTRAL) {
        snprintf(out, cap, "%.80s%02zx", prefix, i & 0xff);
        return;
    }
    /* FNV-1a of the unique id, in base 62: 62^9 ids, so two of one run meet with a
     * chance of about n^2 / 2^54 */
    char full[96];
    snprintf(full, sizeof full, "%.80s%02zx", prefix, i & 0xff);
    uint64_t h = 14695981039346656037ull;
    for (const char *q = full; *q; q++)
        h = (h ^ (unsigned char)*q) * 1099511628211ull;
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    char id[10];
    for (int k = 0; k < 9; k++, h /= 62)
        id[k] = digits[h % 62];
    id[9] = '\0';
    snprintf(out, cap, "%s", id);
}

bool lpx_tools_check_format(const lpx_tools *t, lpx_tool_format f, char *msg, size_t cap,
                            const char **param) {
    if (!t->n_tools) return true;
    if (f == LPX_TOOLS_NONE) {
        *param = "tools";
        snprintf(msg, cap,
                 "'tools': this model's chat template has no tool-call format (lpx knows the "
                 "Qwen <tool_call>, the Llama 3.x JSON, Mistral's [TOOL_CALLS] and the "
                 "pythonic [f(x=1)] formats)");
        return false;
    }
    if (f == LPX_TOOLS_PYTHONIC &&
        (t->choice == LPX_TOOL_CHOICE_REQUIRED || t->choice == LPX_TOOL_CHOICE_NAMED)) {
        *param = "tool_choice";
        snprintf(msg, cap,
                 "'tool_choice': a forced call (\"required\" or a named function) is not "
                 "supported with this model's pythonic tool-call format (use \"auto\")");
        return false;
    }
    return true;
}

void lpx_tools_free(lpx_tools *t) {
    free(t->tools_json);
    memset(t, 0, sizeof *t);
}

bool lpx_tools_parsed(const lpx_tools *t) {
    return t->n_tools > 0 && t->choice != LPX_TOOL_CHOICE_NONE;
}

static bool fail(lpx_tools *t, char *msg, size_t cap, const char **param, const char *which,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static bool fail(lpx_tools *t, char *msg, size_t cap, const char **param, const char *which,
                 const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    *param = which;
    lpx_tools_free(t);
    return false;
}

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* OpenAI's rule for function names. */
static bool good_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static const cJSON *tool_fn(const cJSON *tool) {
    return cJSON_GetObjectItemCaseSensitive(tool, "function");
}

static const char *tool_name(const cJSON *tool) {
    return cJSON_GetObjectItemCaseSensitive(tool_fn(tool), "name")->valuestring;
}

/* One entry of tools; false with the message in msg. */
static bool check_tool(const cJSON *x, int i, const cJSON *tools, char *msg, size_t cap) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(x, "type");
    if (!cJSON_IsObject(x) || !cJSON_IsString(type))
        return snprintf(msg, cap,
                        "tools[%d]: expected {\"type\": \"function\", \"function\": {...}}", i),
               false;
    if (strcmp(type->valuestring, "function"))
        return snprintf(msg, cap,
                        "tools[%d].type: '%.40s' is not supported (only \"function\" tools are)", i,
                        type->valuestring),
               false;
    for (const cJSON *k = x->child; k; k = k->next)
        if (strcmp(k->string, "type") && strcmp(k->string, "function"))
            return snprintf(msg, cap, "tools[%d]: field '%.40s' is not supported", i, k->string),
                   false;
    const cJSON *fn = tool_fn(x);
    if (!cJSON_IsObject(fn))
        return snprintf(msg, cap, "tools[%d].function: expected an object with a \"name\"", i),
               false;
    for (const cJSON *k = fn->child; k; k = k->next) {
        const char *f = k->string;
        if (!strcmp(f, "name") || !strcmp(f, "description")) {
            if (!cJSON_IsString(k))
                return snprintf(msg, cap, "tools[%d].function.%s: expected a string", i, f), false;
        } else if (!strcmp(f, "strict")) {
            if (!cJSON_IsBool(k) && !cJSON_IsNull(k))
                return snprintf(msg, cap, "tools[%d].function.strict: expected a boolean", i),
                       false;
        } else if (!strcmp(f, "parameters")) {
            if (!cJSON_IsObject(k))
                return snprintf(msg, cap,
                                "tools[%d].function.parameters: expected a JSON Schema object", i),
                       false;
        } else {
            return snprintf(msg, cap, "tools[%d].function: field '%.40s' is not supported", i, f),
                   false;
        }
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!name) return snprintf(msg, cap, "tools[%d].function.name: missing", i), false;
    if (!good_name(name->valuestring))
        return snprintf(msg, cap,
                        "tools[%d].function.name: '%.64s' must be 1 to 64 of a-z, A-Z, 0-9, _ "
                        "and -",
                        i, name->valuestring),
               false;
    for (const cJSON *y = tools->child; y != x; y = y->next)
        if (!strcmp(tool_name(y), name->valuestring))
            return snprintf(msg, cap, "tools[%d].function.name: '%s' is given twice", i,
                            name->valuestring),
                   false;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    if (params) {
        char path[64], *text = cJSON_PrintUnformatted(params);
        if (!text) return snprintf(msg, cap, "tools: out of memory"), false;
        snprintf(path, sizeof path, "tools[%d].function.parameters", i);
        lpx_grammar *g = NULL;
        lpx_status st = lpx_grammar_from_schema(text, strlen(text), path, &g);
        free(text);
        lpx_grammar_free(g);
        if (st != LPX_OK) return snprintf(msg, cap, "%s", lpx_last_error()), false;
    }
    return true;
}

bool lpx_tools_parse(const cJSON *body, lpx_tools *t, char *msg, size_t cap, const char **param) {
    memset(t, 0, sizeof *t);
    t->parallel = true;
    const cJSON *tools = field(body, "tools");
    if (tools && !cJSON_IsArray(tools))
        return fail(t, msg, cap, param, "tools", "'tools' must be a list of function tools");
    int n = tools ? cJSON_GetArraySize(tools) : 0;
    if (n > LPX_TOOLS_MAX)
        return fail(t, msg, cap, param, "tools", "'tools' has %d tools: at most %d", n,
                    LPX_TOOLS_MAX);
    int i = 0;
    for (const cJSON *x = tools ? tools->child : NULL; x; x = x->next, i++)
        if (!check_tool(x, i, tools, msg, cap)) {
            *param = "tools";
            lpx_tools_free(t);
            return false;
        }
    t->n_tools = n;
    if (n && !(t->tools_json = cJSON_PrintUnformatted(tools)))
        return fail(t, msg, cap, param, "tools", "tools: out of memory");

    const cJSON *pv = field(body, "parallel_tool_calls");
    if (pv && !cJSON_IsBool(pv))
        return fail(t, msg, cap, param, "parallel_tool_calls",
                    "'parallel_tool_calls' must be a boolean");
    if (pv) t->parallel = cJSON_IsTrue(pv);

    const cJSON *c = field(body, "tool_choice");
    t->choice = n ? LPX_TOOL_CHOICE_AUTO : LPX_TOOL_CHOICE_NONE;
    if (!c) return true;
    if (cJSON_IsString(c)) {
        const char *s = c->valuestring;
        if (!strcmp(s, "none"))
            t->choice = LPX_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "auto"))
            t->choice = n ? LPX_TOOL_CHOICE_AUTO : LPX_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "required"))
            t->choice = LPX_TOOL_CHOICE_REQUIRED;
        else
            return fail(t, msg, cap, param, "tool_choice",
                        "'tool_choice' '%.40s' is not one of \"none\", \"auto\", \"required\" or "
                        "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                        s);
        if (t->choice == LPX_TOOL_CHOICE_REQUIRED && !n)
            return fail(t, msg, cap, param, "tool_choice",
                        "'tool_choice' \"required\" needs 'tools'");
        return true;
    }
    const cJSON *type = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "type") : NULL;
    const cJSON *fn = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "function") : NULL;
    const cJSON *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return fail(t, msg, cap, param, "tool_choice",
                    "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                    "\"function\", \"function\": {\"name\": ...}}");
    i = 0;
    for (const cJSON *x = tools ? tools->child : NULL; x; x = x->next, i++)
        if (!strcmp(tool_name(x), name->valuestring)) {
            t->choice = LPX_TOOL_CHOICE_NAMED;
            t->named = i;
            return true;
        }
    return fail(t, msg, cap, param, "tool_choice",
                "'tool_choice' names function '%.64s', which is not in 'tools'", name->valuestring);
}

bool lpx_tool_rules_of(const lpx_tools *t, lpx_tool_format f, lpx_tool_rules *out) {
    *out = lpx_tool_rules_any(LPX_TOOLS_NONE);
    if (!lpx_tools_parsed(t) || f == LPX_TOOLS_NONE) return true;
    cJSON *tools = cJSON_Parse(t->tools_json); /* checked by lpx_tools_parse */
    size_t n = 1;
    for (const cJSON *x = tools ? tools->child : NULL; x; x = x->next)
        n += strlen(tool_name(x)) + 1; /* names are at most 64 bytes, tools 128 */
    char *names = tools ? malloc(n) : NULL, *q = names;
    for (const cJSON *x = names ? tools->child : NULL; x; x = x->next) {
        size_t k = strlen(tool_name(x)) + 1;
        memcpy(q, tool_name(x), k);
        q += k;
    }
    if (names) *q = '\0';
    cJSON_Delete(tools);
    if (!names) return false;
    *out = (lpx_tool_rules){.f = f, .names = names, .single = !t->parallel};
    return true;
}

void lpx_tool_rules_free(lpx_tool_rules *r) {
    free(r->names);
    *r = lpx_tool_rules_any(LPX_TOOLS_NONE);
}

char *lpx_tools_template_vars(const lpx_tools *t) {
    if (!t->tools_json) return NULL;
    size_t n = strlen(t->tools_json);
    char *s = malloc(n + 16);
    if (s) snprintf(s, n + 16, "{\"tools\": %s}", t->tools_json);
    return s;
}

char *lpx_tools_grammar_text(const lpx_tools *t, lpx_tool_format f) {
    if (t->choice != LPX_TOOL_CHOICE_REQUIRED && t->choice != LPX_TOOL_CHOICE_NAMED) return NULL;
    if (!t->tools_json || f == LPX_TOOLS_NONE || f == LPX_TOOLS_PYTHONIC) return NULL;
    cJSON *tools = cJSON_Parse(t->tools_json), *o = cJSON_CreateObject();
    cJSON *fns = cJSON_AddArrayToObject(o, "functions");
    cJSON_AddStringToObject(o, "format", lpx_tool_format_name(f));
    /* Llama 3.x templates take one call a turn. */
    cJSON_AddBoolToObject(o, "parallel",
                          t->parallel && t->choice == LPX_TOOL_CHOICE_REQUIRED &&
                              f != LPX_TOOLS_LLAMA3);
    int i = 0;
    for (const cJSON *x = tools ? tools->child : NULL; x && fns; x = x->next, i++) {
        if (t->choice == LPX_TOOL_CHOICE_NAMED && i != t->named) continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", tool_name(x));
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(tool_fn(x), "parameters");
        /* OpenAI: leaving parameters out defines a function of no arguments */
        cJSON *ps = p ? cJSON_Duplicate(p, 1)
                      : cJSON_Parse("{\"type\": \"object\", \"additionalProperties\": false}");
        cJSON_AddItemToObject(e, "parameters", ps);
        cJSON_AddItemToArray(fns, e);
    }
    char *s = tools && fns ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    cJSON_Delete(tools);
    return s;
}

/* Content text: a string, or text parts joined (the callers checked the parts). */
static cJSON *content_of(const cJSON *c) {
    if (cJSON_IsString(c)) return cJSON_CreateString(c->valuestring);
    if (!cJSON_IsArray(c)) return cJSON_CreateString("");
    size_t n = 0;
    for (const cJSON *p = c->child; p; p = p->next) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        n += cJSON_IsString(x) ? strlen(x->valuestring) : 0;
    }
    char *s = malloc(n + 1);
    if (!s) return NULL;
    s[0] = '\0';
    for (const cJSON *p = c->child; p; p = p->next) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsString(x)) strcat(s, x->valuestring);
    }
    cJSON *r = cJSON_CreateString(s);
    free(s);
    return r;
}

static const char *role_of(const char *r) {
    return !strcmp(r, "developer") ? "system" : r;
}

/* An assistant's tool_calls as the templates take them; NULL with msg set. */
static cJSON *tool_calls_of(const cJSON *tc, int i, char *msg, size_t cap) {
    if (!cJSON_IsArray(tc))
        return snprintf(msg, cap, "messages[%d].tool_calls must be a list", i), NULL;
    cJSON *out = cJSON_CreateArray();
    int k = 0;
    for (const cJSON *c = tc->child; c && out; c = c->next, k++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
        if (!cJSON_IsObject(c) || !cJSON_IsObject(fn) || !cJSON_IsString(name) ||
            (id && !cJSON_IsString(id)) || (type && !cJSON_IsString(type))) {
            snprintf(msg, cap,
                     "messages[%d].tool_calls[%d] must be {\"id\", \"type\": \"function\", "
                     "\"function\": {\"name\", \"arguments\"}}",
                     i, k);
            cJSON_Delete(out);
            return NULL;
        }
        cJSON *a = NULL;
        if (cJSON_IsString(args)) {
            a = cJSON_Parse(args->valuestring);
            if (!a) {
                snprintf(msg, cap,
                         "messages[%d].tool_calls[%d].function.arguments is not valid JSON", i, k);
                cJSON_Delete(out);
                return NULL;
            }
        } else {
            a = args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject();
        }
        /* the function's fields in the client's order (a template that prints the object,
         * as Mistral's does with tojson, prints them so, as transformers does) */
        cJSON *e = cJSON_CreateObject(), *f = cJSON_CreateObject();
        if (id) cJSON_AddStringToObject(e, "id", id->valuestring);
        cJSON_AddStringToObject(e, "type", type ? type->valuestring : "function");
        for (const cJSON *x = fn->child; x; x = x->next)
            cJSON_AddItemToObject(f, x->string, x == args ? a : cJSON_Duplicate(x, 1));
        if (!args) cJSON_AddItemToObject(f, "arguments", a);
        cJSON_AddItemToObject(e, "function", f);
        cJSON_AddItemToArray(out, e);
    }
    return out;
}

bool lpx_chat_messages_json(const cJSON *messages, char **out, char *msg, size_t cap) {
    *out = NULL;
    cJSON *arr = cJSON_CreateArray();
    int i = 0;
    bool ok = arr != NULL;
    for (const cJSON *m = messages ? messages->child : NULL; m && ok; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_IsString(role);
        if (ok) {
            cJSON_AddItemToArray(arr, o);
            cJSON_AddStringToObject(o, "role", role_of(role->valuestring));
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
            cJSON *ct = content_of(c);
            ok = ct != NULL;
            if (ok) cJSON_AddItemToObject(o, "content", ct);
        } else {
            cJSON_Delete(o);
            snprintf(msg, cap, "messages[%d] must be an object with a role", i);
            break;
        }
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (ok && tc && !cJSON_IsNull(tc)) {
            cJSON *calls = tool_calls_of(tc, i, msg, cap);
            ok = calls != NULL;
            if (ok) cJSON_AddItemToObject(o, "tool_calls", calls);
        }
        static const char *const strs[] = {"tool_call_id", "name"};
        for (size_t k = 0; ok && k < sizeof strs / sizeof *strs; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, strs[k]);
            if (!v || cJSON_IsNull(v)) continue;
            if (!cJSON_IsString(v)) {
                snprintf(msg, cap, "messages[%d].%s must be a string", i, strs[k]);
                ok = false;
            } else {
                cJSON_AddStringToObject(o, strs[k], v->valuestring);
            }
        }
    }
    if (ok && !(*out = cJSON_PrintUnformatted(arr))) {
        snprintf(msg, cap, "messages: out of memory");
        ok = false;
    }
    cJSON_Delete(arr);
    return ok;
}
