/* GGUF v2/v3 reader. lpx_gguf_parse validates the whole header (every count,
 * string length, tensor shape, type, offset and byte size) against the buffer
 * before returning; afterwards every accessor is a bounds-safe lookup. */
#ifndef LPX_FORMAT_GGUF_H
#define LPX_FORMAT_GGUF_H

#include "lpx.h"
#include "format/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lpx_gguf_type {
    LPX_GGUF_U8 = 0, LPX_GGUF_I8 = 1, LPX_GGUF_U16 = 2, LPX_GGUF_I16 = 3,
    LPX_GGUF_U32 = 4, LPX_GGUF_I32 = 5, LPX_GGUF_F32 = 6, LPX_GGUF_BOOL = 7,
    LPX_GGUF_STRING = 8, LPX_GGUF_ARRAY = 9, LPX_GGUF_U64 = 10, LPX_GGUF_I64 = 11,
    LPX_GGUF_F64 = 12,
} lpx_gguf_type;

typedef struct lpx_gguf lpx_gguf;

/* Parses a GGUF image held in memory (not copied: it must outlive the handle).
 * name is used in error messages. */
lpx_status lpx_gguf_parse(const void *data, size_t size, const char *name, lpx_gguf **out);
/* mmaps path and parses it; the mapping is released by lpx_gguf_close. */
lpx_status lpx_gguf_open(const char *path, lpx_gguf **out);
void lpx_gguf_close(lpx_gguf *g);

uint32_t lpx_gguf_version(const lpx_gguf *g);
int64_t lpx_gguf_n_kv(const lpx_gguf *g);
const char *lpx_gguf_key(const lpx_gguf *g, int64_t i); /* NUL-terminated copy */
lpx_gguf_type lpx_gguf_kv_type(const lpx_gguf *g, int64_t i);
int64_t lpx_gguf_find(const lpx_gguf *g, const char *key); /* -1 when absent */

/* Typed scalar getters: false when absent or of another type. Integer getters
 * accept any integer type whose value fits. */
bool lpx_gguf_get_str(const lpx_gguf *g, const char *key, const char **s, size_t *len);
bool lpx_gguf_get_i64(const lpx_gguf *g, const char *key, int64_t *v);
bool lpx_gguf_get_f64(const lpx_gguf *g, const char *key, double *v); /* F32 or F64 */
bool lpx_gguf_get_bool(const lpx_gguf *g, const char *key, bool *v);

/* Arrays: element type and count; numeric elements are read one by one with
 * bounds checks (values are little-endian and possibly unaligned in the file). */
bool lpx_gguf_get_arr(const lpx_gguf *g, const char *key, lpx_gguf_type *elem, uint64_t *n);
bool lpx_gguf_arr_str(const lpx_gguf *g, const char *key, uint64_t i, const char **s, size_t *len);
bool lpx_gguf_arr_i64(const lpx_gguf *g, const char *key, uint64_t i, int64_t *v);
bool lpx_gguf_arr_f64(const lpx_gguf *g, const char *key, uint64_t i, double *v);

/* Tensors, with GGUF dims reversed to lpx's outermost-first convention. */
int64_t lpx_gguf_n_tensors(const lpx_gguf *g);
/* ggml type id of tensor i as stored (may be a type lpx converts at load). */
uint32_t lpx_gguf_tensor_ggml_type(const lpx_gguf *g, int64_t i);
const char *lpx_gguf_tensor_name(const lpx_gguf *g, int64_t i);
int lpx_gguf_tensor_n_dims(const lpx_gguf *g, int64_t i);
int64_t lpx_gguf_tensor_dim(const lpx_gguf *g, int64_t i, int d); /* outermost first */
const void *lpx_gguf_tensor_data(const lpx_gguf *g, int64_t i, size_t *nbytes);

#endif
