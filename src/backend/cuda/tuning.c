/* The CUDA backend's tuning resolution (tuning.h) and its developer strings
 * (grammar: docs/dev.md). Built in every configuration, CUDA or not. */
#include "backend/cuda/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/attn_plan.h"
#include "base/error.h"

/* One "key=value" (or bare "key") item of a comma list. */
typedef struct item {
    const char *key, *val; /* val NULL for a bare key */
    int klen, vlen;
} item;

/* The next item of *p, advancing *p past it and its comma; false at the end. */
static bool next_item(const char **p, item *it) {
    if (!*p || !**p) return false;
    const char *s = *p;
    const size_t n = strcspn(s, ",");
    const char *eq = memchr(s, '=', n);
    it->key = s;
    it->klen = (int)(eq ? (size_t)(eq - s) : n);
    it->val = eq ? eq + 1 : NULL;
    it->vlen = eq ? (int)(n - (size_t)(eq + 1 - s)) : 0;
    *p = s + n + (s[n] == ',');
    return true;
}

static bool key_is(const item *it, const char *k) {
    return (int)strlen(k) == it->klen && !strncmp(it->key, k, (size_t)it->klen);
}

static lpx_status bad_value(const char *what, const item *it, const char *expected) {
    return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda %s: %.*s=%.*s: expected %s", what, it->klen,
                      it->key, it->vlen, it->val ? it->val : "", expected);
}

/* A value 0 or 1. */
static lpx_status flag_of(const char *what, const item *it, int *out) {
    if (!it->val || it->vlen != 1 || (it->val[0] != '0' && it->val[0] != '1'))
        return bad_value(what, it, "0 or 1");
    *out = it->val[0] - '0';
    return LPX_OK;
}

/* A decimal integer in [lo, hi]. */
static lpx_status int_of(const char *what, const item *it, int lo, int hi, int *out) {
    char buf[16], *end = NULL;
    long v = -1;
    if (it->val && it->vlen >= 1 && it->vlen < (int)sizeof buf) {
        memcpy(buf, it->val, (size_t)it->vlen);
        buf[it->vlen] = '\0';
        v = strtol(buf, &end, 10);
    }
    if (!end || *end || v < lo || v > hi) {
        char range[48];
        snprintf(range, sizeof range, "an integer %d..%d", lo, hi);
        return bad_value(what, it, range);
    }
    *out = (int)v;
    return LPX_OK;
}

/* A set of the letters o, f, g, d (TK_*), or "-" for none. */
static lpx_status kernels_of(const char *what, const item *it, int *out) {
    if (!it->val || it->vlen < 1) return bad_value(what, it, "letters of o, f, g, d, or -");
    if (it->vlen == 1 && it->val[0] == '-') {
        *out = 0;
        return LPX_OK;
    }
    int m = 0;
    for (int i = 0; i < it->vlen; i++) {
        const char c = it->val[i];
        const int k = c == 'o' ? TK_O : c == 'f' ? TK_F : c == 'g' ? TK_G : c == 'd' ? TK_D : 0;
        if (!k) return bad_value(what, it, "letters of o, f, g, d, or -");
        m |= k;
    }
    *out = m;
    return LPX_OK;
}

/* Op names joined by '+' (SK_* in this order). */
static lpx_status skip_of(const item *it, unsigned *out) {
    static const char *const names[] = {"embed", "qkv",  "rope", "attn",  "o",
                                        "gu",    "down", "head", "sample"};
    if (!it->val || it->vlen == 0) return bad_value("tune", it, "op names joined by +");
    unsigned m = 0;
    for (int i = 0; i < it->vlen;) {
        int n = 0;
        while (i + n < it->vlen && it->val[i + n] != '+')
            n++;
        unsigned bit = 0;
        for (unsigned j = 0; j < sizeof names / sizeof *names; j++)
            if ((int)strlen(names[j]) == n && !strncmp(it->val + i, names[j], (size_t)n))
                bit = 1u << j;
        if (!bit)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "cuda tune: skip: unknown op '%.*s' (embed, qkv, rope, attn, o, gu, "
                              "down, head, sample, joined by +)",
                              n, it->val + i);
        m |= bit;
        i += n + 1;
    }
    *out = m;
    return LPX_OK;
}

