/* A request's prompt against a model, as every front end checks it (server, batch):
 * the chat roles taken, the prompt's token ids (bounded by what the context can hold),
 * and whether prompt + completion fit the context, with one wording of each error. */
#ifndef LPX_MODEL_PROMPT_H
#define LPX_MODEL_PROMPT_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The roles a chat message may have, for messages. */
#define LPX_CHAT_ROLES "system, user, assistant, tool or developer"

/* role as the template sees it ("developer", OpenAI's new name for the system role,
 * becomes "system"), or NULL when not one of LPX_CHAT_ROLES. */
const char *lpx_chat_role(const char *role);

/* The prompt's ids (*ids: free()): text with the tokenizer's BOS/EOS, or messages
 * through the chat template (which writes BOS itself); special tokens in the text are
 * recognised. limit > 0: past limit tokens *n is more than limit and the rest is left
 * alone; text longer than limit tokens can come from is not tokenized at all (*n is
 * limit + 1, *ids NULL), so an oversized prompt costs its bytes, not GBs. */
lpx_status lpx_prompt_ids(const lpx_model *m, const char *text, const lpx_chat_message *msgs,
                          size_t n_msgs, size_t limit, int32_t **ids, size_t *n);

/* The same for chat messages as JSON (any keys: tool_calls, tool_call_id, ...) and
 * further template variables vars_json (e.g. {"tools": [...]}, may be NULL). */
lpx_status lpx_prompt_ids_json(const lpx_model *m, const char *messages_json, const char *vars_json,
                               size_t limit, int32_t **ids, size_t *n);

/* Whether n_prompt tokens and max_tokens more (<= 0: none asked) fit a context of
 * max_model_len. False with the OpenAI-style message in msg and the parameter to blame
 * in *param ("max_tokens", or what: "prompt" / "messages"); counted false: lpx_prompt_ids
 * stopped counting and the prompt has at least n_prompt tokens ("more than n_prompt - 1"). */
bool lpx_prompt_fits(int64_t max_model_len, size_t n_prompt, bool counted, int32_t max_tokens,
                     const char *what, char *msg, size_t cap, const char **param);

/* lpx_prompt_fits for r (its prompt text or messages tokenized as the engine will, at
 * most max_model_len + 1 counted; ids as given) and its max_tokens: what `lpx run` and
 * `lpx chat -n` check before any work. A prompt that does not tokenize passes (the
 * engine's submit gives that error). */
bool lpx_request_fits(const lpx_model *m, const lpx_request *r, int64_t max_model_len, char *msg,
                      size_t cap);

#endif
