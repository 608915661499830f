/* Weight matrices as the CUDA backend holds them: bf16, or kept quantized in one
 * of two packings that the matrix-vector kernels stream (matmul.cuh). Plain C
 * (wpack.c), so that CI tests the packing without a GPU
 * (tests/unit/test_cuda_wpack.c); the backend packs each matrix on the host at
 * upload.
 *
 * A bf16 row is cols * 2 bytes. A quantized row, padded with zeros to a multiple
 * of 16 bytes (lpx_wp_row_bytes):
 *   codes    q8: cols bytes, code + 128 (code -128..127)
 *            q4: cols / 2 bytes, 16 a group of 32: element e of the group is the
 *                low nibble of its byte e, element e + 16 the high one (ggml's
 *                Q4_0 order), code 0..15
 *   scales   cols / group f16 s, one a group of `group` elements
 *   mins     with has_min: cols / group f16 m
 * and element e = s * code + m (q8, and q4 with has_min), s * (code - 8) (q4
 * without). So the kernels read one contiguous stream a row, 16 bytes (16 q8 or
 * 32 q4 elements) a lane, whose group's scale lies in the same row.
 *
 * What each GGUF type becomes (the codes are the file's; the scales its f16
 * fields where it has them, else the f16 nearest the product the file implies):
 *   Q8_0 -> q8/32            exact, 34 bytes a group (as the file)
 *   Q4_0 -> q4/32            exact, 18 (as the file)
 *   Q4_1 -> q4/32 with mins  exact, 20 (as the file)
 *   Q4_K -> q4/32 with mins  s = d*sc, m = -dmin*mn rounded to f16; 20 (file: 18)
 *   Q5_K -> q8/32 with mins  the same rounding; 36 a group (file: 22)
 *   Q6_K -> q8/16            s = d*sc rounded to f16; 18 a group of 16 (file: 13.1)
 *   F32, F16, BF16 -> bf16
 * A matrix merged from several tensors (q/k/v, gate/up) takes one packing that
 * holds each part: bf16 if any part is float, else q4 if every part is a 4-bit
 * type, else q8; the smallest group and mins if any part needs them. */
#ifndef LPX_BACKEND_CUDA_WPACK_H
#define LPX_BACKEND_CUDA_WPACK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/error.h"
#include "format/dtype.h"

typedef enum lpx_wp_kind { LPX_WP_BF16 = 0, LPX_WP_Q8 = 1, LPX_WP_Q4 = 2 } lpx_wp_kind;

typedef struct lpx_wp_format {
    int kind;    /* lpx_wp_kind */
    int group;   /* elements a scale: 16 or 32 (q8), 32 (q4); 0 for bf16 */
    int has_min; /* a per-group offset m */
} lpx_wp_format;

/* The packing of a matrix merged from ts[0..n) (every part of width cols). An
 * error names the tensor when cols does not divide into the packing's groups. */
lpx_status lpx_wp_choose(const lpx_tensor *const *ts, int n, int64_t cols, lpx_wp_format *out);

/* Bytes of one packed row of cols elements (0 where cols does not divide into
 * groups or the size overflows). */
size_t lpx_wp_row_bytes(lpx_wp_format f, int64_t cols);

/* Packs every row r of t into dst's row (row0 + r * step) (rows of
 * lpx_wp_row_bytes(f, cols) bytes). tmp: cols floats of scratch. Errors name the
 * tensor: a scale that is not finite in f16, a type f cannot hold. */
lpx_status lpx_wp_pack_rows(lpx_wp_format f, const lpx_tensor *t, uint8_t *dst, int64_t row0,
                            int64_t step, float *tmp);

/* Element values of a packed row (the reference the kernels are checked against). */
void lpx_wp_unpack_row(lpx_wp_format f, const uint8_t *row, int64_t cols, float *out);

/* "bf16", "q8/32", "q8/16+min", "q4/32+min", ... for inspect and errors. */
const char *lpx_wp_name(lpx_wp_format f);

#ifdef __cplusplus
}
#endif

#endif
