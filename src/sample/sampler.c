#include "sample/sampler.h"

#include "base/error.h"
#include "sample/sample_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

lpx_status lpx_sampler_init(lpx_sampler *s, int32_t vocab) {
    memset(s, 0, sizeof *s);
    if (vocab <= 0 || vocab > LPX_SAMPLE_MAX_VOCAB)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "sampler: vocab %d: expected 1..%d", vocab,
                          LPX_SAMPLE_MAX_VOCAB);
    s->vocab = vocab;
    s->w = malloc((size_t)vocab * sizeof *s->w);
    s->count = calloc((size_t)vocab, sizeof *s->count);
    s->seen = calloc((size_t)vocab, 1);
    s->cand = malloc((size_t)vocab * sizeof *s->cand);
    if (!s->w || !s->count || !s->seen || !s->cand) {
        lpx_sampler_free(s);
        return lpx_errorf(LPX_ERR_NOMEM, "sampler: vocab %d: out of memory", vocab);
    }
    return LPX_OK;
}

void lpx_sampler_free(lpx_sampler *s) {
    free(s->w);
    free(s->count);
    free(s->seen);
    free(s->cand);
    memset(s, 0, sizeof *s);
}

lpx_status lpx_sampling_validate(const lpx_sampling_params *p) {
    if (!(p->temperature >= 0) || isinf(p->temperature))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "temperature %g: expected a finite value >= 0",
                          p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "top_p %g: expected a value in (0, 1]", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "min_p %g: expected a value in [0, 1]", p->min_p);
    if (p->top_k < -1)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "top_k %d: expected >= 1, or 0 / -1 for off",
                          p->top_k);
    if (!(p->repetition_penalty > 0) || isinf(p->repetition_penalty))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "repetition_penalty %g: expected a finite value > 0",
                          p->repetition_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "presence/frequency penalty %g/%g: expected finite",
                          p->presence_penalty, p->frequency_penalty);
    if (p->n_logit_bias < 0 || p->n_logit_bias > LPX_MAX_LOGIT_BIAS ||
        (p->n_logit_bias > 0 && !p->logit_bias))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "logit_bias: %d entries: expected 0..%d",
                          p->n_logit_bias, LPX_MAX_LOGIT_BIAS);
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (!isfinite(p->logit_bias[i].bias) || p->logit_bias[i].id < 0)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "logit_bias entry %d: token %d, bias %g: expected an id >= 0 and a "
                              "finite bias",
                              i, p->logit_bias[i].id, p->logit_bias[i].bias);
    if (p->logprobs < 0 || p->logprobs > LPX_MAX_LOGPROBS)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "logprobs %d: expected 0..%d", p->logprobs,
                          LPX_MAX_LOGPROBS);
    return LPX_OK;
}

bool lpx_sampling_penalized(const lpx_sampling_params *p) {
    return p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
           p->frequency_penalty != 0.0f;
}

int32_t lpx_token_counts(lpx_sampler *s, const int32_t *prompt, int32_t n_prompt,
                         const int32_t *output, int32_t n_output, lpx_token_count *out) {
    for (int32_t i = 0; i < n_output; i++)
        s->count[output[i]]++;
    int32_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *ids = pass ? output : prompt;
        int32_t m = pass ? n_output : n_prompt;
        for (int32_t i = 0; i < m; i++) {
            int32_t t = ids[i];
            if (s->seen[t]) continue;
            s->seen[t] = 1;
            out[n++] = (lpx_token_count){t, s->count[t]};
        }
    }
    for (int32_t i = 0; i < n; i++) {
        s->seen[out[i].id] = 0;
        s->count[out[i].id] = 0;
    }
    return n;
}

void lpx_apply_penalties(const lpx_sampling_params *p, float *logits, const lpx_token_count *seen,
                         int32_t n_seen) {
    const bool rep = p->repetition_penalty != 1.0f;
    const bool freq = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    const float r = p->repetition_penalty;
    for (int32_t i = 0; i < n_seen; i++) {
        float l = logits[seen[i].id];
        if (rep) l = l < 0 ? l * r : l / r;
        if (freq && seen[i].n_out > 0)
            l -= p->frequency_penalty * (float)seen[i].n_out + p->presence_penalty;
        logits[seen[i].id] = l;
    }
}

