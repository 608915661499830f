/* For lpx quantize: a Hugging Face directory's tokenizer.json as GGUF tokenizer.ggml.*
 * keys (byte-level BPE only). Private to src/model/. */
#ifndef LPX_MODEL_HF_GGUF_TOKENIZER_H
#define LPX_MODEL_HF_GGUF_TOKENIZER_H

#include "format/gguf_write.h"
#include "lpx.h"

#include <stddef.h>
#include <stdint.h>

/* Writes the keys for dir's tokenizer, its tokens padded to n_vocab (the embedding's
 * rows). When the tokenizer cannot be converted (none, not byte-level BPE, a
 * pre-tokenizer llama.cpp has no name for) returns LPX_OK having written nothing, the
 * reason in why; a malformed tokenizer.json is an error. */
lpx_status lpx_hf_tokenizer_gguf(const char *dir, int32_t n_vocab, lpx_gguf_writer *w, char *why,
                                 size_t cap);

#endif
