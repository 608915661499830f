/* Public entry points of the chat template renderer: build the variables that
 * transformers' apply_chat_template passes (messages, tools = none,
 * documents = none, add_generation_prompt, special tokens, extra kwargs),
 * then lex, parse and run the template inside one failure point. */
#include "template/template_int.h"

#include <stdlib.h>
#include <string.h>

lpx_template_opts lpx_template_opts_default(void) {
    lpx_template_opts o = {.enable_thinking = -1};
    return o;
}

static tpl_val cstr_or_none(tpl_ctx *c, const char *s, const char *what) {
    if (!s) return tv_none();
    size_t n = strlen(s);
    if (!tpl_utf8_valid(s, n))
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template input: %s is not valid UTF-8", what);
    return tv_str(c, s, n);
}

/* transformers' _alias_reasoning_fields: the first non-null of
 * reasoning_content, thinking, reasoning becomes
 * {"thinking": r, **message, "reasoning_content": r}. */
static tpl_val alias_reasoning(tpl_ctx *c, tpl_val msg) {
    if (msg.t != TV_DICT) return msg;
    static const char *const fields[] = {"reasoning_content", "thinking", "reasoning"};
    const tpl_val *r = NULL;
    for (size_t i = 0; i < 3 && !r; i++) {
        const tpl_val *v = tpl_dict_get_str(msg.u.d, fields[i]);
        if (v && v->t != TV_NONE) r = v;
    }
    if (!r) return msg;
    tpl_val out = tv_dict(c, TV_DICT);
    tpl_dict_set(c, out.u.d, tv_cstr(c, "thinking"), *r);
    for (size_t i = 0; i < msg.u.d->n; i++)
        tpl_dict_set(c, out.u.d, msg.u.d->k[i], msg.u.d->v[i]);
    tpl_dict_set(c, out.u.d, tv_cstr(c, "reasoning_content"), *r);
    return out;
}

static void render_body(tpl_ctx *c, const char *tmpl, tpl_val messages,
                        const lpx_template_opts *o) {
    size_t n = strlen(tmpl);
    if (!tpl_utf8_valid(tmpl, n))
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template is not valid UTF-8");
    tpl_toks toks = {0};
    tpl_lex(c, tmpl, n, &toks);
    c->depth = 0;
    tpl_body body = tpl_parse(c, &toks);
    c->depth = 0;

    tpl_scope *g = tpl_scope_new(c, NULL);
    tpl_scope_set(c, g, "messages", messages);
    tpl_scope_set(c, g, "tools", tv_none());
    tpl_scope_set(c, g, "documents", tv_none());
    tpl_scope_set(c, g, "add_generation_prompt", tv_bool(o->add_generation_prompt));
    if (o->bos_token) tpl_scope_set(c, g, "bos_token", cstr_or_none(c, o->bos_token, "bos_token"));
    if (o->eos_token) tpl_scope_set(c, g, "eos_token", cstr_or_none(c, o->eos_token, "eos_token"));
    if (o->enable_thinking >= 0)
        tpl_scope_set(c, g, "enable_thinking", tv_bool(o->enable_thinking != 0));
    if (o->date_string)
        tpl_scope_set(c, g, "date_string", cstr_or_none(c, o->date_string, "date_string"));
    if (o->extra_json) {
        tpl_val extra = tpl_from_json(c, o->extra_json, "extra variables");
        if (extra.t != TV_DICT)
            tpl_fail(c, LPX_ERR_INVALID_ARG,
                     "chat template input: extra variables must be a JSON object");
        for (size_t i = 0; i < extra.u.d->n; i++)
            tpl_scope_set(c, g, extra.u.d->k[i].u.s->p, extra.u.d->v[i]);
    }
    /* A top-level {% set %} writes here, shadowing (not changing) the inputs. */
    tpl_exec(c, &body, tpl_scope_new(c, g));
}

static size_t input_size(const char *tmpl, const lpx_chat_message *msgs, size_t n_msgs,
                         const char *json, const lpx_template_opts *o) {
    size_t total =
        strlen(tmpl) + (json ? strlen(json) : 0) + (o->extra_json ? strlen(o->extra_json) : 0);
    for (size_t i = 0; i < n_msgs; i++)
        total += (msgs[i].role ? strlen(msgs[i].role) : 0) +
                 (msgs[i].content ? strlen(msgs[i].content) : 0) + 16;
    return total;
}

