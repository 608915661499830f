/* lpx_chat_render: a model's own chat template, rendered with the texts of its
 * BOS and EOS tokens as bos_token / eos_token (what transformers passes from
 * the tokenizer's special tokens). */
#include "base/error.h"
#include "model/model.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"

static const char *token_text(const lpx_tokenizer *t, int32_t id) {
    return id >= 0 ? lpx_token_text(t, id) : NULL;
}

/* Options from the model; fails when it has no template. */
static lpx_status model_opts(const lpx_model *m, bool add_generation_prompt, int enable_thinking,
                             char **out, lpx_template_opts *o) {
    if (out) *out = NULL;
    if (!m || !out) return lpx_errorf(LPX_ERR_INVALID_ARG, "lpx_chat_render: model or out is NULL");
    if (!m->chat_template)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "model has no chat template (%s)", m->path);
    *o = lpx_template_opts_default();
    o->add_generation_prompt = add_generation_prompt;
    o->enable_thinking = enable_thinking < 0 ? -1 : enable_thinking != 0;
    if (m->tok) {
        o->bos_token = token_text(m->tok, lpx_tokenizer_bos(m->tok));
        o->eos_token = token_text(m->tok, lpx_tokenizer_eos(m->tok));
    }
    return LPX_OK;
}

lpx_status lpx_chat_render(const lpx_model *m, const lpx_chat_message *msgs, size_t n_msgs,
                           bool add_generation_prompt, int enable_thinking, char **out) {
    lpx_template_opts o;
    LPX_TRY(model_opts(m, add_generation_prompt, enable_thinking, out, &o));
    return lpx_template_render(m->chat_template, msgs, n_msgs, &o, out);
}

lpx_status lpx_chat_render_json(const lpx_model *m, const char *messages_json,
                                const char *extra_json, bool add_generation_prompt,
                                int enable_thinking, char **out) {
    lpx_template_opts o;
    LPX_TRY(model_opts(m, add_generation_prompt, enable_thinking, out, &o));
    o.extra_json = extra_json;
    return lpx_template_render_json(m->chat_template, messages_json, &o, out);
}
