/* Quality checks on one generated output: truncated, repetitive, leaked
 * special tokens, unbalanced brackets/quotes, empty. Pure functions over text, so
 * the same checks serve in-process and --server results (docs/batch.md). */
#ifndef LPX_BATCH_QUALITY_H
#define LPX_BATCH_QUALITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    LPX_BQ_TRUNCATED = 1,  /* finish_reason "length" */
    LPX_BQ_REPETITIVE = 2, /* repeated n-gram ratio above the threshold */
    LPX_BQ_LEAKED = 4,     /* a special token's text appears in the output */
    LPX_BQ_UNBALANCED = 8, /* brackets/quotes (ASCII and CJK) do not pair up */
    LPX_BQ_EMPTY = 16,     /* no text but white space */
    LPX_BQ_COUNT = 5,
};

typedef struct lpx_bq_opts {
    int32_t ngram;               /* units per n-gram (default 3) */
    double repeat_ratio;         /* flag when repeated n-grams / n-grams > this (default 0.5) */
    int32_t min_ngrams;          /* fewer n-grams than this: never repetitive (default 8) */
    const char *const *specials; /* texts that must not appear in an output */
    size_t n_specials;
} lpx_bq_opts;

/* Texts flagged when no model gives its own (server mode), plus the model's. */
extern const char *const lpx_bq_default_specials[];
extern const size_t lpx_bq_n_default_specials;

void lpx_bq_opts_init(lpx_bq_opts *o);
/* Flag names in bit order: "truncated", "repetitive", "leaked_special", "unbalanced". */
const char *lpx_bq_flag_name(int bit_index);

/* Ratio of n-grams that repeat an earlier one; units are whitespace-separated
 * words, and every CJK/fullwidth character is a unit of its own (no spaces
 * there). *n_ngrams gets the number of n-grams. */
double lpx_bq_repeat_ratio(const char *text, size_t len, int32_t n, int64_t *n_ngrams);
/* True when brackets and quotes pair up: () [] {} 「」 『』 “” ‘’ （） 《》 【】
 * nest properly; ASCII " appears an even number of times. */
bool lpx_bq_balanced(const char *text, size_t len);
/* All flags of one output. */
uint32_t lpx_bq_check(const lpx_bq_opts *o, const char *text, size_t len, bool finished_by_length);

#endif
