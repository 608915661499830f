/* Token sampler: logit bias, penalties, temperature, min_p, top_k, top_p and a
 * seeded draw (the order and semantics are lpx_sampling_params' in lpx.h).
 * Deterministic: the draw for output token i of a request uses only (seed, i),
 * never the batch or the step, so preemption and batching cannot change a result. The
 * arithmetic (sample_math.h) is shared with the CUDA sampler, which draws the
 * same token from the same logits.
 *
 * The draw: weights w = exp(logit - max) as fixed-point integers; the kept set
 * is the min_p, then top_k, then top_p filter over the ranking (w descending,
 * then id ascending); the token is the first kept id, in id order, at which the
 * running sum of weights exceeds floor(u * kept mass), u from (seed, index). */
#ifndef LPX_SAMPLE_SAMPLER_H
#define LPX_SAMPLE_SAMPLER_H

#include "lpx.h"

#include <stdbool.h>
#include <stdint.h>

#define LPX_MAX_LOGPROBS 20

/* Sampling on the device (optional op step_sample): per logits row what the
 * host sampler (src/sample/sampler.h) needs. */
typedef struct lpx_token_count {
    int32_t id;    /* a token of the prompt or the output */
    int32_t n_out; /* how often it is in the output */
} lpx_token_count;

typedef struct lpx_sample_row {
    lpx_sampling_params p; /* p.logprobs and p.n_logit_bias must be 0 */
    uint64_t seed;
    int64_t index;              /* output index of the token drawn */
    int32_t seen_start, n_seen; /* the row's entries of lpx_sample_batch.seen (distinct ids;
                                   only read when p has a penalty) */
} lpx_sample_row;

typedef struct lpx_sample_batch {
    const lpx_sample_row *rows;  /* [n_logits] */
    const lpx_token_count *seen; /* [n_seen] */
    int32_t n_seen;
} lpx_sample_batch;

/* Checks s for n_rows rows against the contract above (logprobs 0, seen ranges
 * inside s->seen, ids inside the vocabulary). */
/* The raw distribution of one logits row [vocab] (a prompt token's, lpx_request's
 * prompt_logprobs): returns log_softmax(logits)[token], writes the n most likely
 * tokens into top (ranked as top_logprobs ranks: logprob descending, then id) and
 * token's rank: the tokens at least as likely, itself included (1 = the most likely;
 * vLLM counts ties the same way). */
float lpx_logprob_row(const float *logits, int32_t vocab, int32_t token, int32_t n,
                      lpx_token_logprob *top, int32_t *n_top, int32_t *rank);

lpx_status lpx_sample_batch_check(const lpx_sample_batch *s, int32_t n_rows, int32_t vocab);

/* Scratch reused across calls (one per stepping thread). */
typedef struct lpx_sampler {
    int32_t vocab;
    float *w;       /* [vocab] unnormalised probabilities */
    int32_t *count; /* [vocab] output-token counts (zero between calls) */
    uint8_t *seen;  /* [vocab] prompt-or-output marks (zero between calls) */
    struct lpx_cand {
        float w;
        int32_t id;
    } * cand; /* [vocab] */
} lpx_sampler;

lpx_status lpx_sampler_init(lpx_sampler *s, int32_t vocab);
void lpx_sampler_free(lpx_sampler *s);

/* Checks ranges; the message names the parameter and its allowed range. */
lpx_status lpx_sampling_validate(const lpx_sampling_params *p);

/* Whether p has a penalty, i.e. needs the request's token counts. */
bool lpx_sampling_penalized(const lpx_sampling_params *p);

/* The distinct tokens of prompt and output, each with its count in the
 * output, into out (room for n_prompt + n_output); returns how many. */
int32_t lpx_token_counts(lpx_sampler *s, const int32_t *prompt, int32_t n_prompt,
                         const int32_t *output, int32_t n_output, lpx_token_count *out);

/* Applies p's penalties to logits [vocab] (vLLM's order: repetition over
 * every seen token, then frequency and presence over output tokens). */
void lpx_apply_penalties(const lpx_sampling_params *p, float *logits, const lpx_token_count *seen,
                         int32_t n_seen);

/* Picks the next token from logits [vocab] (modified in place: penalties and
 * temperature are applied). seen: the request's token counts
 * (lpx_token_counts; may be empty when p has no penalty); index: the output
 * index of the token being drawn. When p->logprobs > 0, top[0..p->logprobs)
 * receives the most likely tokens and *chosen_lp the chosen token's
 * log-probability (see lpx_event in lpx.h). */
int32_t lpx_sample(lpx_sampler *s, const lpx_sampling_params *p, uint64_t seed, int64_t index,
                   float *logits, const lpx_token_count *seen, int32_t n_seen,
                   lpx_token_logprob *top, float *chosen_lp);

/* lpx_sample with a token mask: tokens whose bit of allow (bit t of allow[t / 32]) is
 * clear get -inf first (before the bias), so the draw and a greedy pick (the argmax
 * over allowed tokens) see only allowed ones; allow NULL: all. At least one token must
 * be allowed. *n_top: the entries of top written (fewer than p->logprobs when fewer
 * tokens are allowed); logprobs are over the allowed tokens. */
int32_t lpx_sample_masked(lpx_sampler *s, const lpx_sampling_params *p, uint64_t seed,
                          int64_t index, float *logits, const lpx_token_count *seen, int32_t n_seen,
                          const uint32_t *allow, lpx_token_logprob *top, int32_t *n_top,
                          float *chosen_lp);

#endif
