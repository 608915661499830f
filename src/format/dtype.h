/* Element types of weight tensors (plain and ggml block layouts) and the tensor
 * record every container format (GGUF, safetensors) fills and every loader reads.
 * Block layouts: src/format/blocks.h. Quantized block types pack blocks of 32
 * (Q8_0, Q4_0, Q4_1) or super-blocks of 256 (Q4_K, Q5_K, Q6_K) along a row;
 * rows never share a block. */
#ifndef LPX_FORMAT_DTYPE_H
#define LPX_FORMAT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lpx_dtype {
    LPX_DT_F32 = 0,
    LPX_DT_F16 = 1,
    LPX_DT_BF16 = 2,
    LPX_DT_Q8_0 = 3, /* block of 32: f16 scale d, int8 q[32]; x = d*q          (34 bytes) */
    LPX_DT_Q4_0 = 4, /* block of 32: f16 d, 16 bytes of nibbles; x = d*(q-8)   (18 bytes) */
    LPX_DT_Q4_1 = 5, /* block of 32: f16 d, f16 m, 16 bytes; x = d*q + m        (20 bytes) */
    LPX_DT_Q4_K = 6, /* super-block of 256: 8 x 32 with 6-bit scales and mins  (144 bytes) */
    LPX_DT_Q5_K = 7, /* as Q4_K with a fifth bit per weight                    (176 bytes) */
    LPX_DT_Q6_K = 8, /* super-block of 256: 16 x 16 with int8 scales, 6 bits   (210 bytes) */
    LPX_DT_COUNT = 9,
} lpx_dtype;

const char *lpx_dtype_name(lpx_dtype t);
/* Elements per block (1 for plain types) and bytes per block. */
int lpx_dtype_block_elems(lpx_dtype t);
int lpx_dtype_block_bytes(lpx_dtype t);
/* Bytes of a row of n elements; false on overflow or n not a multiple of the block. */
bool lpx_dtype_row_bytes(lpx_dtype t, int64_t n, size_t *out);
/* Converts row of n elements of type t to float (n a multiple of the block). */
void lpx_dequantize_row(lpx_dtype t, const void *src, float *dst, int64_t n);

/* Element types safetensors files hold for the parts of quantized checkpoints (fp8
 * codes, packed int4 words, group indices), which are no lpx_dtype: a tensor with
 * raw != LPX_RAW_NONE never reaches a backend (src/model/hf_quant.c converts it at
 * load; binding refuses one left over). */
typedef enum lpx_raw_type {
    LPX_RAW_NONE = 0,
    LPX_RAW_F8_E4M3 = 1, /* 1 byte */
    LPX_RAW_I32 = 2,     /* 4 bytes, little-endian */
} lpx_raw_type;

#define LPX_MAX_DIMS 4
typedef struct lpx_tensor {
    char name[96];
    lpx_dtype type; /* unused (F32) when raw is set */
    lpx_raw_type raw;
    int n_dims;
    int64_t shape[LPX_MAX_DIMS]; /* outermost first: a matrix is {rows, cols} */
    const void *data;            /* validated: data .. data+nbytes lies inside its mapping */
    size_t nbytes;
} lpx_tensor;

static inline int64_t lpx_tensor_rows(const lpx_tensor *t) {
    return t->n_dims == 1 ? 1 : t->shape[0];
}
static inline int64_t lpx_tensor_cols(const lpx_tensor *t) {
    return t->shape[t->n_dims - 1];
}

#endif
