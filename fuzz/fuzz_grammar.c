/* libFuzzer target for structured outputs (src/grammar/): the schema compiler, the
 * matcher and the token masks. The input is a JSON Schema, then a NUL and the bytes of
 * a walk: each byte is fed when the grammar takes it, else it picks one of the bytes the
 * grammar allows there (so walks go deep into the grammar). Without a NUL the input is
 * a schema and the walk is empty. The first byte of the walk chooses the response
 * format json_object instead of the schema when it is 'o'.
 *
 * Besides crashes, sanitizer reports, hangs and unbounded memory, the target aborts
 * when the parts disagree: a byte in lpx_gmatch_next_bytes that lpx_gmatch_feed
 * refuses (or the other way round), min_remaining 0 where the document may not end,
 * and a token mask that allows a token whose bytes the matcher refuses, or refuses
 * one it takes. Built by scripts/fuzz.sh. */
#include "grammar/grammar.h"
#include "grammar/mask.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WALK_MAX 96

/* A small vocabulary of JSON-ish pieces, single bytes and multi-byte UTF-8. */
static const char *const vocab[] = {
    "{",        "}",
    "[",        "]",
    ",",        ":",
    "\"",       " ",
    "\n",       "\n  ",
    "0",        "1",
    "-",        ".",
    "e",        "true",
    "null",     "false",
    "\"a\"",    "\":",
    "a",        "ab",
    "\\",       "\\u00",
    "\xc3\xa9", "\xe4\xb8\x96",
    "{\"",      "\"}",
    "12",       "},{",
    "<",        "/",
    ">",        "x",
    "\t",       "",
};
#define N_VOCAB ((int32_t)(sizeof vocab / sizeof *vocab))

/* Whether the grammar takes the bytes t[0..n) from state st[0..n_st) (stepped one
 * byte at a time on copies: m itself does not move). */
static bool takes(const lpx_grammar *g, const int32_t *st, size_t n_st, const char *t, size_t n) {
    size_t cap_a = n_st ? n_st : 1, cap_b = 0;
    int32_t *a = malloc(cap_a * sizeof *a), *b = NULL;
    if (!a) return false;
    memcpy(a, st, n_st * sizeof *a);
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        int64_t len = lpx_grammar_step(g, a, n_st, (uint8_t)t[i], &b, &cap_b);
        ok = len > 0;
        int32_t *x = a;
        size_t c = cap_a;
        a = b, cap_a = cap_b;
        b = x, cap_b = c;
        n_st = ok ? (size_t)len : 0;
    }
    free(a);
    free(b);
    return ok;
}

static void check_state(const lpx_grammar *g, lpx_gmatch *m, lpx_gmasks *masks) {
    size_t n_st;
    const int32_t *st = lpx_gmatch_state(m, &n_st);
    uint8_t set[32];
    lpx_gmatch_next_bytes(m, set);
    bool none = true;
    for (unsigned b = 0; b < 256; b++) {
        bool in = set[b >> 3] >> (b & 7) & 1;
        char t = (char)b;
        if (in != takes(g, st, n_st, &t, 1)) abort();
        if (in != lpx_grammar_state_takes(g, st, n_st, (uint8_t)b)) abort();
        none &= !in;
    }
    if (none != lpx_gmatch_no_next(m)) abort();
    if ((lpx_gmatch_min_remaining(m) == 0) != lpx_gmatch_can_end(m)) abort();
    if (!masks) return;
    const uint32_t *mask;
    int32_t n_allowed;
    if (lpx_gmasks_get(masks, m, &mask, &n_allowed) != LPX_OK) return;
    int32_t count = 0;
    for (int32_t i = 0; i < N_VOCAB; i++) {
        bool allowed = mask[i / 32] >> (i % 32) & 1;
        count += allowed;
        if (allowed != (vocab[i][0] && takes(g, st, n_st, vocab[i], strlen(vocab[i])))) abort();
    }
    if (count != n_allowed) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    const uint8_t *walk_in = nul ? nul + 1 : data + size;
    size_t n_walk_in = nul ? size - slen - 1 : 0;
    lpx_grammar *g = NULL;
    lpx_status st = n_walk_in && walk_in[0] == 'o'
                        ? lpx_grammar_json_object(&g)
                        : lpx_grammar_from_schema((const char *)data, slen, "schema", &g);
    if (st != LPX_OK) return 0;
    size_t n_rules, n_elems;
    lpx_grammar_size(g, &n_rules, &n_elems);

    size_t lens[N_VOCAB];
    for (int32_t i = 0; i < N_VOCAB; i++)
        lens[i] = strlen(vocab[i]);
    lpx_gvocab *v = NULL;
    lpx_gmasks *masks = NULL;
    if (lpx_gvocab_create(N_VOCAB, vocab, lens, &v) == LPX_OK)
        lpx_gmasks_create(g, v, 1 << 20, &masks);

    lpx_gmatch m;
    if (lpx_gmatch_init(&m, g) != LPX_OK) goto out;
    size_t n = 0;
    check_state(g, &m, masks);
    for (size_t i = 0; i < n_walk_in && n < WALK_MAX; i++) {
        uint8_t b = walk_in[i];
        if (!lpx_gmatch_feed(&m, &b, 1)) {
            uint8_t set[32];
            lpx_gmatch_next_bytes(&m, set);
            int count = 0;
            for (unsigned k = 0; k < 256; k++)
                count += set[k >> 3] >> (k & 7) & 1;
            if (!count) break;
            int pick = b % count;
            for (unsigned k = 0; k < 256; k++)
                if ((set[k >> 3] >> (k & 7) & 1) && pick-- == 0) {
                    b = (uint8_t)k;
                    break;
                }
            if (!lpx_gmatch_feed(&m, &b, 1)) abort();
        }
        n++;
        if (i % 8 == 7 || i + 1 == n_walk_in) check_state(g, &m, masks);
    }
    lpx_gmatch_free(&m);
out:
    lpx_gmasks_free(masks);
    lpx_gvocab_free(v);
    lpx_grammar_free(g);
    return 0;
}
