/* The engine's state, shared by engine.c (requests, steps, events) and
 * scheduler.c (which sequences run in the next step). */
#ifndef LPX_ENGINE_ENGINE_IMPL_H
#define LPX_ENGINE_ENGINE_IMPL_H

#include "engine/engine.h"
#include "engine/kv_blocks.h"
#include "sample/sampler.h"
#include "engine/stop.h"
#include "grammar/grammar.h"
#include "grammar/mask.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* A compiled grammar and its mask cache, shared by the requests that give the same
 * response format (a batch job's thousands of lines with one schema reuse its masks).
 * refs and the registry are under *mu; the masks are used by the stepping thread only. */
typedef struct lpx_gram_slot {
    char *key; /* the format's digit, then the schema text */
    lpx_grammar *g;
    lpx_gmasks *masks;
    int32_t refs;
    uint64_t used;
    pthread_mutex_t *mu;
} lpx_gram_slot;

typedef struct lpx_seq {
    uint64_t id;
    uint64_t group; /* lpx_request.group, or id when that is 0 */
    lpx_event_cb cb;
    void *user;
    lpx_sampling_params sp;
    uint64_t seed;
    int32_t max_tokens; /* -1: none */
    bool ignore_eos, skip_special;
    lpx_logit_bias *bias; /* [sp.n_logit_bias] the request's copy: sp.logit_bias */
    int32_t *stop_ids;    /* [n_stop_ids] */
    size_t n_stop_ids;
    lpx_stop_matcher stop;
    lpx_detok_stream detok; /* valid when the model has a tokenizer */
    int32_t *tokens;        /* [cap]: prompt, then output */
    int32_t n_prompt, n_tokens, cap;
    int32_t limit;      /* most tokens: min(max_model_len, KV pool) */
    int32_t n_computed; /* leading tokens whose K/V are in the cache */
    lpx_block_table bt;
    int32_t n_preempt;
    int32_t n_cached; /* prompt tokens matched in the prefix cache before any preemption */
    double t_submit, t_first;
    double t_sched; /* the first step that ran it; 0 until then */
    /* This step's share (scheduler): tokens n_computed .. +n_new. */
    int32_t n_new;
    /* Steps in flight (begun, not ended) that read its KV: while > 0 its blocks
     * and this struct stay; done: it has finished (its event was sent) meanwhile,
     * and is freed when the last of them ends. */
    int32_t n_flight;
    bool done;
    /* Structured output: the grammar (NULL: none) and where the output is in it. */
    lpx_gram_slot *gram;
    lpx_gmatch gm;
    /* Prompt logprobs (lpx_request.prompt_logprobs = plp_k > 0), filled as its prompt is
     * computed and sent with the first output token (plp_sent). */
    int32_t plp_k;
    bool plp_sent;
    float *plp;              /* [n_prompt] */
    lpx_token_logprob *ptop; /* [n_prompt][plp_k] */
    int32_t *prank;          /* [n_prompt] each token's rank in its row */
} lpx_seq;

/* Prompt-logprob rows one step returns at most (each is a vocab-wide logits row on the
 * host: 64 x 151,936 floats = 39 MB), so a prompt wanting them runs in chunks of this. */
#define LPX_PLP_ROWS 64

/* Whether s still wants its prompt's logprobs (rows for positions below n_prompt - 1). */
static inline bool lpx_seq_plp_pending(const lpx_seq *s) {
    return s->plp_k > 0 && !s->plp_sent;
}

typedef struct lpx_seq_list {
    lpx_seq **v;
    int32_t n, cap;
} lpx_seq_list;

/* A step begun with the backend's step_begin and not yet ended. */
typedef struct lpx_flight {
    lpx_seq **seqs;  /* [max_num_seqs] batch order */
    bool *row;       /* [max_num_seqs] seqs[i] draws a token (logits rows in batch order) */
    int32_t *tokens; /* [max_num_seqs] the tokens drawn, by logits row (step_end writes them) */
    int32_t *upto;   /* [max_num_seqs] seqs[i]'s positions with final K/V once the step ends */
    int32_t n;
} lpx_flight;

struct lpx_engine {
    const lpx_model *model;
    lpx_engine_config cfg;
    lpx_backend *be;
    int32_t vocab;
    lpx_kv_pool pool;
    lpx_sampler sampler;
    int32_t eos[16];
    int n_eos;

    /* Touched only by the thread that steps. */
    lpx_seq_list waiting; /* FIFO; preempted sequences go back to the front */
    lpx_seq_list running; /* admission order: the last is the newest */
    lpx_seq_list sched;   /* this step's sequences, batch order */
    int32_t *b_tokens, *b_pos, *b_start, *b_len, *b_table, *b_rows; /* batch descriptor */
    float *logits; /* [logits_rows][vocab]: max_num_seqs, + LPX_PLP_ROWS once needed */
    int32_t logits_rows;
    int32_t *plp_seq; /* [LPX_PLP_ROWS] this step's prompt-logprob rows: index in sched */
    /* Sampling: on the device (a step with sample) when every row allows it. */
    bool device_sampling;   /* lpx_engine_config.device_sampling */
    int32_t *sampled;       /* [max_num_seqs] tokens a waited step with sample drew */
    lpx_sample_row *s_rows; /* [max_num_seqs] */
    lpx_token_count *seen;  /* [seen_cap] token counts of the rows with penalties */
    int32_t seen_cap;
    /* One step ahead (docs/engine.md): the steps in flight, oldest at flight_head;
     * at most one between steps, two while the next is begun before the oldest ends. */
    lpx_flight flight[2];
    int flight_head, n_flights;
    int32_t *b_feed; /* [max_num_seqs] the continuing step's tokens: rows of the previous */
    char *piece;     /* [piece_cap] one token\'s decoded text */
    size_t piece_cap;
    char *text; /* event text being built */
    size_t text_len, text_cap;
    pthread_mutex_t step_mu;
    uint32_t *gmask; /* [(vocab + 31) / 32] the allowed tokens of the row being sampled */

    /* Grammars (grammar_slots.c), under gram_mu. */
    pthread_mutex_t gram_mu;
    lpx_gvocab *gvocab; /* the tokens' bytes as a trie, built for the first grammar */
    lpx_gram_slot **grams;
    int32_t n_grams, cap_grams;
    uint64_t gram_clock;

    /* Under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    lpx_seq_list incoming;
    uint64_t *cancels;
    int32_t n_cancels, cap_cancels;
    uint64_t next_id;
    bool thread_on, stopping;
    pthread_t thread;
    lpx_engine_stats st;
    double ttft_sum;
    int64_t n_ttft;
};

bool lpx_seq_list_reserve(lpx_seq_list *l, int32_t n);
bool lpx_seq_list_push(lpx_seq_list *l, lpx_seq *s);
bool lpx_seq_list_push_front(lpx_seq_list *l, lpx_seq *s);
void lpx_seq_list_remove(lpx_seq_list *l, lpx_seq *s);

/* The grammar slot for r's response format (compiled, or shared with an earlier
 * request's), with a reference taken; INVALID_ARG naming the schema's keyword. */
lpx_status lpx_gram_acquire(lpx_engine *e, const lpx_request *r, lpx_gram_slot **out);
void lpx_gram_release(lpx_gram_slot *g);
void lpx_grams_free(lpx_engine *e);
/* The tokens s may draw next (e->gmask): the grammar's mask, plus the EOS ids where the
 * output may end; *n_allowed 0: none (a dead end). */
lpx_status lpx_gram_mask(lpx_engine *e, const lpx_seq *s, const uint32_t **allow,
                         int32_t *n_allowed);

/* Picks this step's work into e->sched (each with n_new > 0), reserving KV
 * blocks; may preempt running sequences and admit waiting ones. */
lpx_status lpx_schedule(lpx_engine *e);
/* Whether a waiting sequence could join the batch now (a slot free, its group under
 * its cap): the next step must then be scheduled, not continued ahead. */
bool lpx_schedule_can_admit(const lpx_engine *e);

#endif