static size_t cap_for(size_t base, size_t per, size_t input) {
    size_t extra;
    if (__builtin_mul_overflow(per, input, &extra) || __builtin_add_overflow(base, extra, &extra))
        return SIZE_MAX / 2;
    return extra;
}

/* What one render is asked to do. */
typedef struct job {
    const char *tmpl;
    const lpx_chat_message *msgs;
    size_t n_msgs;
    const char *messages_json;
    const lpx_template_opts *o;
} job;

static void run(tpl_ctx *c, const job *j) {
    tpl_val messages;
    if (j->messages_json) {
        messages = tpl_from_json(c, j->messages_json, "messages");
        if (messages.t != TV_LIST)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template input: messages must be a JSON array");
        for (size_t i = 0; i < messages.u.l->n; i++)
            messages.u.l->v[i] = alias_reasoning(c, messages.u.l->v[i]);
    } else {
        messages = tv_list(c, j->n_msgs);
        for (size_t i = 0; i < j->n_msgs; i++) {
            const lpx_chat_message *m = &j->msgs[i];
            if (!m->role)
                tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template input: message %zu has no role", i);
            tpl_val d = tv_dict(c, TV_DICT);
            tpl_dict_set(c, d.u.d, tv_cstr(c, "role"), cstr_or_none(c, m->role, "a role"));
            tpl_dict_set(c, d.u.d, tv_cstr(c, "content"), cstr_or_none(c, m->content, "a message"));
            tpl_list_push(c, messages.u.l, d);
        }
    }
    render_body(c, j->tmpl, messages, j->o);
}

/* The one failure point: tpl_fail anywhere below lands here. */
static lpx_status run_guarded(tpl_ctx *c, const job *j) {
    int rc = setjmp(c->fail);
    if (rc) return (lpx_status)rc;
    run(c, j);
    return LPX_OK;
}

static lpx_status render(const job *j, char **out) {
    if (!out) return lpx_errorf(LPX_ERR_INVALID_ARG, "chat template: out is NULL");
    *out = NULL;
    if (!j->tmpl) return lpx_errorf(LPX_ERR_INVALID_ARG, "chat template: template is NULL");
    if (!j->msgs && j->n_msgs)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "chat template: messages are NULL");
    tpl_ctx *c = calloc(1, sizeof *c);
    if (!c) return lpx_errorf(LPX_ERR_NOMEM, "chat template: out of memory");
    size_t input = input_size(j->tmpl, j->msgs, j->n_msgs, j->messages_json, j->o);
    c->mem_cap = cap_for(TPL_MEM_BASE, TPL_MEM_PER_INPUT, input);
    c->out_max = cap_for(TPL_OUT_BASE, TPL_OUT_PER_INPUT, input);
    lpx_status s = run_guarded(c, j);
    if (s == LPX_OK) {
        *out = c->out ? c->out : calloc(1, 1);
        c->out = NULL;
        if (!*out) s = lpx_errorf(LPX_ERR_NOMEM, "chat template: out of memory");
    }
    free(c->out);
    tpl_arena_free(c);
    free(c);
    return s;
}

static const lpx_template_opts *opts_or_default(const lpx_template_opts *o) {
    static const lpx_template_opts defaults = {.enable_thinking = -1};
    return o ? o : &defaults;
}

lpx_status lpx_template_render(const char *tmpl, const lpx_chat_message *msgs, size_t n_msgs,
                               const lpx_template_opts *opts, char **out) {
    job j = {.tmpl = tmpl, .msgs = msgs, .n_msgs = n_msgs, .o = opts_or_default(opts)};
    return render(&j, out);
}

lpx_status lpx_template_render_json(const char *tmpl, const char *messages_json,
                                    const lpx_template_opts *opts, char **out) {
    if (!messages_json) return lpx_errorf(LPX_ERR_INVALID_ARG, "chat template: messages are NULL");
    job j = {.tmpl = tmpl, .messages_json = messages_json, .o = opts_or_default(opts)};
    return render(&j, out);
}
