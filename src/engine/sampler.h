/* Token sampler: penalties, temperature, min_p, top_k, top_p and a seeded draw
 * (the order and semantics are lpx_sampling_params' in lpx.h). Deterministic:
 * the draw for output token i of a request uses only (seed, i), never the
 * batch or the step, so preemption and batching cannot change a result. */
#ifndef LPX_ENGINE_SAMPLER_H
#define LPX_ENGINE_SAMPLER_H

#include "lpx.h"

#include <stdint.h>

#define LPX_MAX_LOGPROBS 20

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

/* Uniform double in [0, 1) from (seed, index): splitmix64 of both. */
double lpx_sample_uniform(uint64_t seed, int64_t index);

/* Picks the next token from logits [vocab] (modified in place: penalties and
 * temperature are applied). prompt/output are the request's tokens so far;
 * index is the output index of the token being drawn. When p->logprobs > 0,
 * top[0..p->logprobs) receives the most likely tokens and *chosen_lp the
 * chosen token's log-probability (see lpx_event in lpx.h). */
int32_t lpx_sample(lpx_sampler *s, const lpx_sampling_params *p, uint64_t seed, int64_t index,
                   float *logits, const int32_t *prompt, int32_t n_prompt, const int32_t *output,
                   int32_t n_output, lpx_token_logprob *top, float *chosen_lp);

#endif
