/* What model.c shares with the format loaders (hf.c, gguf_model.c) and the
 * safetensors reader. Private to src/model/. */
#ifndef LPX_MODEL_LOADER_H
#define LPX_MODEL_LOADER_H

#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/model.h"

#include <stdbool.h>
#include <stddef.h>

/* Behind lpx_model.impl: everything lpx_model_close releases. */
typedef struct lpx_model_store {
    lpx_gguf *gguf; /* GGUF models: owns the file mapping */
    struct lpx_mapping {
        void *p;
        size_t n;
    } * maps; /* safetensors files */
    int n_maps;
    void **owned; /* buffers made at load (converted or realigned tensors) */
    int n_owned;
} lpx_model_store;

/* mmaps a whole file read-only; the mapping lives until lpx_model_close. */
lpx_status lpx_store_map_file(lpx_model_store *st, const char *path, const void **data,
                              size_t *size);
/* A 64-byte aligned buffer freed at lpx_model_close; NULL when out of memory. */
void *lpx_store_alloc(lpx_model_store *st, size_t n);

/* One row per family: the facts that differ between architectures. */
typedef struct lpx_arch_info {
    lpx_arch arch;
    const char *name;           /* lpx's name, as in lpx_model_info.arch */
    const char *hf_class;       /* config.json architectures[0] */
    const char *gguf_arch;      /* general.architecture, or NULL when GGUF files use another */
    bool qkv_bias;              /* q/k/v projections carry a bias */
    bool qk_norm;               /* RMSNorm over head_dim on q and k */
    bool gguf_rope_interleaved; /* the GGUF converter permuted q/k rows */
} lpx_arch_info;

const lpx_arch_info *lpx_arch_get(lpx_arch a);
const lpx_arch_info *lpx_arch_by_hf_class(const char *cls);
const lpx_arch_info *lpx_arch_by_gguf(const char *name, size_t len);

/* Format loaders: fill m->cfg, m->tensors, m->gen, m->chat_template (and
 * m->tok); lpx_model_open then binds and checks the weights. */
lpx_status lpx_hf_load(lpx_model *m, const char *dir);
lpx_status lpx_gguf_model_load(lpx_model *m, const char *path);

#endif
