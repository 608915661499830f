/* The ggml type table (ids and block sizes from ggml.h / gguf-py's
 * GGML_QUANT_SIZES). */
#include "format/ggml.h"

#include <stddef.h>

#define KEEP(dt) (dt)
#define NONE -1
static const lpx_ggml_type_info types[] = {
    [0] = {"F32", 1, 4, KEEP(LPX_DT_F32)},
    [1] = {"F16", 1, 2, KEEP(LPX_DT_F16)},
    [2] = {"Q4_0", 32, 18, KEEP(LPX_DT_Q4_0)},
    [3] = {"Q4_1", 32, 20, KEEP(LPX_DT_Q4_1)},
    [6] = {"Q5_0", 32, 22, NONE},
    [7] = {"Q5_1", 32, 24, NONE},
    [8] = {"Q8_0", 32, 34, KEEP(LPX_DT_Q8_0)},
    [9] = {"Q8_1", 32, 40, NONE},
    [10] = {"Q2_K", 256, 84, NONE},
    [11] = {"Q3_K", 256, 110, NONE},
    [12] = {"Q4_K", 256, 144, KEEP(LPX_DT_Q4_K)},
    [13] = {"Q5_K", 256, 176, KEEP(LPX_DT_Q5_K)},
    [14] = {"Q6_K", 256, 210, KEEP(LPX_DT_Q6_K)},
    [15] = {"Q8_K", 256, 292, NONE},
    [16] = {"IQ2_XXS", 256, 66, NONE},
    [17] = {"IQ2_XS", 256, 74, NONE},
    [18] = {"IQ3_XXS", 256, 98, NONE},
    [19] = {"IQ1_S", 256, 50, NONE},
    [20] = {"IQ4_NL", 32, 18, NONE},
    [21] = {"IQ3_S", 256, 110, NONE},
    [22] = {"IQ2_S", 256, 82, NONE},
    [23] = {"IQ4_XS", 256, 136, NONE},
    [24] = {"I8", 1, 1, NONE},
    [25] = {"I16", 1, 2, NONE},
    [26] = {"I32", 1, 4, NONE},
    [27] = {"I64", 1, 8, NONE},
    [28] = {"F64", 1, 8, NONE},
    [29] = {"IQ1_M", 256, 56, NONE},
    [30] = {"BF16", 1, 2, KEEP(LPX_DT_BF16)},
    [34] = {"TQ1_0", 256, 54, NONE},
    [35] = {"TQ2_0", 256, 66, NONE},
    [39] = {"MXFP4", 32, 17, NONE},
};

const lpx_ggml_type_info *lpx_ggml_type(uint32_t id) {
    if (id >= sizeof types / sizeof types[0] || !types[id].name) return NULL;
    return &types[id];
}
