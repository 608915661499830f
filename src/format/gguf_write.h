/* A small GGUF v3 writer: copies a GGUF file's metadata and a subset of its tensors
 * (used by `lpx slice` to make small files of real weights). */
#ifndef LPX_FORMAT_GGUF_WRITE_H
#define LPX_FORMAT_GGUF_WRITE_H

#include "lpx.h"

/* Writes out_path: in_path's first n_layers transformer blocks (tensors blk.N.*
 * with N >= n_layers dropped), every other tensor, and all metadata with
 * <arch>.block_count set to n_layers. Tensor data is copied byte for byte. */
lpx_status lpx_gguf_write_slice(const char *in_path, int n_layers, const char *out_path);

#endif
