/* Request bodies of the generation endpoints, parsed and validated into
 * engine parameters. Everything a client can get wrong is caught here and
 * reported as an OpenAI error object (never a 5xx). Fuzzed by
 * fuzz/fuzz_request.c. */
#ifndef LPX_SERVER_PARAMS_H
#define LPX_SERVER_PARAMS_H

#include "grammar/tool_calls.h"
#include "lpx.h"
#include "model/model.h"
#include "sample/request_body.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LPX_SRV_MAX_N LPX_BODY_MAX_N /* n: choices per prompt */
#define LPX_SRV_MAX_PROMPTS 16       /* prompts in one /v1/completions request */
#define LPX_SRV_MAX_CHOICES 64       /* prompts * n */
#define LPX_SRV_MAX_STOPS 16         /* stop strings per request */
#define LPX_SRV_MAX_LOGIT_BIAS 300   /* logit_bias entries (OpenAI's limit) */

/* An OpenAI error object plus the HTTP status that carries it. */
typedef struct lpx_srv_error {
    int status;
    const char *type; /* "invalid_request_error", ... */
    const char *code; /* NULL or "context_length_exceeded", ... */
    char param[48];   /* "" when none */
    char message[512];
} lpx_srv_error;

/* Fills e and returns false, so validators can `return srv_fail(...)`. The
 * message and param are made valid UTF-8 (client text in them may not be):
 * an invalid byte becomes U+FFFD, so strict JSON clients can decode it. */
bool lpx_srv_fail(lpx_srv_error *e, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

typedef enum lpx_srv_kind {
    LPX_SRV_COMPLETION = 0, /* POST /v1/completions */
    LPX_SRV_CHAT = 1,       /* POST /v1/chat/completions */
    LPX_SRV_GENERATE = 2,   /* POST /generate */
    LPX_SRV_TOKENIZE = 3,   /* POST /tokenize */
    LPX_SRV_DETOKENIZE = 4, /* POST /detokenize */
} lpx_srv_kind;

/* One prompt: text, or token ids (completions, detokenize). */
typedef struct lpx_srv_prompt {
    char *text;   /* or NULL */
    int32_t *ids; /* [n_ids] */
    size_t n_ids;
} lpx_srv_prompt;

typedef struct lpx_srv_params {
    lpx_srv_kind kind;
    char *model; /* requested model id, NULL when absent */
    /* [n_prompts] the prompts (completions: one choice set each; the other
     * endpoints take one); 0 for chat messages. */
    lpx_srv_prompt prompts[LPX_SRV_MAX_PROMPTS];
    size_t n_prompts;
    lpx_chat_message *messages; /* [n_messages], strings owned */
    size_t n_messages;
    char *messages_json; /* the messages as the chat template takes them (tool calls too) */
    lpx_tools tools;     /* tools, tool_choice, parallel_tool_calls */
    /* Set by lpx_srv_bind_model: the model's tool-call format when the output is parsed
     * for calls (NONE otherwise), and the forcing grammar's text (req.json_schema). */
    lpx_tool_format tool_format;
    char *tool_grammar;
    lpx_request req; /* sampling, max_tokens (-1: not given), stop, ignore_eos */
    char *stop[LPX_SRV_MAX_STOPS];
    char *json_schema;          /* response_format json_schema: its schema text; req.json_schema */
    lpx_logit_bias *logit_bias; /* [req.sampling.n_logit_bias], req.sampling points here */
    int32_t n;                  /* choices per prompt */
    bool stream, include_usage;
    bool continuous_usage;   /* stream_options.continuous_usage_stats: usage in every chunk */
    bool echo;               /* completions: the prompt text before the output */
    char *chat_echo;         /* chat with echo: the last message's content when it is the
                                assistant's (vLLM's echo), else NULL */
    bool logprobs;           /* return logprobs */
    int32_t top_n;           /* alternatives per token the client asked for (0..20) */
    int32_t prompt_logprobs; /* vLLM's: alternatives at each prompt token, -1 not asked */
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
/* Prompts (or messages: 1) of p, and the choices of the request. */
size_t lpx_srv_n_prompts(const lpx_srv_params *p);
/* What depends on the model: its tool-call format (tools for a template without one
 * are a 400) and, for tool_choice "required" or a named function, the grammar that
 * forces the calls. */
bool lpx_srv_bind_model(const lpx_model *m, lpx_srv_params *p, lpx_srv_error *err);
/* Checks the token ids of p (prompt ids, logit_bias) against the vocabulary. */
bool lpx_srv_check_vocab(const lpx_srv_params *p, int32_t vocab, lpx_srv_error *err);

#endif
