/* Tokenizers: byte-level BPE (GPT-2 style: Llama 3, Qwen2/3, SmolLM2) and
 * SentencePiece-style BPE with byte fallback (Llama 2, Mistral, GGUF "llama"). */
#ifndef LPX_TOKENIZER_TOKENIZER_H
#define LPX_TOKENIZER_TOKENIZER_H

#include "lpx.h"
#include "format/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lpx_tokenizer lpx_tokenizer;

/* From a Hugging Face model directory's tokenizer.json (+ tokenizer_config.json
 * when present, for add_bos/add_eos and special tokens). */
lpx_status lpx_tokenizer_load_hf(const char *dir, lpx_tokenizer **out);
/* From tokenizer JSON text held in memory (config_json may be NULL). */
lpx_status lpx_tokenizer_from_json(const char *json, size_t len, const char *config_json,
                                   size_t config_len, lpx_tokenizer **out);
/* From a tokenizer.json file (+ tokenizer_config.json beside it when present). */
lpx_status lpx_tokenizer_load_json_file(const char *path, lpx_tokenizer **out);
/* From GGUF metadata (tokenizer.ggml.*). */
lpx_status lpx_tokenizer_load_gguf(const lpx_gguf *g, lpx_tokenizer **out);
void lpx_tokenizer_free(lpx_tokenizer *t);
/* The Split regex a GGUF tokenizer.ggml.pre name stands for ("llama-bpe", "qwen2"), NULL
 * for names without one: what a converter matches a tokenizer.json's Split against. */
const char *lpx_tokenizer_pre_regex(const char *pre);

int32_t lpx_tokenizer_bos(const lpx_tokenizer *t); /* -1 when none */
int32_t lpx_tokenizer_eos(const lpx_tokenizer *t); /* -1 when none */
bool lpx_tokenizer_is_special(const lpx_tokenizer *t, int32_t id);
/* Token id of an exact token text (special or not), -1 when absent. */
int32_t lpx_tokenizer_find(const lpx_tokenizer *t, const char *text);
/* The bytes token id adds to generated text (lpx_detok_stream_push's, past the first
 * piece), or NULL for a special token or an id without text; *len their count. The
 * grammar's token masks are built from these. */
const char *lpx_tokenizer_token_bytes(const lpx_tokenizer *t, int32_t id, size_t *len);
/* Longest decoded text of any one token, in bytes: an output buffer of this
 * + 8 bytes always holds what one lpx_detok_stream_push writes. */
size_t lpx_tokenizer_max_piece(const lpx_tokenizer *t);
/* The most bytes of text that n tokens can come from (SIZE_MAX: no bound, when one
 * token can stand for any amount of text: a fused <unk>, an lstrip/rstrip added token,
 * a Removed split, a shortening Replace): longer text is more than n tokens without
 * tokenizing it. */
size_t lpx_tokenizer_bytes_bound(const lpx_tokenizer *t, size_t n);
/* lpx_tokenize that stops once past limit tokens (limit 0: none): then *n_out is more
 * than limit (the ids found so far, at least limit + 1) and the rest is not tokenized,
 * so an oversized prompt costs what limit needs. */
lpx_status lpx_tokenize_limit(const lpx_tokenizer *t, const char *text, size_t len,
                              bool add_special, bool parse_special, size_t limit, int32_t *ids,
                              size_t cap, size_t *n_out);

/* Streaming decoder: feed ids one at a time, get the bytes that became complete
 * UTF-8 text; never emits half a character. */
typedef struct lpx_detok_stream {
    const lpx_tokenizer *tok;
    bool skip_special;
    unsigned char pending[16];
    int n_pending;
    bool first; /* SentencePiece: strip the leading space of the first piece */
} lpx_detok_stream;

void lpx_detok_stream_init(lpx_detok_stream *s, const lpx_tokenizer *t, bool skip_special);
/* Appends the newly complete text for id to out (cap bytes, NUL-terminated);
 * returns the number of bytes written (0 while a character is incomplete). */
size_t lpx_detok_stream_push(lpx_detok_stream *s, int32_t id, char *out, size_t cap);
/* Flushes what is left (invalid trailing bytes become U+FFFD). */
size_t lpx_detok_stream_flush(lpx_detok_stream *s, char *out, size_t cap);

#endif
