/* Output quality checks (see quality.h and docs/batch.md for thresholds). */
#include "batch/quality.h"

#include <stdlib.h>
#include <string.h>

const char *const lpx_bq_default_specials[] = {
    "<|im_end|>",        "<|im_start|>",      "<|endoftext|>",
    "<|eot_id|>",        "<|end_of_text|>",   "<|start_header_id|>",
    "<|end_header_id|>", "<|begin_of_text|>", "</s>",
};
const size_t lpx_bq_n_default_specials =
    sizeof lpx_bq_default_specials / sizeof lpx_bq_default_specials[0];

void lpx_bq_opts_init(lpx_bq_opts *o) {
    o->ngram = 3;
    o->repeat_ratio = 0.5;
    o->min_ngrams = 8;
    o->specials = lpx_bq_default_specials;
    o->n_specials = lpx_bq_n_default_specials;
}

const char *lpx_bq_flag_name(int bit_index) {
    static const char *const names[LPX_BQ_COUNT] = {"truncated", "repetitive", "leaked_special",
                                                    "unbalanced", "empty"};
    return bit_index >= 0 && bit_index < LPX_BQ_COUNT ? names[bit_index] : "?";
}

/* Decodes one UTF-8 character at s[*i] (advancing *i); invalid bytes come
 * back as themselves so nothing loops. */
static uint32_t next_cp(const unsigned char *s, size_t len, size_t *i) {
    uint32_t c = s[*i];
    int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    if (*i + (size_t)extra >= len) extra = 0;
    if (extra) c &= 0x3Fu >> extra;
    (*i)++;
    for (int k = 0; k < extra; k++) {
        if ((s[*i] & 0xC0) != 0x80) return c;
        c = (c << 6) | (s[*i] & 0x3F);
        (*i)++;
    }
    return c;
}

static bool is_space(uint32_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == 0x3000;
}

/* CJK, kana, hangul, fullwidth forms: written without spaces, one unit each. */
static bool is_cjk(uint32_t c) {
    return (c >= 0x2E80 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFF00 && c <= 0xFFEF) ||
           (c >= 0x20000 && c <= 0x2FFFF);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double lpx_bq_repeat_ratio(const char *text, size_t len, int32_t n, int64_t *n_ngrams) {
    *n_ngrams = 0;
    if (n < 1 || len == 0) return 0.0;
    /* unit hashes: at most one unit per byte */
    uint64_t *units = malloc(len * sizeof *units);
    if (!units) return 0.0;
    const unsigned char *s = (const unsigned char *)text;
    size_t n_units = 0, i = 0;
    uint64_t h = 0;
    bool in_word = false;
    while (i < len) {
        uint32_t c = next_cp(s, len, &i);
        if (is_space(c) || is_cjk(c)) {
            if (in_word) units[n_units++] = h;
            in_word = false;
            if (is_cjk(c)) units[n_units++] = 0x9E3779B97F4A7C15ull ^ c;
            continue;
        }
        if (!in_word) h = 1469598103934665603ull;
        in_word = true;
        h = (h ^ c) * 1099511628211ull;
    }
    if (in_word) units[n_units++] = h;
    if (n_units < (size_t)n) {
        free(units);
        return 0.0;
    }
    size_t m = n_units - (size_t)n + 1;
    /* n-gram hashes, written over the unit array's front (index j reads units j..j+n-1 >= j) */
    for (size_t j = 0; j < m; j++) {
        uint64_t g = 0xCBF29CE484222325ull;
        for (int32_t k = 0; k < n; k++)
            g = (g ^ units[j + (size_t)k]) * 0x100000001B3ull + (uint64_t)k;
        units[j] = g;
    }
    qsort(units, m, sizeof *units, cmp_u64);
    size_t distinct = m ? 1 : 0;
    for (size_t j = 1; j < m; j++)
        distinct += units[j] != units[j - 1];
    free(units);
    *n_ngrams = (int64_t)m;
    return (double)(m - distinct) / (double)m;
}

bool lpx_bq_balanced(const char *text, size_t len) {
    static const uint32_t open[] = {'(',    '[',    '{',    0x300C, 0x300E,
                                    0x201C, 0x2018, 0xFF08, 0x300A, 0x3010};
    static const uint32_t close[] = {')',    ']',    '}',    0x300D, 0x300F,
                                     0x201D, 0x2019, 0xFF09, 0x300B, 0x3011};
    enum { N_PAIRS = sizeof open / sizeof open[0], MAX_DEPTH = 256 };
    uint32_t stack[MAX_DEPTH];
    size_t depth = 0, quotes = 0, i = 0;
    const unsigned char *s = (const unsigned char *)text;
    while (i < len) {
        uint32_t c = next_cp(s, len, &i);
        if (c == '"') {
            quotes++;
            continue;
        }
        for (size_t p = 0; p < N_PAIRS; p++) {
            if (c == open[p]) {
                if (depth == MAX_DEPTH) return false;
                stack[depth++] = close[p];
                break;
            }
            /* U+2019 doubles as the apostrophe (don’t): only a closer when one is open */
            if (c == close[p]) {
                if (depth && stack[depth - 1] == c)
                    depth--;
                else if (c != 0x2019)
                    return false;
                break;
            }
        }
    }
    return depth == 0 && quotes % 2 == 0;
}

uint32_t lpx_bq_check(const lpx_bq_opts *o, const char *text, size_t len, bool finished_by_length) {
    uint32_t f = 0;
    if (finished_by_length) f |= LPX_BQ_TRUNCATED;
    int64_t n_ngrams;
    double r = lpx_bq_repeat_ratio(text, len, o->ngram, &n_ngrams);
    if (n_ngrams >= o->min_ngrams && r > o->repeat_ratio) f |= LPX_BQ_REPETITIVE;
    for (size_t k = 0; k < o->n_specials; k++) {
        const char *sp = o->specials[k];
        size_t sl = strlen(sp);
        if (!sl || sl > len) continue;
        for (size_t j = 0; j + sl <= len; j++)
            if (text[j] == sp[0] && !memcmp(text + j, sp, sl)) {
                f |= LPX_BQ_LEAKED;
                break;
            }
        if (f & LPX_BQ_LEAKED) break;
    }
    if (!lpx_bq_balanced(text, len)) f |= LPX_BQ_UNBALANCED;
    bool blank = true;
    for (size_t i = 0; i < len && blank;)
        blank = is_space(next_cp((const unsigned char *)text, len, &i));
    if (blank) f |= LPX_BQ_EMPTY;
    return f;
}
