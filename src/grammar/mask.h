/* Token masks: which tokens of a vocabulary the grammar allows from a matcher's state.
 *
 * The vocabulary is a byte trie of the tokens' texts, laid out in depth-first order,
 * so that a mask is one scan of it that skips a whole subtree as soon as its prefix
 * is refused. Masks are cached per state (a state recurs: every character inside a
 * free string is the same state), so a state costs one scan the first time and a hash
 * lookup after; within and across scans, the states met are interned and their byte
 * transitions cached, so a trie node costs a matcher step only for a (state, byte)
 * pair not seen before. Token bytes come in as arrays: this layer does not know tokenizers. */
#ifndef LPX_GRAMMAR_MASK_H
#define LPX_GRAMMAR_MASK_H

#include "grammar/grammar.h"

#include <stddef.h>
#include <stdint.h>

typedef struct lpx_gvocab lpx_gvocab;

/* bytes[i][0..lens[i]) is what token i adds to the text; NULL or length 0: a token the
 * grammar never allows (special tokens, holes). */
lpx_status lpx_gvocab_create(int32_t n_vocab, const char *const *bytes, const size_t *lens,
                             lpx_gvocab **out);
void lpx_gvocab_free(lpx_gvocab *v);
int32_t lpx_gvocab_size(const lpx_gvocab *v);
size_t lpx_gvocab_nodes(const lpx_gvocab *v); /* trie nodes, for reports */

/* The masks of one grammar over one vocabulary (a cache of at most max_bytes of
 * masks; 0: 64 MiB). Used by one thread at a time. */
typedef struct lpx_gmasks lpx_gmasks;

lpx_status lpx_gmasks_create(const lpx_grammar *g, const lpx_gvocab *v, size_t max_bytes,
                             lpx_gmasks **out);
void lpx_gmasks_free(lpx_gmasks *c);
/* The tokens allowed from m's state: bit i of (*mask)[i / 32] (held by the cache, valid
 * until the next call), and how many. The end of the output (EOS) is not in it: it is
 * allowed where lpx_gmatch_can_end. */
lpx_status lpx_gmasks_get(lpx_gmasks *c, const lpx_gmatch *m, const uint32_t **mask,
                          int32_t *n_allowed);

typedef struct lpx_gmask_stats {
    int64_t hits, misses;  /* lookups answered from the cache / by a scan */
    int64_t nodes_visited; /* trie nodes the scans stepped into */
    int64_t steps;         /* matcher steps the scans made (the others were transitions
                              cached per state and byte) */
    int64_t trans_resets;  /* times the transition cache passed half the budget */
    size_t bytes;          /* masks held */
} lpx_gmask_stats;

void lpx_gmasks_stats(const lpx_gmasks *c, lpx_gmask_stats *out);

#endif