/* a ranks before b: more probable, then lower id. */
static inline bool cand_before(const struct lpx_cand *a, const struct lpx_cand *b) {
    return a->w > b->w || (a->w == b->w && a->id < b->id);
}

static int cand_cmp(const void *x, const void *y) {
    const struct lpx_cand *a = x, *b = y;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* Moves the k best of c[0..n) to c[0..k) (any order): quickselect. */
static void select_top(struct lpx_cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        struct lpx_cand pivot = c[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (cand_before(&c[i], &pivot))
                i++;
            while (cand_before(&pivot, &c[j]))
                j--;
            if (i <= j) {
                struct lpx_cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

/* Moves elements with w >= t to the front; returns their count and mass. */
static int32_t partition_at(struct lpx_cand *c, int32_t n, float t, uint64_t *mass) {
    int32_t m = 0;
    uint64_t sum = 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].w >= t) {
            struct lpx_cand x = c[i];
            c[i] = c[m];
            c[m++] = x;
            sum += lpx_sample_fix(x.w);
        }
    *mass = sum;
    return m;
}

/* Keeps the smallest most-probable prefix whose mass reaches top_p of the
 * total (at least one token); sorts that prefix. Only the candidates above a
 * falling threshold are sorted, which is exact: everything below the
 * threshold ranks after everything above it. */
static int32_t apply_top_p(struct lpx_cand *c, int32_t n, float top_p) {
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += lpx_sample_fix(c[i].w);
    const uint64_t want = lpx_sample_top_p_want(top_p, total);
    int32_t m = n;
    for (float t = 1e-3f; t > 1e-30f; t *= 1e-3f) {
        uint64_t mass;
        int32_t k = partition_at(c, n, t, &mass);
        if (mass >= want) {
            m = k;
            break;
        }
    }
    qsort(c, (size_t)m, sizeof *c, cand_cmp);
    uint64_t cum = 0;
    for (int32_t i = 0; i < m; i++) {
        cum += lpx_sample_fix(c[i].w);
        if (cum >= want) return i + 1;
    }
    return m;
}

/* The n most likely tokens into top (fewer when fewer are possible: masked tokens,
 * at -inf, are left out); returns how many. */
static int32_t top_logprobs(const float *logits, int32_t vocab, double lse, int32_t n,
                            lpx_token_logprob *top) {
    int32_t have = 0;
    for (int32_t t = 0; t < vocab; t++) {
        float l = logits[t];
        if (l == -INFINITY) continue;
        if (have == n && !(l > top[n - 1].logprob)) continue;
        int32_t j = have < n ? have++ : n - 1;
        while (j > 0 && l > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].id = t;
        top[j].logprob = l;
    }
    for (int32_t i = 0; i < have; i++)
        top[i].logprob = (float)(top[i].logprob - lse);
    return have;
}

/* The seeded draw from s->w (see sampler.h). */
static int32_t draw(lpx_sampler *s, const lpx_sampling_params *p, uint64_t seed, int64_t index) {
    const int32_t V = s->vocab;
    const float *w = s->w;
    const bool filter = p->min_p > 0 || (p->top_k > 0 && p->top_k < V) || p->top_p < 1;
    struct lpx_cand *c = s->cand;
    int32_t n = 0;
    if (filter) {
        for (int32_t t = 0; t < V; t++) /* w[best] == 1, so min_p is relative to the max */
            if (w[t] >= p->min_p) c[n++] = (struct lpx_cand){w[t], t};
        if (p->top_k > 0 && p->top_k < n) {
            select_top(c, n, p->top_k);
            n = p->top_k;
        }
        if (p->top_p < 1) n = apply_top_p(c, n, p->top_p);
        for (int32_t i = 0; i < n; i++)
            s->seen[c[i].id] = 1;
    }
    uint64_t mass = 0;
    for (int32_t t = 0; t < V; t++)
        if (!filter || s->seen[t]) mass += lpx_sample_fix(w[t]);
    /* The best token (weight 2^40) is always kept, so target < mass is reached. */
    const uint64_t target = lpx_sample_target(lpx_sample_bits(seed, index), mass);
    int32_t chosen = 0;
    uint64_t cum = 0;
    for (int32_t t = 0; t < V; t++)
        if (!filter || s->seen[t]) {
            cum += lpx_sample_fix(w[t]);
            if (cum > target) {
                chosen = t;
                break;
            }
        }
    for (int32_t i = 0; i < n; i++)
        s->seen[c[i].id] = 0;
    return chosen;
}

int32_t lpx_sample(lpx_sampler *s, const lpx_sampling_params *p, uint64_t seed, int64_t index,
                   float *logits, const lpx_token_count *seen, int32_t n_seen,
                   lpx_token_logprob *top, float *chosen_lp) {
    int32_t n_top;
    return lpx_sample_masked(s, p, seed, index, logits, seen, n_seen, NULL, top, &n_top, chosen_lp);
}

int32_t lpx_sample_masked(lpx_sampler *s, const lpx_sampling_params *p, uint64_t seed,
                          int64_t index, float *logits, const lpx_token_count *seen, int32_t n_seen,
                          const uint32_t *allow, lpx_token_logprob *top, int32_t *n_top,
                          float *chosen_lp) {
    const int32_t V = s->vocab;
    *n_top = 0;
    if (allow)
        for (int32_t t = 0; t < V; t++)
            if (!(allow[t >> 5] >> (t & 31) & 1)) logits[t] = -INFINITY;
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        logits[p->logit_bias[i].id] += p->logit_bias[i].bias;
    lpx_apply_penalties(p, logits, seen, n_seen);
    bool greedy = p->temperature < 1e-5f;
    if (!greedy && p->temperature != 1.0f)
        for (int32_t t = 0; t < V; t++)
            logits[t] /= p->temperature;

    int32_t best = 0;
    for (int32_t t = 1; t < V; t++)
        if (logits[t] > logits[best]) best = t;
    if (greedy && p->logprobs <= 0) return best;
    float max = logits[best];
    for (int32_t t = 0; t < V; t++)
        s->w[t] = lpx_exp_neg(logits[t] - max);
    int32_t chosen = greedy ? best : draw(s, p, seed, index);
    if (p->logprobs > 0) {
        double total = 0;
        for (int32_t t = 0; t < V; t++)
            total += s->w[t];
        double lse = max + log(total);
        *n_top = top_logprobs(logits, V, lse, p->logprobs, top);
        *chosen_lp = (float)(logits[chosen] - lse);
    }
    return chosen;
}

float lpx_logprob_row(const float *logits, int32_t vocab, int32_t token, int32_t n,
                      lpx_token_logprob *top, int32_t *n_top, int32_t *rank) {
    float max = logits[0];
    int32_t at_least = 0;
    for (int32_t t = 0; t < vocab; t++) {
        if (logits[t] > max) max = logits[t];
        at_least += logits[t] >= logits[token];
    }
    *rank = at_least;
    double total = 0;
    for (int32_t t = 0; t < vocab; t++)
        total += exp((double)logits[t] - max);
    double lse = max + log(total);
    *n_top = n > 0 ? top_logprobs(logits, vocab, lse, n, top) : 0;
    return (float)(logits[token] - lse);
}

lpx_status lpx_sample_batch_check(const lpx_sample_batch *s, int32_t n_rows, int32_t vocab) {
    if (n_rows > 0 && (!s || !s->rows))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "step_sample: %d rows but no sampling rows", n_rows);
    for (int32_t i = 0; i < n_rows; i++) {
        const lpx_sample_row *r = &s->rows[i];
        if (r->p.logprobs != 0)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "step_sample: row %d asks for %d logprobs (expected 0: logprobs "
                              "need the logits)",
                              i, r->p.logprobs);
        if (r->p.n_logit_bias != 0)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "step_sample: row %d has a logit bias (expected none: biased rows "
                              "are sampled on the host)",
                              i);
        if (r->seen_start < 0 || r->n_seen < 0 || r->seen_start > s->n_seen - r->n_seen)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "step_sample: row %d: token counts %d..+%d outside the %d given", i,
                              r->seen_start, r->n_seen, s->n_seen);
        for (int32_t j = 0; j < r->n_seen; j++) {
            int32_t id = s->seen[r->seen_start + j].id;
            if (id < 0 || id >= vocab)
                return lpx_errorf(LPX_ERR_INVALID_ARG,
                                  "step_sample: row %d: token id %d outside the vocabulary (%d)", i,
                                  id, vocab);
        }
    }
    return LPX_OK;
}
