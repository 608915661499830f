/* Internals shared by the tokenizer's files: the tokenizer struct, the string
 * and merge hash maps, the normalizer / pre-tokenizer pipeline and the BPE
 * merge loop. The pipeline mirrors Hugging Face `tokenizers`:
 *   added tokens split out -> normalizer -> pre-tokenizer splits -> BPE per word
 *   -> post-processor (BOS/EOS). */
#ifndef LPX_TOKENIZER_INTERNAL_H
#define LPX_TOKENIZER_INTERNAL_H

#include "tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Limits on what a tokenizer file may ask for (checked at load). */
#define TOK_MAX_VOCAB (1 << 22)
#define TOK_MAX_TOKEN_BYTES 4096
#define TOK_MAX_OPS 16
#define TOK_MAX_AFFIX 4

/* ---- string -> id map (open addressing; keys point into the tokenizer) ---- */
typedef struct tok_strmap {
    uint32_t *slots; /* id + 1, 0 = empty */
    size_t cap;      /* power of two */
    size_t n;
} tok_strmap;

/* ---- (left id, right id) -> (rank, merged id) ------------------------------ */
typedef struct tok_merge {
    uint64_t key; /* (left << 32 | right) + 1, 0 = empty */
    uint32_t rank;
    int32_t id;
} tok_merge;

typedef struct tok_mergemap {
    tok_merge *slots;
    size_t cap;
    size_t n;
} tok_mergemap;

/* ---- pipeline ------------------------------------------------------------- */
typedef enum tok_behavior {
    TOK_REMOVED = 0,
    TOK_ISOLATED = 1,
    TOK_MERGED_PREV = 2,
    TOK_MERGED_NEXT = 3,
    TOK_CONTIGUOUS = 4,
} tok_behavior;

typedef enum tok_norm_kind {
    TOK_NORM_NFC = 0,
    TOK_NORM_NFD = 1,
    TOK_NORM_NFKC = 2,
    TOK_NORM_NFKD = 3,
    TOK_NORM_PREPEND = 4, /* a: text to prepend to a non-empty piece */
    TOK_NORM_REPLACE = 5, /* a -> b, literal */
    TOK_NORM_LOWERCASE = 6,
} tok_norm_kind;

typedef struct tok_norm {
    tok_norm_kind kind;
    char *a, *b;
    size_t a_len, b_len;
} tok_norm;

typedef enum tok_pre_kind {
    TOK_PRE_SPLIT_REGEX = 0,  /* re, behavior, invert */
    TOK_PRE_SPLIT_STRING = 1, /* a, behavior, invert */
    TOK_PRE_DIGITS = 2,       /* flag: individual digits */
    TOK_PRE_BYTELEVEL = 3,    /* flag: add_prefix_space; re: GPT-2 regex or NULL */
    TOK_PRE_METASPACE = 4,    /* a: replacement; prepend: 0 never 1 first 2 always; flag: split */
} tok_pre_kind;

typedef struct tok_pre {
    tok_pre_kind kind;
    pcre2_code *re;
    tok_behavior behavior;
    bool invert, flag;
    int prepend;
    char *a;
    size_t a_len;
} tok_pre;

typedef struct tok_added {
    int32_t id;
    char *text;
    size_t len;
    bool special, normalized, lstrip, rstrip, single_word;
} tok_added;

typedef struct tok_trie_node {
    int32_t child, sibling; /* first child, next sibling: 0 = none */
    int16_t added[2];       /* index into added ending here, by normalized; -1 none */
    unsigned char byte;     /* the edge from the parent */
} tok_trie_node;

/* Per-token flags. */
enum {
    TOKF_SPECIAL = 1, /* an added token marked special: skipped by skip_special */
    TOKF_BYTE = 2,    /* SentencePiece byte-fallback token <0xNN> */
};

struct lpx_tokenizer {
    int32_t n_vocab;    /* ids are 0 .. n_vocab-1; holes have text NULL */
    char **text;        /* [n_vocab] token text as stored (NUL-terminated) */
    uint32_t *text_len; /* [n_vocab] */
    char **dec;         /* [n_vocab] decoded bytes (not NUL-terminated) */
    uint32_t *dec_len;  /* [n_vocab] */
    uint8_t *flags;     /* [n_vocab] TOKF_* */
    size_t max_dec_len;
    size_t max_text_len; /* longest token text, in bytes */

    tok_strmap vocab; /* model vocabulary: text -> id */
    tok_mergemap merges;
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;        /* -1 when none */
    int32_t byte_ids[256]; /* <0xNN> token ids (byte fallback), -1 when absent */

