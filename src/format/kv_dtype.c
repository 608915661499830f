#include "format/kv_dtype.h"

#include "base/checked.h"
#include "base/error.h"

#include <string.h>

lpx_status lpx_kv_dtype_parse(const char *s, lpx_kv_dtype *out) {
    static const struct {
        const char *name;
        lpx_kv_dtype d;
    } names[] = {{"auto", LPX_KV_AUTO},
                 {"bf16", LPX_KV_BF16},
                 {"bfloat16", LPX_KV_BF16},
                 {"fp8", LPX_KV_FP8},
                 {"fp8_e4m3", LPX_KV_FP8}};
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].d;
            return LPX_OK;
        }
    return lpx_errorf(LPX_ERR_INVALID_ARG,
                      "KV cache dtype '%s': expected auto, bf16 or fp8 (also bfloat16, fp8_e4m3)",
                      s ? s : "(null)");
}

const char *lpx_kv_dtype_name(lpx_kv_dtype d) {
    switch (d) {
    case LPX_KV_AUTO:
        return "auto";
    case LPX_KV_BF16:
        return "bf16";
    case LPX_KV_FP8:
        return "fp8";
    case LPX_KV_F32:
        return "f32";
    }
    return "unknown";
}

int64_t lpx_kv_token_bytes(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, lpx_kv_dtype d) {
    int64_t heads, per_head, out;
    if (n_layers < 0 || n_kv_heads < 0 || head_dim < 0) return 0;
    per_head = d == LPX_KV_F32 ? head_dim * 4 : d == LPX_KV_FP8 ? head_dim + 4 : head_dim * 2;
    if (head_dim > INT32_MAX || !lpx_mul_i64(n_layers, 2 * n_kv_heads, &heads) ||
        !lpx_mul_i64(heads, per_head, &out))
        return 0;
    return out;
}
