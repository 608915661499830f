/* Prompts against a model (prompt.h). */
#include "model/prompt.h"

#include "base/error.h"
#include "model/model.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *lpx_chat_role(const char *role) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    if (!role) return NULL;
    if (!strcmp(role, "developer")) return "system";
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        if (!strcmp(role, roles[i])) return roles[i];
    return NULL;
}

/* text's ids (with the tokenizer's BOS/EOS when add_special), bounded by limit. */
static lpx_status text_ids(const lpx_tokenizer *t, const char *text, bool add_special, size_t limit,
                           int32_t **ids, size_t *n) {
    size_t len = strlen(text);
    if (limit && len > lpx_tokenizer_bytes_bound(t, limit)) {
        *n = limit + 1;
        return LPX_OK;
    }
    /* a token covers at least one byte: len + the BOS/EOS is enough, unless stopped */
    size_t cap = (limit && limit + 8 < len ? limit + 8 : len) + 8, need = 0;
    lpx_status st = LPX_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(*ids);
        if (!(*ids = malloc(cap * sizeof **ids))) {
            st = lpx_errorf(LPX_ERR_NOMEM, "prompt: out of memory");
            break;
        }
        st = lpx_tokenize_limit(t, text, len, add_special, true, limit, *ids, cap, &need);
        if (st != LPX_OK || need <= cap) break;
        cap = need;
    }
    if (st != LPX_OK) {
        free(*ids);
        *ids = NULL;
        return st;
    }
    *n = need;
    return LPX_OK;
}

lpx_status lpx_prompt_ids(const lpx_model *m, const char *text, const lpx_chat_message *msgs,
                          size_t n_msgs, size_t limit, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    const lpx_tokenizer *t = m ? m->tok : NULL;
    if (!t) return lpx_errorf(LPX_ERR_UNSUPPORTED, "the model has no tokenizer: send token ids");
    if (!msgs) return text_ids(t, text, true, limit, ids, n);
    char *rendered = NULL;
    LPX_TRY(lpx_chat_render(m, msgs, n_msgs, true, -1, &rendered));
    /* the template writes BOS itself, as transformers assumes */
    lpx_status st = text_ids(t, rendered, false, limit, ids, n);
    lpx_free(rendered);
    return st;
}

lpx_status lpx_prompt_ids_json(const lpx_model *m, const char *messages_json, const char *vars_json,
                               size_t limit, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    const lpx_tokenizer *t = m ? m->tok : NULL;
    if (!t) return lpx_errorf(LPX_ERR_UNSUPPORTED, "the model has no tokenizer: send token ids");
    char *rendered = NULL;
    LPX_TRY(lpx_chat_render_json(m, messages_json, vars_json, true, -1, &rendered));
    lpx_status st = text_ids(t, rendered, false, limit, ids, n);
    lpx_free(rendered);
    return st;
}

bool lpx_prompt_fits(int64_t max_model_len, size_t n_prompt, bool counted, int32_t max_tokens,
                     const char *what, char *msg, size_t cap, const char **param) {
    int64_t L = max_model_len, out = max_tokens > 0 ? max_tokens : 0;
    if ((int64_t)n_prompt < L && (int64_t)n_prompt + out <= L) return true;
    *param = max_tokens > 0 ? "max_tokens" : what;
    /* not counted: n_prompt is one past what is known ("more than" it less one) */
    size_t shown = counted || !n_prompt ? n_prompt : n_prompt - 1;
    const char *more = counted ? "" : "more than ";
    snprintf(msg, cap,
             "This model's maximum context length is %lld tokens. However, you requested %s%lld "
             "tokens (%s%zu in the %s, %lld in the completion). Please reduce the length of the "
             "%s or completion.",
             (long long)L, more, (long long)shown + (long long)out, more, shown, what,
             (long long)out, what);
    return false;
}

bool lpx_request_fits(const lpx_model *m, const lpx_request *r, int64_t max_model_len, char *msg,
                      size_t cap) {
    const char *what = r->messages ? "messages" : "prompt", *param;
    if (r->prompt_ids)
        return lpx_prompt_fits(max_model_len, r->n_prompt_ids, true, r->max_tokens, what, msg, cap,
                               &param);
    int32_t *ids = NULL;
    size_t n = 0;
    size_t limit = max_model_len > 0 ? (size_t)max_model_len : 0;
    bool fits =
        lpx_prompt_ids(m, r->prompt_text, r->messages, r->n_messages, limit, &ids, &n) != LPX_OK ||
        lpx_prompt_fits(max_model_len, n, ids && n <= limit, r->max_tokens, what, msg, cap, &param);
    free(ids);
    return fits;
}