    tok_added *added; /* added tokens, matched in the text first */
    int n_added;
    /* A trie of the added tokens' bytes: matching at a position costs the length of
     * the longest token that starts there, not the number of tokens (a model with
     * 32,000 control tokens all starting with '<'). Node 0 is the root. */
    tok_trie_node *trie; /* [n_trie] */
    size_t n_trie;

    tok_norm norms[TOK_MAX_OPS];
    int n_norms;
    tok_pre pres[TOK_MAX_OPS];
    int n_pres;

    bool dec_bytelevel;     /* decoder maps byte-level characters back to bytes */
    bool dec_byte_fallback; /* decoder turns <0xNN> tokens into bytes */
    char *dec_space;        /* decoder replaces this (e.g. "▁") with a space; NULL: none */
    size_t dec_space_len;
    int dec_strip_lead; /* leading spaces removed from the whole output (SentencePiece) */

    int32_t prefix[TOK_MAX_AFFIX], suffix[TOK_MAX_AFFIX]; /* post-processor ids */
    int n_prefix, n_suffix;
    int32_t bos, eos;
};

/* Maps. */
lpx_status tok_strmap_init(tok_strmap *m, size_t n_expected);
void tok_strmap_free(tok_strmap *m);
/* Inserts (or replaces: the later id wins, as a JSON object's duplicate keys do). */
void tok_strmap_put(tok_strmap *m, const lpx_tokenizer *t, int32_t id);
int32_t tok_strmap_get(const tok_strmap *m, const lpx_tokenizer *t, const char *s, size_t len);
lpx_status tok_mergemap_init(tok_mergemap *m, size_t n_expected);
void tok_mergemap_free(tok_mergemap *m);
void tok_mergemap_put(tok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
const tok_merge *tok_mergemap_get(const tok_mergemap *m, int32_t a, int32_t b);

/* Building (shared by the JSON and GGUF loaders). */
lpx_status tok_alloc(lpx_tokenizer **out, int32_t n_vocab);
lpx_status tok_set_text(lpx_tokenizer *t, int32_t id, const char *s, size_t len);
lpx_status tok_add_added(lpx_tokenizer *t, const tok_added *a);
lpx_status tok_add_merge(lpx_tokenizer *t, const char *a, size_t a_len, const char *b, size_t b_len,
                         uint32_t rank, const char *where);
lpx_status tok_compile_regex(const char *pattern, size_t len, pcre2_code **out);
/* The GPT-2 pattern used by ByteLevel(use_regex = true). */
extern const char tok_gpt2_regex[];
/* The byte of a "<0xHH>" token text (upper-case hex), -1 for any other text. */
int tok_parse_byte_token(const char *s, size_t n);
/* Finishes loading: decoded forms, byte tokens, added-token index. */
lpx_status tok_finish(lpx_tokenizer *t);

/* Encoding helpers (tokenizer_pretok.c, tokenizer_bpe.c). */
typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf;
typedef struct tok_span {
    size_t off, len;
} tok_span;
typedef struct tok_spans {
    tok_span *v;
    size_t n, cap;
} tok_spans;
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

lpx_status tok_buf_append(tok_buf *b, const void *s, size_t n);
lpx_status tok_spans_push(tok_spans *s, size_t off, size_t len);
lpx_status tok_ids_push(tok_ids *ids, int32_t id);

/* Normalizes text into out (replacing out's content). */
lpx_status tok_normalize(const lpx_tokenizer *t, const char *s, size_t n, tok_buf *out);
/* Splits the piece buf[span] into words (appended to words; new text goes to buf). */
lpx_status tok_pretokenize(const lpx_tokenizer *t, tok_buf *buf, tok_span piece, bool first_piece,
                           tok_spans *words, pcre2_match_data *md);
/* Byte-level mapping of one byte to its UTF-8 character (1 or 2 bytes). */
int tok_byte_to_utf8(unsigned char b, char out[2]);
/* Inverse: code point -> byte, -1 when the code point is not in the mapping. */
int tok_utf8_cp_to_byte(uint32_t cp);
/* Runs BPE over one word and appends its ids. */
lpx_status tok_bpe_word(const lpx_tokenizer *t, const char *w, size_t n, tok_ids *out);

/* UTF-8: length of the valid sequence at s (1..4), 0 when invalid or incomplete. */
size_t tok_utf8_len(const unsigned char *s, size_t n, uint32_t *cp);
/* Unicode White_Space. */
bool tok_is_whitespace(uint32_t cp);

#endif
