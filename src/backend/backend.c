#include "backend/backend.h"

#include "base/error.h"
#include "format/kv_dtype.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

lpx_status lpx_backend_run(lpx_backend *b, const lpx_step *s) {
    LPX_TRY(b->ops->step_begin(b, s));
    return b->ops->step_end(b);
}

lpx_kv_dtype lpx_kv_dtype_resolve(const lpx_backend_ops *ops, lpx_kv_dtype requested) {
    if (requested != LPX_KV_AUTO) return requested;
    return ops == &lpx_cpu_backend_ops ? LPX_KV_F32 : LPX_KV_BF16;
}

size_t lpx_kv_bytes_per_token(const lpx_config *c, lpx_kv_dtype d) {
    return (size_t)lpx_kv_token_bytes(c->n_layers, c->n_kv_heads, c->head_dim, d);
}

lpx_status lpx_backend_select(const char *device, const lpx_backend_ops **ops, int *ordinal) {
    *ops = NULL;
    *ordinal = 0;
    if (!device || !*device || !strcmp(device, "cpu")) {
        *ops = &lpx_cpu_backend_ops;
        return LPX_OK;
    }
    if (!strncmp(device, "cuda", 4) && (device[4] == '\0' || device[4] == ':')) {
        long n = 0;
        if (device[4] == ':') {
            char *end;
            errno = 0;
            n = strtol(device + 5, &end, 10);
            if (end == device + 5 || *end || errno || n < 0 || n > 1023)
                return lpx_errorf(LPX_ERR_INVALID_ARG,
                                  "device '%s': expected cuda:N with N a GPU ordinal", device);
        }
#ifdef LPX_HAVE_CUDA
        *ops = &lpx_cuda_backend_ops;
        *ordinal = (int)n;
        return LPX_OK;
#else
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "device '%s': this lpx was built without CUDA (no nvcc at build time)",
                          device);
#endif
    }
    return lpx_errorf(LPX_ERR_INVALID_ARG, "unknown device '%s' (expected cpu, cuda or cuda:N)",
                      device);
}
