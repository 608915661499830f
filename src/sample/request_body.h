/* The numeric fields of an OpenAI request body (completions and chat) read into a
 * request: sampling, output length, choices, logprobs, each with its range. One reading
 * for lpx serve and lpx batch, so both take the same bodies and refuse the others with
 * the same parameter and message. */
#ifndef LPX_SAMPLE_REQUEST_BODY_H
#define LPX_SAMPLE_REQUEST_BODY_H

#include "lpx.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#define LPX_BODY_MAX_N 16 /* n: choices per prompt */

/* What a refused field was: its name and the message (the server's 400 body). */
typedef struct lpx_body_error {
    char param[48];
    char message[256];
} lpx_body_error;

/* A field absent or JSON null is not given (*given false, *out unchanged). Numbers
 * must be finite and in [lo, hi] ((lo, hi] when lo_open); integers also whole. */
bool lpx_body_num(const cJSON *o, const char *name, double lo, double hi, bool lo_open, double *out,
                  bool *given, lpx_body_error *e);
bool lpx_body_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out,
                  bool *given, lpx_body_error *e);
bool lpx_body_bool(const cJSON *o, const char *name, bool *out, lpx_body_error *e);

/* temperature, top_p, min_p, top_k, the three penalties and seed into s: the fields
 * given replace what s holds (the caller's defaults); *seed_given says whether seed was. */
bool lpx_body_sampling(const cJSON *o, lpx_sampling_params *s, bool *seed_given, lpx_body_error *e);
/* logprobs: chat's boolean with top_logprobs 0..20, completions' count 0..20. *on: asked
 * for; *top_n: the alternatives a token wants. */
bool lpx_body_logprobs(const cJSON *o, bool chat, bool *on, int32_t *top_n, lpx_body_error *e);
/* vLLM's prompt_logprobs: 0..20 alternatives at each prompt token besides the token
 * itself; *n is -1 when not given. Not with stream (vLLM refuses it too). */
bool lpx_body_prompt_logprobs(const cJSON *o, int32_t *n, lpx_body_error *e);
/* The output length field: max_tokens (chat: or max_completion_tokens when given;
 * name overrides both, e.g. /generate's max_new_tokens), 1..INT32_MAX; and n,
 * 1..LPX_BODY_MAX_N (1 when absent). */
bool lpx_body_max_tokens(const cJSON *o, bool chat, const char *name, int32_t *out, bool *given,
                         lpx_body_error *e);
bool lpx_body_n(const cJSON *o, int32_t *n, lpx_body_error *e);

#endif
