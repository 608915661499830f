/* libFuzzer target: the safetensors reader on arbitrary bytes, then a read of
 * the first and last byte of every tensor it returns. Built by scripts/fuzz.sh. */
#include "model/loader.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lpx_tensor *ts;
    int64_t n;
    if (lpx_safetensors_parse(data, size, "fuzz", &ts, &n) != LPX_OK) return 0;
    volatile size_t sink = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = ts[i].data;
        sink += p[0] + p[ts[i].nbytes - 1] + (size_t)lpx_tensor_cols(&ts[i]);
    }
    (void)sink;
    free(ts);
    return 0;
}
