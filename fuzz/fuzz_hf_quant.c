/* libFuzzer target: quantized Hugging Face checkpoints' conversion at load
 * (src/model/hf_quant.c) on arbitrary bytes: a u16 little-endian length L, L bytes of
 * a quantization_config JSON object, then a safetensors image whose tensors are
 * converted; every tensor left is read at its first and last byte. Built by
 * scripts/fuzz.sh. */
#include "model/loader.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t n = (size_t)(data[0] | data[1] << 8);
    if (n > size - 2) return 0;
    cJSON *qc = cJSON_ParseWithLength((const char *)data + 2, n);
    lpx_model *m = calloc(1, sizeof *m);
    if (!m || !(m->impl = calloc(1, sizeof(lpx_model_store)))) {
        free(m);
        cJSON_Delete(qc);
        return 0;
    }
    strcpy(m->path, "fuzz");
    if (lpx_safetensors_parse(data + 2 + n, size - 2 - n, "fuzz", &m->tensors, &m->n_tensors) ==
            LPX_OK &&
        lpx_hf_quant_apply(m, qc, "float16") == LPX_OK) {
        volatile size_t sink = 0;
        for (int64_t i = 0; i < m->n_tensors; i++) {
            const uint8_t *p = m->tensors[i].data;
            sink += p[0] + p[m->tensors[i].nbytes - 1];
        }
        (void)sink;
    }
    cJSON_Delete(qc);
    lpx_model_close(m);
    return 0;
}
