/* The BPE model: vocabulary and merge hash maps, the byte-level alphabet, and
 * the merge loop (a binary heap of candidate pairs over a linked list of
 * symbols, O(n log n) per word), as `tokenizers`' Word::merge_all does it. */
#include "base/checked.h"
#include "base/error.h"
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- hashing ---------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a, then a final mix */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 32);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static size_t pow2_cap(size_t n_expected) {
    size_t cap = 16;
    while (cap < n_expected * 2)
        cap <<= 1;
    return cap;
}

lpx_status tok_strmap_init(tok_strmap *m, size_t n_expected) {
    m->cap = pow2_cap(n_expected);
    m->n = 0;
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: vocabulary map of %zu", m->cap);
    return LPX_OK;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* Capacity is fixed at twice the expected count, which the loaders know up front. */
void tok_strmap_put(tok_strmap *m, const lpx_tokenizer *t, int32_t id) {
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    size_t mask = m->cap - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t v = m->slots[i];
        if (!v) {
            if (m->n + 1 >= m->cap) return; /* cannot happen: cap >= 2 * count */
            m->slots[i] = (uint32_t)id + 1;
            m->n++;
            return;
        }
        int32_t o = (int32_t)v - 1;
        if (t->text_len[o] == n && !memcmp(t->text[o], s, n)) {
            m->slots[i] = (uint32_t)id + 1;
            return;
        }
    }
}

int32_t tok_strmap_get(const tok_strmap *m, const lpx_tokenizer *t, const char *s, size_t n) {
    size_t mask = m->cap - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t v = m->slots[i];
        if (!v) return -1;
        int32_t o = (int32_t)v - 1;
        if (t->text_len[o] == n && !memcmp(t->text[o], s, n)) return o;
    }
}

lpx_status tok_mergemap_init(tok_mergemap *m, size_t n_expected) {
    m->cap = pow2_cap(n_expected);
    m->n = 0;
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: merge map of %zu", m->cap);
    return LPX_OK;
}

void tok_mergemap_free(tok_mergemap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* A repeated pair takes the later rank, as collecting merges into a HashMap does. */
void tok_mergemap_put(tok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t mask = m->cap - 1;
    for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
        tok_merge *e = &m->slots[i];
        if (e->key == key || !e->key) {
            if (!e->key) {
                if (m->n + 1 >= m->cap) return; /* cannot happen: cap >= 2 * count */
                m->n++;
            }
            e->key = key;
            e->rank = rank;
            e->id = id;
            return;
        }
    }
}

const tok_merge *tok_mergemap_get(const tok_mergemap *m, int32_t a, int32_t b) {
    if (!m->slots) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t mask = m->cap - 1;
    for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
        const tok_merge *e = &m->slots[i];
        if (e->key == key) return e;
        if (!e->key) return NULL;
    }
}

/* ---- UTF-8 and the byte-level alphabet -------------------------------------------- */

size_t tok_utf8_len(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

bool tok_is_whitespace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other
 * 68 (0x00-0x20, 0x7F-0xA0, 0xAD) to U+0100.. in byte order. */
static uint32_t byte_to_cp(unsigned b) {
    if (b <= 0x20) return 256 + b;
    if (b >= 0x7F && b <= 0xA0) return 256 + 33 + (b - 0x7F);
    if (b == 0xAD) return 256 + 67;
    return b;
}

int tok_byte_to_utf8(unsigned char b, char out[2]) {
    uint32_t cp = byte_to_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int tok_utf8_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_to_cp(cp) == cp ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(0x7F + cp - 256 - 33);
    return cp == 256 + 67 ? 0xAD : -1;
}

/* ---- the merge loop --------------------------------------------------------------- */

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;       /* bytes covered; 0 once merged into its left neighbour */
} sym;

typedef struct cand {
    uint32_t rank, pos;
    int32_t id;
} cand;

