/* Bytes of the KV cache per token at each lpx_kv_dtype (include/lpx.h), the one
 * formula the model summary, the engine's pool sizing, plan and bench share. */
#ifndef LPX_FORMAT_KV_DTYPE_H
#define LPX_FORMAT_KV_DTYPE_H

#include "lpx.h"

#include <stdint.h>

/* K and V of every layer for one token: n_layers * 2 * n_kv_heads * head_dim elements
 * of 4 (f32) or 2 (bf16) bytes, or of 1 byte plus a float32 scale per head (fp8,
 * kv_fp8.h). auto counts as bf16 (what it is on CUDA; the caller resolves the CPU
 * backend's f32). 0 for a negative shape or an overflow. */
int64_t lpx_kv_token_bytes(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, lpx_kv_dtype d);

#endif
