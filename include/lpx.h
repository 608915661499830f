/* lpx — fast, dependable inference for small language models.
 *
 * Public C API. Every name is prefixed lpx_; handles are opaque; functions that
 * can fail return an lpx_status and leave a message in a thread-local buffer
 * read with lpx_last_error(). The library never exits and never aborts on bad
 * input. Enum values are explicit and append-only. */
#ifndef LPX_H
#define LPX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------- */

typedef enum lpx_status {
    LPX_OK = 0,
    LPX_ERR_INVALID_ARG = 1,   /* a caller passed a bad value */
    LPX_ERR_IO = 2,            /* open/read/mmap failed */
    LPX_ERR_FORMAT = 3,        /* a model/tokenizer file is malformed */
    LPX_ERR_UNSUPPORTED = 4,   /* well-formed but not supported (arch, dtype, template) */
    LPX_ERR_NOMEM = 5,         /* host or device allocation failed */
    LPX_ERR_TOO_LONG = 6,      /* prompt or request exceeds the context */
    LPX_ERR_DEVICE = 7,        /* GPU/driver failure */
    LPX_ERR_CANCELLED = 8,     /* request cancelled */
    LPX_ERR_BUSY = 9,          /* queue full / engine draining */
    LPX_ERR_INTERNAL = 10,     /* a bug in lpx */
} lpx_status;

/* Message of the last failure on this thread ("" when none). */
const char *lpx_last_error(void);
const char *lpx_status_name(lpx_status s);
const char *lpx_version(void);

/* ---- model -------------------------------------------------------------- */

typedef struct lpx_model lpx_model;

/* Opens a Hugging Face model directory or a .gguf file. The file is mmapped
 * and fully validated before any tensor is used. */
lpx_status lpx_model_open(const char *path, lpx_model **out);
void lpx_model_close(lpx_model *m);

typedef struct lpx_model_info {
    char arch[32];            /* "llama", "qwen2", "qwen3", "mistral" */
    char format[16];          /* "gguf" or "safetensors" */
    int32_t n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab_size;
    int32_t max_position_embeddings;
    float rope_theta, rms_norm_eps;
    char rope_scaling[16];    /* "none", "llama3", "linear" */
    bool tied_embeddings, qkv_bias, qk_norm, has_chat_template;
    int64_t n_params;
    int64_t weight_bytes;            /* bytes of weights as stored */
    int64_t decode_bytes_per_step;   /* bytes read per decode step at batch 1 */
    int64_t kv_bytes_per_token;      /* K+V of every layer, at the KV dtype */
    int64_t dtype_params[16];        /* parameter count per lpx_dtype */
    int32_t n_dequantized_at_load;   /* tensors converted at load (e.g. Q4_K) */
} lpx_model_info;

lpx_status lpx_model_info_get(const lpx_model *m, lpx_model_info *out);

/* ---- tokenizer ---------------------------------------------------------- */

typedef struct lpx_tokenizer lpx_tokenizer;

/* The model's tokenizer (owned by the model; valid until lpx_model_close). */
const lpx_tokenizer *lpx_model_tokenizer(const lpx_model *m);

/* Encodes UTF-8 text. add_special adds BOS/EOS as the tokenizer config asks;
 * special tokens written in the text are recognised when parse_special is set.
 * Writes up to cap ids and sets *n_out to the full count (call again with a
 * larger buffer when *n_out > cap). */
lpx_status lpx_tokenize(const lpx_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t *ids, size_t cap, size_t *n_out);

/* Decodes ids to UTF-8 text into buf (NUL-terminated); *n_out is the full length. */
lpx_status lpx_detokenize(const lpx_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                          char *buf, size_t cap, size_t *n_out);

int32_t lpx_vocab_size(const lpx_tokenizer *t);
/* The text of one token as stored in the vocabulary, or NULL for a bad id. */
const char *lpx_token_text(const lpx_tokenizer *t, int32_t id);

/* ---- chat templates ------------------------------------------------------ */

typedef struct lpx_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content;
} lpx_chat_message;

/* Renders the model's chat template as transformers' apply_chat_template does.
 * Returns a malloc'd string in *out (free with lpx_free). enable_thinking is
 * passed to templates that read it (Qwen3); -1 leaves it undefined. */
lpx_status lpx_chat_render(const lpx_model *m, const lpx_chat_message *msgs, size_t n_msgs,
                           bool add_generation_prompt, int enable_thinking, char **out);

void lpx_free(void *p);

#ifdef __cplusplus
}
#endif
#endif /* LPX_H */
