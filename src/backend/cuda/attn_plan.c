/* The decode attention work plan (attn_plan.h). Built in every configuration. */
#include "backend/cuda/attn_plan.h"

#include <stdbool.h>
#include <stdlib.h>

/* Keys token i attends to: [lo, pos+1), 0 for padding. */
static int64_t keys_of(const lpx_attn_plan_in *in, int i) {
    if (in->seq[i] < 0) return 0;
    const int64_t len = (int64_t)in->pos[i] + 1;
    return in->window > 0 && len > in->window ? in->window : len;
}

int lpx_cuda_attn_plan_cap(int n_tokens, int n_kv, int slots) {
    /* one wave: splits sum to at most slots/n_kv beyond one a token; several:
     * total/c + one a token, total/c <= waves*slots/n_kv */
    return n_kv * n_tokens + AP_MAX_WAVES * slots + n_kv;
}

typedef struct tok_split {
    int t, n;     /* token, its splits */
    int64_t size; /* keys an item, for the order */
} tok_split;

static int by_size_desc(const void *a, const void *b) {
    const tok_split *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->t - y->t;
}

int lpx_cuda_attn_plan(const lpx_attn_plan_in *in, lpx_attn_item *items, int cap) {
    const int T = in->n_tokens, n_kv = in->n_kv;
    const int min_keys = in->min_keys > 0 ? in->min_keys : AP_MIN_KEYS;
    const int slots = in->slots > n_kv ? in->slots : n_kv;
    if (T <= 0 || n_kv <= 0) return 0;
    tok_split *ts = malloc(sizeof *ts * (size_t)T);
    if (!ts) return -1;
    int64_t total = 0;
    for (int i = 0; i < T; i++)
        total += keys_of(in, i);
    const bool one_wave = (int64_t)T * n_kv <= slots;
    /* several waves: items of about c keys */
    const int64_t waves = in->waves > 0 ? in->waves : AP_WAVES;
    int64_t c = (total * n_kv + waves * slots - 1) / (waves * slots);
    if (c < min_keys) c = min_keys;
    for (int i = 0; i < T; i++) {
        const int64_t n = keys_of(in, i);
        int64_t s = 1;
        if (n > 0 && one_wave)
            s = (int64_t)(slots / n_kv) * n / total; /* floor: the splits fit the slots */
        else if (n > 0)
            s = (n + c / 2) / c;              /* nearest: the waves come out whole more often */
        const int64_t by_keys = n / min_keys; /* items of min_keys at least */
        if (s > by_keys) s = by_keys;
        if (s > AP_MAX_SPLITS) s = AP_MAX_SPLITS;
        if (s < 1) s = 1;
        ts[i].t = i;
        ts[i].n = (int)s;
        ts[i].size = n / s; /* its first item's keys */
    }
    qsort(ts, (size_t)T, sizeof *ts, by_size_desc);
    int k = 0;
    for (int j = 0; j < T; j++) {
        const int t = ts[j].t, S = ts[j].n;
        const int64_t n = keys_of(in, t);
        const int64_t lo = in->seq[t] < 0 ? 0 : (int64_t)in->pos[t] + 1 - n;
        if (k > cap - n_kv * S) {
            free(ts);
            return -1;
        }
        for (int h = 0; h < n_kv; h++) {
            const int first = k;
            for (int s = 0; s < S; s++, k++) {
                /* split s: keys lo + s*n/S .. lo + (s+1)*n/S, each floor(n/S) at least */
                const int64_t a = lo + s * n / S, e = lo + (s + 1) * n / S;
                items[k] = (lpx_attn_item){t, h, s, S, (int32_t)a, (int32_t)e, first, k};
            }
        }
    }
    free(ts);
    return k;
}
