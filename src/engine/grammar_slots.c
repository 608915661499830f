/* Structured outputs in the engine: the compiled grammars of the requests (shared by
 * those that give the same format, with their mask caches), and each row's mask. */
#include "engine/engine_impl.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Grammars kept after their last request, for the next one with the same schema. */
#define LPX_GRAM_KEEP 16
/* The mask cache of one grammar (docs/structured-outputs.md "Cost"). */
#define LPX_GRAM_MASK_BYTES ((size_t)64 << 20)

static void slot_free(lpx_gram_slot *g) {
    if (!g) return;
    lpx_gmasks_free(g->masks);
    lpx_grammar_free(g->g);
    free(g->key);
    free(g);
}

/* The vocabulary's bytes as the grammar sees them; under gram_mu. */
static lpx_status build_vocab(lpx_engine *e) {
    const lpx_tokenizer *t = e->model->tok;
    if (!t)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "response format: the model has no tokenizer, so its tokens' text is "
                          "unknown");
    const char **bytes = calloc((size_t)e->vocab, sizeof *bytes);
    size_t *lens = calloc((size_t)e->vocab, sizeof *lens);
    lpx_status st = LPX_OK;
    if (!bytes || !lens) st = lpx_errorf(LPX_ERR_NOMEM, "response format: out of memory");
    for (int32_t i = 0; st == LPX_OK && i < e->vocab; i++)
        bytes[i] = lpx_tokenizer_token_bytes(t, i, &lens[i]);
    if (st == LPX_OK) st = lpx_gvocab_create(e->vocab, bytes, lens, &e->gvocab);
    free(bytes);
    free(lens);
    return st;
}

static lpx_status compile(const lpx_request *r, lpx_grammar **g) {
    if (r->output_format == LPX_OUTPUT_JSON_OBJECT) return lpx_grammar_json_object(g);
    if (!r->json_schema)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "json_schema: a schema output needs its schema");
    if (r->output_format == LPX_OUTPUT_TOOL_CALLS)
        return lpx_grammar_tool_calls(r->json_schema, strlen(r->json_schema), g);
    return lpx_grammar_from_schema(r->json_schema, strlen(r->json_schema), "json_schema", g);
}

lpx_status lpx_gram_acquire(lpx_engine *e, const lpx_request *r, lpx_gram_slot **out) {
    *out = NULL;
    if (r->output_format != LPX_OUTPUT_JSON_OBJECT && r->output_format != LPX_OUTPUT_JSON_SCHEMA &&
        r->output_format != LPX_OUTPUT_TOOL_CALLS)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "output_format %d: expected 0, 1, 2 or 3",
                          (int)r->output_format);
    const char *schema =
        r->output_format != LPX_OUTPUT_JSON_OBJECT && r->json_schema ? r->json_schema : "";
    size_t n = strlen(schema);
    char *key = malloc(n + 2);
    if (!key) return lpx_errorf(LPX_ERR_NOMEM, "response format: out of memory");
    key[0] = (char)('0' + r->output_format);
    memcpy(key + 1, schema, n + 1);
    lpx_status st = LPX_OK;
    pthread_mutex_lock(&e->gram_mu);
    if (!e->gvocab) st = build_vocab(e);
    for (int32_t i = 0; st == LPX_OK && i < e->n_grams; i++)
        if (!strcmp(e->grams[i]->key, key)) {
            *out = e->grams[i];
            (*out)->refs++;
            (*out)->used = ++e->gram_clock;
        }
    pthread_mutex_unlock(&e->gram_mu);
    if (st != LPX_OK || *out) {
        free(key);
        return st;
    }
    /* Compiled outside the lock; a request with the same schema meanwhile compiles its
     * own, and the later insert finds the first (it is used, this copy freed). */
    lpx_gram_slot *g = calloc(1, sizeof *g);
    if (!g) {
        free(key);
        return lpx_errorf(LPX_ERR_NOMEM, "response format: out of memory");
    }
    g->key = key;
    g->mu = &e->gram_mu;
    st = compile(r, &g->g);
    if (st == LPX_OK) st = lpx_gmasks_create(g->g, e->gvocab, LPX_GRAM_MASK_BYTES, &g->masks);
    if (st != LPX_OK) {
        slot_free(g);
        return st;
    }
    pthread_mutex_lock(&e->gram_mu);
    lpx_gram_slot *have = NULL;
    for (int32_t i = 0; i < e->n_grams && !have; i++)
        if (!strcmp(e->grams[i]->key, g->key)) have = e->grams[i];
    if (have) {
        slot_free(g);
        g = have;
    } else {
        /* Past LPX_GRAM_KEEP the least recently used unreferenced grammar goes. */
        int32_t victim = -1;
        for (int32_t i = 0; e->n_grams >= LPX_GRAM_KEEP && i < e->n_grams; i++)
            if (e->grams[i]->refs == 0 &&
                (victim < 0 || e->grams[i]->used < e->grams[victim]->used))
                victim = i;
        if (victim >= 0) {
            slot_free(e->grams[victim]);
            e->grams[victim] = e->grams[--e->n_grams];
        }
        if (e->n_grams == e->cap_grams) {
            int32_t cap = e->cap_grams ? e->cap_grams * 2 : 8;
            lpx_gram_slot **v = realloc(e->grams, (size_t)cap * sizeof *v);
            if (v) e->grams = v, e->cap_grams = cap;
        }
        if (e->n_grams < e->cap_grams)
            e->grams[e->n_grams++] = g;
        else
            st = lpx_errorf(LPX_ERR_NOMEM, "response format: out of memory");
    }
    if (st == LPX_OK) {
        g->refs++;
        g->used = ++e->gram_clock;
        *out = g;
    }
    pthread_mutex_unlock(&e->gram_mu);
    if (st != LPX_OK) slot_free(g);
    return st;
}

void lpx_gram_release(lpx_gram_slot *g) {
    if (!g) return;
    pthread_mutex_lock(g->mu);
    g->refs--;
    pthread_mutex_unlock(g->mu);
}

void lpx_grams_free(lpx_engine *e) {
    for (int32_t i = 0; i < e->n_grams; i++)
        slot_free(e->grams[i]);
    free(e->grams);
    e->grams = NULL;
    e->n_grams = 0;
    lpx_gvocab_free(e->gvocab);
    e->gvocab = NULL;
}

lpx_status lpx_gram_mask(lpx_engine *e, const lpx_seq *s, const uint32_t **allow,
                         int32_t *n_allowed) {
    const uint32_t *m;
    LPX_TRY(lpx_gmasks_get(s->gram->masks, &s->gm, &m, n_allowed));
    size_t words = ((size_t)e->vocab + 31) / 32;
    memcpy(e->gmask, m, words * sizeof *m);
    if (lpx_gmatch_can_end(&s->gm) && !s->ignore_eos)
        for (int i = 0; i < e->n_eos; i++) {
            int32_t t = e->eos[i];
            if (t < 0 || t >= e->vocab || (e->gmask[t >> 5] >> (t & 31) & 1)) continue;
            e->gmask[t >> 5] |= 1u << (t & 31);
            ++*n_allowed;
        }
    *allow = e->gmask;
    return LPX_OK;
}
