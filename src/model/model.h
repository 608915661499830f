/* The loaded model as every backend sees it: a config, and weight tensors that
 * point into the mmapped file (or into buffers made at load for converted types).
 *
 * Conventions shared by all loaders and backends:
 * - A matrix is stored row-major as [rows = out_features, cols = in_features],
 *   Hugging Face's nn.Linear layout: y[r] = sum_c W[r][c] * x[c]. GGUF's ne[0]
 *   is the innermost (cols) dimension, so loaders reverse GGUF shapes.
 * - Quantized block types (Q8_0, Q4_0, Q4_1) pack blocks of 32 along a row;
 *   rows never share a block (cols % 32 == 0 is checked at load).
 * - RoPE: rope_interleaved == false is Hugging Face's rotate_half (pairs i and
 *   i + head_dim/2); true pairs 2i and 2i+1 (GGUF "llama" files, whose q/k rows
 *   were permuted by the converter). */
#ifndef LPX_MODEL_MODEL_H
#define LPX_MODEL_MODEL_H

#include "format/dtype.h"
#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lpx_arch {
    LPX_ARCH_LLAMA = 0,
    LPX_ARCH_QWEN2 = 1,
    LPX_ARCH_QWEN3 = 2,
    LPX_ARCH_MISTRAL = 3,
} lpx_arch;

typedef enum lpx_rope_scaling {
    LPX_ROPE_NONE = 0,
    LPX_ROPE_LLAMA3 = 1,
    LPX_ROPE_LINEAR = 2,
} lpx_rope_scaling;

typedef struct lpx_config {
    lpx_arch arch;
    int32_t n_layers;
    int32_t d_model;    /* hidden_size */
    int32_t n_heads;    /* query heads */
    int32_t n_kv_heads; /* key/value heads (GQA) */
    int32_t head_dim;   /* may differ from d_model / n_heads (Qwen3) */
    int32_t d_ff;       /* intermediate_size */
    int32_t vocab_size;
    int32_t max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    bool rope_interleaved;
    lpx_rope_scaling rope_scaling;
    float rope_factor;             /* llama3 and linear */
    float rope_low_freq_factor;    /* llama3 */
    float rope_high_freq_factor;   /* llama3 */
    int32_t rope_original_max_pos; /* llama3: original_max_position_embeddings */
    bool qkv_bias;                 /* Qwen2 */
    bool qk_norm;                  /* Qwen3: RMSNorm over head_dim on q and k */
    bool tied_embeddings;          /* lm_head == tok_embd */
    int32_t sliding_window;        /* 0 = none (Mistral may set it) */
} lpx_config;

typedef struct lpx_layer {
    const lpx_tensor *attn_norm;       /* (d_model) */
    const lpx_tensor *wq;              /* (n_heads*head_dim, d_model) */
    const lpx_tensor *wk;              /* (n_kv_heads*head_dim, d_model) */
    const lpx_tensor *wv;              /* (n_kv_heads*head_dim, d_model) */
    const lpx_tensor *bq, *bk, *bv;    /* (rows of wq/wk/wv), NULL unless qkv_bias */
    const lpx_tensor *q_norm, *k_norm; /* (head_dim), NULL unless qk_norm */
    const lpx_tensor *wo;              /* (d_model, n_heads*head_dim) */
    const lpx_tensor *ffn_norm;        /* (d_model) */
    const lpx_tensor *w_gate;          /* (d_ff, d_model) */
    const lpx_tensor *w_up;            /* (d_ff, d_model) */
    const lpx_tensor *w_down;          /* (d_model, d_ff) */
} lpx_layer;

typedef struct lpx_weights {
    const lpx_tensor *tok_embd; /* (vocab_size, d_model) */
    const lpx_tensor *out_norm; /* (d_model) */
    const lpx_tensor *lm_head;  /* (vocab_size, d_model); == tok_embd when tied */
    lpx_layer *layers;          /* [n_layers] */
} lpx_weights;

/* Defaults from generation_config.json or GGUF metadata. */
typedef struct lpx_gen_defaults {
    float temperature;        /* < 0: not given */
    float top_p;              /* < 0: not given */
    int32_t top_k;            /* < 0: not given */
    float repetition_penalty; /* < 0: not given */
    int32_t eos_ids[8];
    int32_t n_eos;
    int32_t bos_id; /* -1: none */
} lpx_gen_defaults;

struct lpx_tokenizer; /* src/tokenizer/tokenizer.h */

#define LPX_MODEL_MAX_WARNINGS 8

struct lpx_model {
    char path[4096];
    char format[16]; /* "gguf" or "safetensors" */
    lpx_config cfg;
    lpx_weights w;
    lpx_tensor *tensors; /* all tensors of the file(s) */
    int64_t n_tensors;
    struct lpx_tokenizer *tok;
    char *chat_template; /* NUL-terminated, or NULL */
    lpx_gen_defaults gen;
    /* What the load let pass with a warning (a sampling default out of range, ignored):
     * front ends print them, `lpx inspect` lists them. */
    char warnings[LPX_MODEL_MAX_WARNINGS][256];
    int32_t n_warnings;
    /* A quantized Hugging Face checkpoint (src/model/hf_quant.c): its weights converted
     * at load, and what they were ("awq int4, group 128 -> F16"; "" when none). */
    int32_t n_converted;
    char quant[96];
    void *impl; /* loader-private: mappings, owned buffers */
};

/* Looks up a tensor by name (NULL when absent). */
const lpx_tensor *lpx_model_find_tensor(const lpx_model *m, const char *name);
/* The GGUF name (llama.cpp's) of the model's tensor `name`: the name itself for GGUF
 * models, the mapped one for Hugging Face names; false when it has none (or cap is short). */
bool lpx_model_gguf_name(const lpx_model *m, const char *name, char *out, size_t cap);

/* The name a model is known by unless one is given (lpx serve's /v1/models id and its
 * responses' "model", lpx batch's results): the file or directory name of path without
 * a .gguf suffix ("/m/SmolLM2.Q4_1.gguf" -> "SmolLM2.Q4_1", "/m/Qwen3-0.6B/" ->
 * "Qwen3-0.6B"). */
void lpx_model_default_name(const char *path, char *out, size_t cap);

#endif
