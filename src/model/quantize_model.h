/* `lpx quantize`: a model (GGUF file or Hugging Face directory) written as a GGUF of one
 * quantization type that llama.cpp also loads. Per tensor the type follows llama.cpp's
 * rules in spirit (docs/quantize.md): 1-D tensors stay F32; the output head (the token
 * embedding when tied) gets Q6_K under every quantized type but Q8_0; q4_k_m gives Q6_K
 * to a share of the layers' attn_v and ffn_down; a type whose block does not divide a
 * row falls back to one that does (named in the event). GGUF metadata is carried over
 * (general.file_type set); a directory's config, tokenizer and chat template become
 * llama.cpp's keys, its q/k rows permuted as llama.cpp's converter does for "llama". */
#ifndef LPX_MODEL_QUANTIZE_MODEL_H
#define LPX_MODEL_QUANTIZE_MODEL_H

#include "lpx.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* The names --type takes, for messages and help. */
#define LPX_QUANT_TYPES "q8_0, q4_0, q4_1, q5_k, q4_k_m, q6_k, bf16, f16"

/* One tensor done (name set), or a warning (warning set, name NULL). */
typedef struct lpx_quant_event {
    int64_t i, n;        /* tensor i (1-based) of n */
    const char *name;    /* GGUF name */
    const char *from;    /* the source's type */
    const char *to;      /* the type written */
    const char *note;    /* "" or why `to` is not the planned type, or "copied" */
    const char *warning; /* NULL or a warning about the whole job */
} lpx_quant_event;

typedef struct lpx_quantize_opts {
    const char *type;                                      /* one of LPX_QUANT_TYPES */
    bool overwrite;                                        /* replace an existing output file */
    int32_t n_threads;                                     /* 0 = all cores */
    void (*progress)(void *ctx, const lpx_quant_event *e); /* may be NULL; caller's thread */
    void *ctx;
    /* Polled between tensors: when non-zero the job stops, removing what it wrote
     * (LPX_ERR_CANCELLED). May be NULL. A signal handler may set it. */
    const volatile sig_atomic_t *cancel;
} lpx_quantize_opts;

typedef struct lpx_quantize_result {
    int64_t n_tensors;
    int64_t bytes_in;  /* tensor bytes of the source, as stored */
    int64_t bytes_out; /* tensor bytes written */
} lpx_quantize_result;

lpx_status lpx_quantize_model(const char *in, const char *out, const lpx_quantize_opts *o,
                              lpx_quantize_result *r);

#endif
