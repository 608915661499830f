/* The engine bridge: one HTTP generation request becomes a job of n engine
 * requests (its choices). Engine events arrive on the engine thread and are
 * gathered here: as SSE chunks in `out` for a stream, as text and logprobs per
 * choice otherwise. The HTTP side never blocks on a job: it parks its connection
 * (`waiting`) and the next event that brings something wakes it (`wake`).
 * A job is reference-counted: the HTTP side holds one reference and every
 * submitted choice one more until its finish event, so a client that goes
 * away never frees memory the engine thread still writes to. */
#ifndef LPX_SERVER_JOB_H
#define LPX_SERVER_JOB_H

#include "lpx.h"
#include "server/metrics.h"
#include "server/params.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lpx_strbuf {
    char *p;
    size_t n, cap;
} lpx_strbuf;

bool lpx_strbuf_add(lpx_strbuf *b, const char *s, size_t n);

typedef struct lpx_job lpx_job;

typedef struct lpx_job_choice {
    lpx_job *job;
    int index;
    int prompt; /* index of its prompt */
    uint64_t engine_id;
    bool submitted, done, started;
    lpx_finish_reason finish;
    char *error; /* LPX_FINISH_ERROR: the engine's message */
    int32_t n_output_tokens;
    int32_t n_cached_tokens; /* set on the finish: prompt tokens the prefix cache gave */
    double t_last_token;     /* ms, for inter-token latency */
    lpx_strbuf text;         /* non-streaming: the output so far */
    /* Streaming with tools: the parser, and what of its content and calls was sent (the
     * calls whose first delta went out, the argument bytes of the last of them). */
    lpx_tool_parser tp;
    size_t sent_content, n_started, sent_args;
    /* Non-streaming logprobs, one entry per output token. */
    int32_t n_lp, cap_lp;
    int32_t *lp_token;         /* [cap_lp] */
    float *lp_value;           /* [cap_lp] */
    lpx_token_logprob *lp_top; /* [cap_lp * top_n] */
    int32_t *lp_n_top;         /* [cap_lp] */
    /* echo with logprobs or prompt_logprobs, non-streaming: its prompt's logprobs (the
     * engine's first event). */
    float *plp;              /* [n_plp] */
    lpx_token_logprob *ptop; /* [n_plp][plp_k] */
    int32_t *prank;          /* [n_plp] */
    int32_t n_plp, plp_k;
    size_t offset; /* stream: text_offset of its next token (bytes of the tokens before) */
} lpx_job_choice;

struct lpx_job {
    pthread_mutex_t mu;
    int refs;
    lpx_job *prev, *next; /* the server's list of jobs in flight */

    lpx_engine *engine;
    const lpx_tokenizer *tok;
    lpx_metrics *metrics;
    atomic_int *inflight; /* the server's count of unfinished engine requests */
    lpx_srv_kind kind;
    bool stream, include_usage, continuous_usage, logprobs;
    int32_t top_n;
    lpx_tool_format tool_format; /* the output is parsed for tool calls unless NONE */
    lpx_tool_rules tool_rules;   /* how: the tools' names, parallel_tool_calls */
    char id[40];
    int64_t created;
    const char *model_name;
    double t_arrival; /* ms, monotonic */

    int32_t n, n_done;
    int32_t n_prompt;                /* prompt tokens of every prompt (usage) */
    char *echo[LPX_SRV_MAX_PROMPTS]; /* echo: each prompt's text, else NULL */
    bool echo_lp;                    /* echo with logprobs */
    int32_t prompt_logprobs;         /* vLLM's prompt_logprobs, -1 not asked */
    /* With either, the prompts' ids: */
    int32_t *echo_ids[LPX_SRV_MAX_PROMPTS]; /* [n_echo_ids[k]] */
    size_t n_echo_ids[LPX_SRV_MAX_PROMPTS];
    lpx_job_choice ch[LPX_SRV_MAX_CHOICES]; /* prompt-major: choice i is prompt i / n */

    lpx_strbuf out; /* stream: SSE bytes; [out_pos, out.n) not yet sent */
    size_t out_pos;
    /* Set by the HTTP side while its connection is parked on this job: the next event
     * with stream bytes, or the finish, clears it and calls wake(wake_arg) (j->mu
     * held). wake is set when the job is made and cleared when its connection ends. */
    bool waiting;
    double t_waiting; /* ms, when waiting was set */
    void (*wake)(void *arg);
    void *wake_arg;
    int fd; /* the client's socket, to see it go away while parked */
    /* The client shut its side of the socket (FIN) while parked: a half-close after
     * its request, or a close; a write tells them apart (a closed socket answers it
     * with a reset). probed: that write was made, an interim "100 Continue" on
     * HTTP/1.1 (http11) or, on a stream, an SSE keep-alive (keepalive_now). */
    bool probed, http11, keepalive_now;
    bool timed_out; /* the server cancelled it for --request-timeout */
    bool gone;      /* ... or because its client went away: nobody to answer */
    bool finished;  /* every choice has its finish event */
    bool oom;       /* an allocation failed while formatting */

    /* Set when the server ends the job (timeout, shutdown): the error the
     * client gets instead of the rest of the output. */
    lpx_srv_error abort;
    bool aborted;
};

/* A new job with one reference (the caller's). */
lpx_job *lpx_job_new(lpx_engine *e, const lpx_tokenizer *tok, lpx_metrics *metrics,
                     atomic_int *inflight, const char *model_name, const lpx_srv_params *p,
                     double t_arrival_ms);
void lpx_job_unref(lpx_job *j);

/* Submits the n choices of each prompt k over its ids[k] (n_ids[k] of them).
 * On failure cancels what was submitted and fills err (400 for a too long
 * prompt, 503 while the engine refuses work). */
bool lpx_job_submit(lpx_job *j, const lpx_srv_params *p, int32_t *const *ids, const size_t *n_ids,
                    lpx_srv_error *err);

/* Ends the choices still running; when err is given the client gets that
 * error (a stream: as a final error chunk). */
void lpx_job_cancel(lpx_job *j, const lpx_srv_error *err);

/* With j->mu held: copies up to max stream bytes not yet sent and drops them from
 * the buffer, so that a long stream holds only what the client has not taken yet.
 * *end is set once everything was read. */
size_t lpx_job_take(lpx_job *j, char *buf, size_t max, bool *end);

/* Prompt k of p as token ids: a text prompt tokenized with the tokenizer's
 * rules, chat messages rendered with the model's template, or the ids given.
 * limit > 0: tokenizing stops past limit tokens (*n is then more than limit), and
 * text longer than limit tokens can come from is not tokenized at all (*n is
 * limit + 1, *ids NULL): an oversized prompt costs its bytes, not more. */
bool lpx_job_prompt_ids(const lpx_model *m, const lpx_srv_params *p, size_t k, size_t limit,
                        int32_t **ids, size_t *n, lpx_srv_error *err);

double lpx_now_ms(void);

#endif