static bool cand_less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(cand *h, size_t *n, cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n) {
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < *n && cand_less(&h[l], best)) m = l, best = &h[l];
        if (r < *n && cand_less(&h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = last;
    return top;
}

static void sym_push(sym *v, size_t *n, int32_t id, uint32_t len) {
    v[*n] = (sym){id, (int32_t)*n - 1, (int32_t)*n + 1, len};
    (*n)++;
}

/* Words up to this many bytes run on stack buffers (most words are short). */
#define SMALL_WORD 64

lpx_status tok_bpe_word(const lpx_tokenizer *t, const char *w, size_t n, tok_ids *out) {
    if (n == 0) return LPX_OK;
    if (n > INT32_MAX / 2) return lpx_errorf(LPX_ERR_TOO_LONG, "tokenizer: word of %zu bytes", n);
    if (t->ignore_merges) {
        int32_t id = tok_strmap_get(&t->vocab, t, w, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    /* Every symbol covers at least one byte: n symbols at most. Each merge removes
     * one symbol and pushes at most two pairs: 3n candidates at most. */
    sym s_small[SMALL_WORD];
    cand h_small[3 * SMALL_WORD];
    sym *s = s_small;
    cand *heap = h_small;
    if (n > SMALL_WORD) {
        s = malloc(n * sizeof *s);
        heap = malloc(3 * n * sizeof *heap);
        if (!s || !heap) {
            free(s);
            free(heap);
            return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: word of %zu bytes", n);
        }
    }
    size_t ns = 0;
    /* Unknown characters: a pending <unk> that later unknowns extend (fuse_unk). */
    int32_t unk_len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = tok_utf8_len((const unsigned char *)w + i, n - i, &cp);
        if (cl == 0) cl = 1; /* cannot happen: input is validated UTF-8 */
        int32_t id = tok_strmap_get(&t->vocab, t, w + i, cl);
        if (id >= 0) {
            if (unk_len) sym_push(s, &ns, t->unk_id, (uint32_t)unk_len);
            unk_len = 0;
            sym_push(s, &ns, id, (uint32_t)cl);
        } else {
            bool fell_back = false;
            if (t->byte_fallback) {
                fell_back = true;
                for (size_t k = 0; k < cl; k++)
                    fell_back &= t->byte_ids[(unsigned char)w[i + k]] >= 0;
                for (size_t k = 0; fell_back && k < cl; k++)
                    sym_push(s, &ns, t->byte_ids[(unsigned char)w[i + k]], 1);
            }
            if (!fell_back && t->unk_id >= 0) {
                if (unk_len && !t->fuse_unk) {
                    sym_push(s, &ns, t->unk_id, (uint32_t)unk_len);
                    unk_len = 0;
                }
                unk_len += (int32_t)cl;
            }
        }
        i += cl;
    }
    if (unk_len) sym_push(s, &ns, t->unk_id, (uint32_t)unk_len);
    lpx_status st = LPX_OK;
    if (ns == 0) goto done;
    s[ns - 1].next = -1;

    size_t nh = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        const tok_merge *m = tok_mergemap_get(&t->merges, s[i].id, s[i + 1].id);
        if (m) heap_push(heap, &nh, (cand){m->rank, (uint32_t)i, m->id});
    }
    while (nh) {
        cand top = heap_pop(heap, &nh);
        sym *cur = &s[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        sym *right = &s[cur->next];
        const tok_merge *m = tok_mergemap_get(&t->merges, cur->id, right->id);
        if (!m || m->id != top.id) continue; /* stale: a neighbour changed since */
        cur->id = top.id;
        cur->len += right->len;
        right->len = 0;
        cur->next = right->next;
        if (cur->next >= 0) s[cur->next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) {
            const tok_merge *pm = tok_mergemap_get(&t->merges, s[cur->prev].id, cur->id);
            if (pm) heap_push(heap, &nh, (cand){pm->rank, (uint32_t)cur->prev, pm->id});
        }
        if (cur->next >= 0) {
            const tok_merge *nm = tok_mergemap_get(&t->merges, cur->id, s[cur->next].id);
            if (nm) heap_push(heap, &nh, (cand){nm->rank, top.pos, nm->id});
        }
    }
    for (int32_t i = 0; i >= 0 && st == LPX_OK; i = s[i].next)
        st = tok_ids_push(out, s[i].id);
done:
    if (s != s_small) {
        free(s);
        free(heap);
    }
    return st;
}
