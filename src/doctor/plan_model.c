/* The model side of plan: sizes from the loader's lpx_model_info. */
#include "doctor/plan.h"

#include "base/error.h"

#include <string.h>

lpx_status lpx_plan_model_load(const char *path, lpx_plan_model *out, lpx_model_info *info) {
    memset(out, 0, sizeof *out);
    lpx_model *m;
    LPX_TRY(lpx_model_open(path, &m));
    lpx_model_info mi;
    lpx_status s = lpx_model_info_get(m, &mi);
    lpx_model_close(m);
    if (s != LPX_OK) return s;
    out->weight_bytes = mi.weight_bytes;
    out->decode_bytes_per_step = mi.decode_bytes_per_step;
    out->kv_bytes_per_token = mi.kv_bytes_per_token;
    out->kv_bytes_per_token_fp8 = mi.kv_bytes_per_token_fp8;
    out->max_position_embeddings = mi.max_position_embeddings;
    if (info) *info = mi;
    return LPX_OK;
}
