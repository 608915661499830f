/* Sampler: hand-computed penalties, greedy equivalences, and the distributions
 * that temperature, top_k, top_p and min_p must produce. */
#include "sample/sampler.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static lpx_sampling_params greedy_params(void) {
    lpx_sampling_params p = {.temperature = 0, .top_p = 1, .repetition_penalty = 1, .seed = 1};
    return p;
}

static bool near(double a, double b, double tol) {
    return fabs(a - b) <= tol;
}

/* Draws n times (seeds 0..n-1) from logits; counts[] gets the histogram. */
static void histogram(lpx_sampler *s, const lpx_sampling_params *p, const float *logits, int V,
                      int n, int *counts) {
    float *l = malloc((size_t)V * sizeof *l);
    memset(counts, 0, (size_t)V * sizeof *counts);
    for (int i = 0; i < n; i++) {
        memcpy(l, logits, (size_t)V * sizeof *l);
        int32_t t = lpx_sample(s, p, (uint64_t)i, 0, l, NULL, 0, NULL, NULL);
        counts[t]++;
    }
    free(l);
}

int main(void) {
    lpx_sampler s;
    CHECK(lpx_sampler_init(&s, 6) == LPX_OK);

    /* Greedy: argmax, lowest id on a tie. */
    float l6[6] = {1.0f, 3.0f, -2.0f, 0.5f, 3.0f, -1.0f};
    lpx_sampling_params g = greedy_params();
    float l[6];
    memcpy(l, l6, sizeof l);
    CHECK(lpx_sample(&s, &g, 0, 0, l, NULL, 0, NULL, NULL) == 1);

    /* Logit bias: added before everything else (and before the penalties, so
     * a repetition penalty divides the biased logit); a biased row is the
     * host's alone (step_sample refuses it). */
    lpx_logit_bias ban_best[2] = {{1, -100}, {4, -0.5f}}, lift[1] = {{2, 6}};
    g.logit_bias = ban_best;
    g.n_logit_bias = 2;
    CHECK(lpx_sampling_validate(&g) == LPX_OK);
    memcpy(l, l6, sizeof l);
    CHECK(lpx_sample(&s, &g, 0, 0, l, NULL, 0, NULL, NULL) == 4 && l[4] == 2.5f && l[1] == -97);
    g.logit_bias = lift;
    g.n_logit_bias = 1;
    g.repetition_penalty = 2;
    memcpy(l, l6, sizeof l);
    lpx_token_count seen2[1] = {{2, 1}};
    CHECK(lpx_sample(&s, &g, 0, 0, l, seen2, 1, NULL, NULL) == 1 && l[2] == 2.0f); /* (-2+6)/2 */
    lpx_sample_row row = {.p = g};
    lpx_sample_batch batch = {.rows = &row};
    CHECK(lpx_sample_batch_check(&batch, 1, 6) == LPX_ERR_INVALID_ARG);
    g.n_logit_bias = LPX_MAX_LOGIT_BIAS + 1;
    CHECK(lpx_sampling_validate(&g) == LPX_ERR_INVALID_ARG);
    lift[0].bias = NAN;
    g.n_logit_bias = 1;
    CHECK(lpx_sampling_validate(&g) == LPX_ERR_INVALID_ARG);
    g = greedy_params();

    /* Penalties by hand: repetition 2 over prompt {0,2} and output {2,3,3}
     * (positive logits divided, negative multiplied, once per id); presence
     * 0.5 and frequency 0.25 over the output only. */
    g.repetition_penalty = 2;
    g.presence_penalty = 0.5f;
    g.frequency_penalty = 0.25f;
    memcpy(l, l6, sizeof l);
    int32_t prompt[2] = {0, 2}, out[3] = {2, 3, 3};
    lpx_token_count seen[5];
    int32_t n_seen = lpx_token_counts(&s, prompt, 2, out, 3, seen);
    CHECK(n_seen == 3 && seen[0].id == 0 && seen[0].n_out == 0 && seen[1].id == 2 &&
          seen[1].n_out == 1 && seen[2].id == 3 && seen[2].n_out == 2);
    CHECK(lpx_sample(&s, &g, 0, 3, l, seen, n_seen, NULL, NULL) == 1);
    CHECK(l[0] == 0.5f);                 /* 1.0 / 2 */
    CHECK(l[1] == 3.0f && l[4] == 3.0f); /* untouched */
    CHECK(l[2] == -4.75f);               /* -2*2 - 0.25*1 - 0.5 */
    CHECK(l[3] == -0.75f);               /* 0.5/2 - 0.25*2 - 0.5 */
    CHECK(l[5] == -1.0f);
    /* Scratch is left clean: the same call again gives the same result. */
    memcpy(l, l6, sizeof l);
    CHECK(lpx_token_counts(&s, prompt, 2, out, 3, seen) == 3);
    lpx_sample(&s, &g, 0, 3, l, seen, n_seen, NULL, NULL);
    CHECK(l[2] == -4.75f && l[3] == -0.75f && l[0] == 0.5f);
    /* A penalty that flips the argmax: frequency pushes id 1 below id 4. */
    g = greedy_params();
    g.frequency_penalty = 0.1f;
    memcpy(l, l6, sizeof l);
    int32_t out1[1] = {1};
    n_seen = lpx_token_counts(&s, NULL, 0, out1, 1, seen);
    CHECK(lpx_sample(&s, &g, 0, 1, l, seen, n_seen, NULL, NULL) == 4);
    lpx_sampler_free(&s);

    /* Distributions on probabilities 0.5, 0.3, 0.15, 0.05. */
    CHECK(lpx_sampler_init(&s, 4) == LPX_OK);
    float lp[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    const int N = 20000;
    int c[4];
    lpx_sampling_params p = greedy_params();
    p.temperature = 1;
    histogram(&s, &p, lp, 4, N, c);
    CHECK(near(c[0] / (double)N, 0.5, 0.02) && near(c[1] / (double)N, 0.3, 0.02));
    CHECK(near(c[2] / (double)N, 0.15, 0.015) && near(c[3] / (double)N, 0.05, 0.01));
    /* Temperature 0.5 squares the probabilities: 0.25 .09 .0225 .0025 over 0.365. */
    p.temperature = 0.5f;
    histogram(&s, &p, lp, 4, N, c);
    CHECK(near(c[0] / (double)N, 0.25 / 0.365, 0.02) && near(c[1] / (double)N, 0.09 / 0.365, 0.02));
    CHECK(near(c[3] / (double)N, 0.0025 / 0.365, 0.005));
    /* top_p 0.75: the smallest prefix with mass >= 0.75 is {0,1}, renormalised. */
    p.temperature = 1;
    p.top_p = 0.75f;
    histogram(&s, &p, lp, 4, N, c);
    CHECK(c[2] == 0 && c[3] == 0 && near(c[0] / (double)N, 0.625, 0.02));
    p.top_p = 0.85f; /* needs the third token */
    histogram(&s, &p, lp, 4, N, c);
    CHECK(c[2] > 0 && c[3] == 0 && near(c[2] / (double)N, 0.15 / 0.95, 0.015));
    /* min_p 0.35: keep p >= 0.35 * 0.5 = 0.175: {0,1}. */
    p.top_p = 1;
    p.min_p = 0.35f;
    histogram(&s, &p, lp, 4, N, c);
    CHECK(c[2] == 0 && c[3] == 0 && near(c[0] / (double)N, 0.625, 0.02));
    /* top_k 3 then top_p 0.9 of the renormalised three (0.526 .316 .158): {0,1,2}. */
    p.min_p = 0;
    p.top_k = 3;
    p.top_p = 0.9f;
    histogram(&s, &p, lp, 4, N, c);
    CHECK(c[3] == 0 && c[2] > 0);
    p.top_k = 2;
    p.top_p = 1;
    histogram(&s, &p, lp, 4, N, c);
    CHECK(c[2] == 0 && c[3] == 0 && near(c[0] / (double)N, 0.625, 0.02));
    /* Logprobs (greedy: temperature 1, after penalties). */
    lpx_token_logprob top[3];
    float chosen_lp = 0;
    memcpy(l, lp, sizeof lp);
    g = greedy_params();
    g.logprobs = 3;
    CHECK(lpx_sample(&s, &g, 0, 0, l, NULL, 0, top, &chosen_lp) == 0);
    CHECK(top[0].id == 0 && top[1].id == 1 && top[2].id == 2);
    CHECK(near(top[0].logprob, logf(0.5f), 1e-5) && near(top[2].logprob, logf(0.15f), 1e-5));
    CHECK(near(chosen_lp, logf(0.5f), 1e-5));
    lpx_sampler_free(&s);

    /* A large random vocabulary: top_k = 1 is greedy at any temperature and
     * seed; top_p draws stay inside the set a full sort gives. */
    enum { V = 5000 };
    CHECK(lpx_sampler_init(&s, V) == LPX_OK);
    float *big = malloc(V * sizeof *big), *work = malloc(V * sizeof *work);
    srand(7);
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < V; i++)
            big[i] = (float)(rand() % 2000) / 100.0f - 10.0f;
        int best = 0;
        for (int i = 1; i < V; i++)
            if (big[i] > big[best]) best = i;
        lpx_sampling_params k1 = greedy_params();
        k1.temperature = 0.3f + trial * 0.1f;
        k1.top_k = 1;
        memcpy(work, big, V * sizeof *big);
        CHECK(lpx_sample(&s, &k1, (uint64_t)trial * 77, trial, work, NULL, 0, NULL, NULL) == best);
    }
    /* Full-sort reference for top_p 0.6 at temperature 1. */
    for (int i = 0; i < V; i++)
        big[i] = (float)(rand() % 1000) / 100.0f;
    double total = 0, maxl = -1e30;
    for (int i = 0; i < V; i++)
        maxl = big[i] > maxl ? big[i] : maxl;
    for (int i = 0; i < V; i++)
        total += exp(big[i] - maxl);
    int *order = malloc(V * sizeof *order);
    for (int i = 0; i < V; i++)
        order[i] = i;
    for (int i = 1; i < V; i++) { /* insertion sort, descending, ties by id */
        int x = order[i], j = i;
        while (j > 0 && (big[order[j - 1]] < big[x])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    char *allowed = calloc(V, 1);
    double cum = 0;
    for (int i = 0; i < V; i++) {
        allowed[order[i]] = 1;
        cum += exp(big[order[i]] - maxl);
        if (cum >= 0.6 * total) {
            /* Equal logits just past the cut are kept by id order; allow them. */
            for (int j = i + 1; j < V && big[order[j]] == big[order[i]]; j++)
                allowed[order[j]] = 1;
            break;
        }
    }
    lpx_sampling_params tp = greedy_params();
    tp.temperature = 1;
    tp.top_p = 0.6f;
    int outside = 0, distinct = 0;
    char *hit = calloc(V, 1);
    for (int i = 0; i < 2000; i++) {
        memcpy(work, big, V * sizeof *big);
        int32_t t = lpx_sample(&s, &tp, 99, i, work, NULL, 0, NULL, NULL);
        outside += !allowed[t];
        distinct += !hit[t];
        hit[t] = 1;
    }
    CHECK(outside == 0);
    CHECK(distinct > 10);
    /* Same (seed, index): same token; another seed: a different sequence. */
    int same = 0;
    for (int i = 0; i < 50; i++) {
        memcpy(work, big, V * sizeof *big);
        int32_t a = lpx_sample(&s, &tp, 5, i, work, NULL, 0, NULL, NULL);
        memcpy(work, big, V * sizeof *big);
        int32_t b = lpx_sample(&s, &tp, 5, i, work, NULL, 0, NULL, NULL);
        memcpy(work, big, V * sizeof *big);
        int32_t d = lpx_sample(&s, &tp, 6, i, work, NULL, 0, NULL, NULL);
        CHECK(a == b);
        same += a == d;
    }
    CHECK(same < 25);
    free(big);
    free(work);
    free(order);
    free(allowed);
    free(hit);
    lpx_sampler_free(&s);

    /* Validation. */
    lpx_sampling_params v = greedy_params();
    CHECK(lpx_sampling_validate(&v) == LPX_OK);
    v.temperature = -0.1f;
    CHECK(lpx_sampling_validate(&v) == LPX_ERR_INVALID_ARG);
    v = greedy_params();
    v.top_p = 0;
    CHECK(lpx_sampling_validate(&v) == LPX_ERR_INVALID_ARG);
    v.top_p = 1.5f;
    CHECK(lpx_sampling_validate(&v) == LPX_ERR_INVALID_ARG);
    v = greedy_params();
    v.min_p = 2;
    CHECK(lpx_sampling_validate(&v) == LPX_ERR_INVALID_ARG);
    v = greedy_params();
    v.repetition_penalty = 0;
    CHECK(lpx_sampling_validate(&v) == LPX_ERR_INVALID_ARG);
    v = greedy_params();
    v.logprobs = 21;
    CHECK(lpx_sampling_validate(&v) == LPX_ERR_INVALID_ARG);
    TEST_DONE();
}
