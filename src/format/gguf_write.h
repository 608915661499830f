/* GGUF v3 writer. The header (key/values, then tensor infos) is gathered in memory, so
 * its counts need not be known ahead; tensor data follows in the order the infos were
 * added, each tensor's start aligned to `alignment`. The file is written under a
 * temporary name in the target's directory and renamed over the target only by
 * lpx_gguf_writer_finish, so a failed or interrupted write never leaves a partial file
 * under the target's name.
 *
 *     lpx_gguf_writer *w;
 *     LPX_TRY(lpx_gguf_writer_create(path, 32, true, &w));
 *     lpx_gguf_kv_u32(w, "general.file_type", 7);
 *     lpx_gguf_add_tensor(w, "token_embd.weight", 2, shape, 8, nbytes);
 *     lpx_gguf_put_data(w, data, nbytes);   (every tensor's bytes, in order)
 *     return lpx_gguf_writer_finish(w);     (or lpx_gguf_writer_abort(w))
 *
 * Key/value and tensor-info calls record a failure (out of memory) that finish returns;
 * put_data and finish return theirs. */
#ifndef LPX_FORMAT_GGUF_WRITE_H
#define LPX_FORMAT_GGUF_WRITE_H

#include "format/gguf.h"
#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lpx_gguf_writer lpx_gguf_writer;

/* overwrite false: finish fails (LPX_ERR_IO, "exists") rather than replace an existing
 * file at path, checked here and again, atomically, at finish. */
lpx_status lpx_gguf_writer_create(const char *path, size_t alignment, bool overwrite,
                                  lpx_gguf_writer **out);
/* Closes and removes the temporary file. */
void lpx_gguf_writer_abort(lpx_gguf_writer *w);
/* Checks every tensor's bytes were put, flushes, syncs and renames; frees w either way. */
lpx_status lpx_gguf_writer_finish(lpx_gguf_writer *w);

/* Key/values, in file order. */
void lpx_gguf_kv_copy(lpx_gguf_writer *w, const lpx_gguf *g, int64_t i); /* g's i-th, as is */
void lpx_gguf_kv_u32(lpx_gguf_writer *w, const char *key, uint32_t v);
void lpx_gguf_kv_i32(lpx_gguf_writer *w, const char *key, int32_t v);
void lpx_gguf_kv_f32(lpx_gguf_writer *w, const char *key, float v);
void lpx_gguf_kv_bool(lpx_gguf_writer *w, const char *key, bool v);
void lpx_gguf_kv_str(lpx_gguf_writer *w, const char *key, const char *s, size_t len);
/* An array of n elements of type elem (STRING, I32, F32), then n lpx_gguf_put_str/i32/f32 calls. */
void lpx_gguf_kv_arr(lpx_gguf_writer *w, const char *key, lpx_gguf_type elem, uint64_t n);
void lpx_gguf_put_str(lpx_gguf_writer *w, const char *s, size_t len);
void lpx_gguf_put_i32(lpx_gguf_writer *w, int32_t v);
void lpx_gguf_put_f32(lpx_gguf_writer *w, float v);

/* A tensor: shape outermost first (lpx's order; written innermost first), its ggml type
 * id and byte size. */
void lpx_gguf_add_tensor(lpx_gguf_writer *w, const char *name, int n_dims, const int64_t *shape,
                         uint32_t ggml_type, size_t nbytes);
/* The next bytes of tensor data (a tensor may come in several pieces); the first call
 * writes the header. */
lpx_status lpx_gguf_put_data(lpx_gguf_writer *w, const void *p, size_t n);

/* Writes out_path: in_path's first n_layers transformer blocks (tensors blk.N.*
 * with N >= n_layers dropped), every other tensor, and all metadata with
 * <arch>.block_count set to n_layers. Tensor data is copied byte for byte. */
lpx_status lpx_gguf_write_slice(const char *in_path, int n_layers, const char *out_path);

#endif
