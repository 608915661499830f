/* The model side of plan: sizes from the loader's lpx_model_info. */
#include "doctor/plan.h"

#include "base/error.h"
#include "model/model.h"

#include <string.h>

void lpx_plan_bf16_bytes(const lpx_model *m, const lpx_model_info *mi, int64_t *held,
                         int64_t *read) {
    /* its vectors (norms, biases) are f32, every matrix bf16; a step reads one
     * embedding row and the whole head (the embedding itself when tied) */
    const bool tied = m->cfg.tied_embeddings || m->w.lm_head == m->w.tok_embd;
    const int64_t d = mi->d_model, hd = mi->head_dim, L = mi->n_layers;
    const int64_t qkv = (int64_t)(mi->n_heads + 2 * mi->n_kv_heads) * hd;
    const int64_t vec = d + L * (2 * d + (mi->qk_norm ? 2 * hd : 0) + (mi->qkv_bias ? qkv : 0));
    const int64_t emb = (int64_t)mi->vocab_size * d;
    *held = *read = 0;
    if (mi->n_params <= vec) return;
    *held = 2 * (mi->n_params - vec) + 4 * vec;
    *read = *held + 2 * d - (tied ? 0 : 2 * emb);
}

lpx_status lpx_plan_model_load(const char *path, lpx_plan_model *out, lpx_model_info *info) {
    memset(out, 0, sizeof *out);
    lpx_model *m;
    LPX_TRY(lpx_model_open(path, &m));
    lpx_model_info mi;
    lpx_status s = lpx_model_info_get(m, &mi);
    int64_t held = 0, read = 0;
    if (s == LPX_OK) lpx_plan_bf16_bytes(m, &mi, &held, &read);
    lpx_model_close(m);
    if (s != LPX_OK) return s;
    out->weight_bytes_bf16 = held;
    out->decode_bytes_bf16 = read;
    out->weight_bytes = mi.weight_bytes;
    out->decode_bytes_per_step = mi.decode_bytes_per_step;
    out->kv_bytes_per_token = mi.kv_bytes_per_token;
    out->kv_bytes_per_token_fp8 = mi.kv_bytes_per_token_fp8;
    out->max_position_embeddings = mi.max_position_embeddings;
    if (info) *info = mi;
    return LPX_OK;
}