lpx_status lpx_cuda_tune_parse(const char *s, cuda_tune_overrides *o) {
    const cuda_tune_overrides none = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0};
    *o = none;
    item it;
    while (next_item(&s, &it)) {
        const char *w = "tune";
        lpx_status st;
        if (it.klen == 0) continue; /* empty item: "a=1,,b=0" */
        if (key_is(&it, "qa"))
            st = flag_of(w, &it, &o->qa);
        else if (key_is(&it, "mv_small"))
            st = flag_of(w, &it, &o->mv_small);
        else if (key_is(&it, "early"))
            st = kernels_of(w, &it, &o->early);
        else if (key_is(&it, "late"))
            st = kernels_of(w, &it, &o->late);
        else if (key_is(&it, "solo"))
            st = kernels_of(w, &it, &o->solo);
        else if (key_is(&it, "pace"))
            st = int_of(w, &it, 0, CT_PACE_MAX, &o->pace);
        else if (key_is(&it, "graphs"))
            st = flag_of(w, &it, &o->graphs);
        else if (key_is(&it, "pdl"))
            st = flag_of(w, &it, &o->pdl);
        else if (key_is(&it, "qa_ctx"))
            st = int_of(w, &it, 0, 1 << 24, &o->qa_ctx);
        else if (key_is(&it, "attn_keys"))
            st = int_of(w, &it, 32, 1 << 20, &o->attn_keys);
        else if (key_is(&it, "attn_waves"))
            st = int_of(w, &it, 1, 64, &o->attn_waves);
        else if (key_is(&it, "wq"))
            st = flag_of(w, &it, &o->wq);
        else if (key_is(&it, "skip"))
            st = skip_of(&it, &o->skip);
        else
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "cuda tune: unknown key '%.*s' (qa, mv_small, early, late, solo, "
                              "pace, graphs, pdl, qa_ctx, attn_keys, attn_waves, wq, skip; "
                              "docs/dev.md)",
                              it.klen, it.key);
        LPX_TRY(st);
    }
    return LPX_OK;
}

lpx_status lpx_cuda_trace_parse(const char *s, cuda_trace_opts *t) {
    memset(t, 0, sizeof *t);
    t->blk_layer = -1;
    item it;
    while (next_item(&s, &it)) {
        if (it.klen == 0) continue;
        const bool bare = it.val == NULL;
        if (bare && key_is(&it, "timing")) {
            t->timing = true;
        } else if (bare && key_is(&it, "attn")) {
            t->attn = true;
        } else if (bare && key_is(&it, "mv")) {
            t->mv = true;
        } else if (key_is(&it, "blk")) {
            LPX_TRY(int_of("trace", &it, 0, 1 << 20, &t->blk_layer));
        } else if (key_is(&it, "blk_file")) {
            if (!it.val || it.vlen < 1 || it.vlen >= (int)sizeof t->blk_file)
                return bad_value("trace", &it, "a path");
            memcpy(t->blk_file, it.val, (size_t)it.vlen);
            t->blk_file[it.vlen] = '\0';
        } else {
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "cuda trace: unknown item '%.*s%s%.*s' (timing, attn, mv, blk=LAYER, "
                              "blk_file=PATH; docs/dev.md)",
                              it.klen, it.key, bare ? "" : "=", it.vlen, bare ? "" : it.val);
        }
    }
    return LPX_OK;
}

bool lpx_cuda_qa_shape_fits(const cuda_shape *sh, int max_cols) {
    if (sh->n_kv <= 0 || sh->n_heads % sh->n_kv || (sh->head_dim != 64 && sh->head_dim != 128) ||
        sh->d_model % 8 || sh->d_model > max_cols)
        return false;
    return sh->n_heads / sh->n_kv <= 8;
}

/* Registers a block of `threads` takes: allocated a warp at a time, in units of 8
 * a thread. */
static int block_regs(int regs, int threads) {
    return (regs + 7) / 8 * 8 * threads;
}

void lpx_cuda_tuning_resolve(const cuda_shape *sh, const cuda_facts *f,
                             const cuda_tune_overrides *o, cuda_tuning *t) {
    memset(t, 0, sizeof *t);
    t->qa = o->qa != 0 && f->qa_cluster > 0 && lpx_cuda_qa_shape_fits(sh, 8 * f->qa_threads);
    /* The small (56-register) projection kernel where one fused block and two
     * projection blocks fit an SM's registers only with its cap: Qwen3-0.6B -19 us
     * a step, Qwen2.5-0.5B (its fused kernel uncapped) +21 us when forced
     * (docs/lab/notebook.md row 49). */
    if (o->mv_small >= 0) {
        t->mv_small = o->mv_small != 0;
    } else if (t->qa) {
        const int fused = block_regs(f->qa_regs, f->qa_threads);
        t->mv_small = fused + 2 * block_regs(f->mv_small_regs, f->mv_threads) <= f->regs_per_sm &&
                      fused + 2 * block_regs(f->mv_regs, f->mv_threads) > f->regs_per_sm;
    }
    t->early = o->early >= 0 ? (unsigned)o->early : CT_EARLY_DEFAULT;
    t->late = o->late >= 0 ? (unsigned)o->late : CT_LATE_DEFAULT;
    t->early &= ~t->late;
    t->solo = o->solo >= 0 ? (unsigned)o->solo : CT_SOLO_DEFAULT;
    t->pace = o->pace >= 0 ? o->pace : CT_PACE_DEFAULT;
    t->mv_solo_smem = f->mv_solo_smem;
    t->graphs = o->graphs != 0;
    t->pdl = o->pdl != 0;
    t->qa_ctx = o->qa_ctx >= 0 ? o->qa_ctx : CT_QA_CTX_DEFAULT;
    t->attn_keys = o->attn_keys >= 0 ? o->attn_keys : CT_ATTN_KEYS_DEFAULT;
    t->attn_waves = o->attn_waves >= 0 ? o->attn_waves : AP_WAVES;
    t->skip = o->skip;
}
