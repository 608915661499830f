/* libFuzzer target: the GGUF reader on arbitrary bytes, then every accessor on
 * whatever parsed. Built by scripts/fuzz.sh. */
#include "format/gguf.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lpx_gguf *g;
    if (lpx_gguf_parse(data, size, "fuzz", &g) != LPX_OK) return 0;
    volatile size_t sink = 0;
    for (int64_t i = 0; i < lpx_gguf_n_kv(g); i++) {
        const char *key = lpx_gguf_key(g, i), *s;
        size_t len;
        int64_t v;
        double f;
        bool b;
        lpx_gguf_type et;
        uint64_t n;
        if (lpx_gguf_get_str(g, key, &s, &len) && len) sink += (unsigned char)s[len - 1];
        if (lpx_gguf_get_i64(g, key, &v)) sink += (size_t)v;
        if (lpx_gguf_get_f64(g, key, &f)) sink += f > 0;
        if (lpx_gguf_get_bool(g, key, &b)) sink += b;
        if (lpx_gguf_get_arr(g, key, &et, &n)) {
            for (uint64_t j = 0; j < n && j < 64; j++) {
                if (lpx_gguf_arr_str(g, key, j, &s, &len) && len) sink += (unsigned char)s[len - 1];
                if (lpx_gguf_arr_i64(g, key, j, &v)) sink += (size_t)v;
                if (lpx_gguf_arr_f64(g, key, j, &f)) sink += f > 0;
            }
        }
    }
    for (int64_t i = 0; i < lpx_gguf_n_tensors(g); i++) {
        size_t nb;
        const uint8_t *p = lpx_gguf_tensor_data(g, i, &nb);
        sink += p[0] + p[nb - 1] + strlen(lpx_gguf_tensor_name(g, i));
        for (int d = 0; d < lpx_gguf_tensor_n_dims(g, i); d++)
            sink += (size_t)lpx_gguf_tensor_dim(g, i, d);
    }
    (void)sink;
    lpx_gguf_close(g);
    return 0;
}
