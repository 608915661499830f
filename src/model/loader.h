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

/* The sampling defaults a file may give (generation_config.json, GGUF
 * general.sampling.*). */
typedef enum lpx_gen_key {
    LPX_GEN_TEMPERATURE,
    LPX_GEN_TOP_P,
    LPX_GEN_TOP_K,
    LPX_GEN_REPETITION
} lpx_gen_key;
/* Takes a default read from the file (where names it in the warning, e.g.
 * "generation_config.json: top_p"; num false: the value is not a number). A value the
 * sampler would refuse is ignored with a warning in m->warnings, so a request that
 * leaves the field out gets lpx's default instead of an error blaming the client. */
void lpx_gen_take(lpx_model *m, lpx_gen_key key, const char *where, bool num, double v);

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
/* A checkpoint with a quantization_config (qc, config.json's object; torch_dtype its
 * "torch_dtype"/"dtype" or NULL): each quantized linear weight's parts (fp8 codes and
 * scales, AWQ/GPTQ qweight, qzeros, scales, g_idx) become one tensor "<name>.weight" of
 * the checkpoint's float dtype, in m->tensors, counted in m->n_converted. Formats and
 * errors: docs/models.md "Quantized Hugging Face checkpoints". */
struct cJSON;
lpx_status lpx_hf_quant_apply(lpx_model *m, const struct cJSON *qc, const char *torch_dtype);
lpx_status lpx_gguf_model_load(lpx_model *m, const char *path);

#endif
