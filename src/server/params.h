/* Request bodies of the generation endpoints, parsed and validated into
 * engine parameters. Everything a client can get wrong is caught here and
 * reported as an OpenAI error object (never a 5xx). Fuzzed by
 * fuzz/fuzz_request.c. */
#ifndef LPX_SERVER_PARAMS_H
#define LPX_SERVER_PARAMS_H

#include "lpx.h"
#include "model/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LPX_SRV_MAX_N 16     /* choices per request */
#define LPX_SRV_MAX_STOPS 16 /* stop strings per request */

/* An OpenAI error object plus the HTTP status that carries it. */
typedef struct lpx_srv_error {
    int status;
    const char *type; /* "invalid_request_error", ... */
    const char *code; /* NULL or "context_length_exceeded", ... */
    char param[48];   /* "" when none */
    char message[512];
} lpx_srv_error;

/* Fills e and returns false, so validators can `return srv_fail(...)`. */
bool lpx_srv_fail(lpx_srv_error *e, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

typedef enum lpx_srv_kind {
    LPX_SRV_COMPLETION = 0, /* POST /v1/completions */
    LPX_SRV_CHAT = 1,       /* POST /v1/chat/completions */
    LPX_SRV_GENERATE = 2,   /* POST /generate */
    LPX_SRV_TOKENIZE = 3,   /* POST /tokenize */
    LPX_SRV_DETOKENIZE = 4, /* POST /detokenize */
} lpx_srv_kind;

typedef struct lpx_srv_params {
    lpx_srv_kind kind;
    char *model;         /* requested model id, NULL when absent */
    char *prompt;        /* text prompt, or NULL */
    int32_t *prompt_ids; /* [n_prompt_ids] token prompt (completions, detokenize) */
    size_t n_prompt_ids;
    lpx_chat_message *messages; /* [n_messages], strings owned */
    size_t n_messages;
    lpx_request req; /* sampling, max_tokens (-1: not given), stop, ignore_eos */
    char *stop[LPX_SRV_MAX_STOPS];
    int32_t n; /* choices */
    bool stream, include_usage;
    bool logprobs; /* return logprobs */
    int32_t top_n; /* alternatives per token the client asked for (0..20) */
    bool seed_given;
    bool add_special;           /* tokenize: add BOS/EOS (default true) */
    bool add_generation_prompt; /* tokenize with messages (default true) */
} lpx_srv_params;

/* Parses body (not NUL-terminated) for endpoint kind. Sampling fields the
 * request leaves out take the model's generation defaults (gen may be NULL).
 * On failure fills err and returns false; p is then already freed. */
bool lpx_srv_parse(lpx_srv_kind kind, const char *body, size_t len, const lpx_gen_defaults *gen,
                   lpx_srv_params *p, lpx_srv_error *err);
void lpx_srv_params_free(lpx_srv_params *p);

#endif
