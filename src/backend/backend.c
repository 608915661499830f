#include "backend/backend.h"

#include "base/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

lpx_status lpx_backend_run(lpx_backend *b, const lpx_step *s) {
    LPX_TRY(b->ops->step_begin(b, s));
    return b->ops->step_end(b);
}

size_t lpx_kv_bytes_per_token(const lpx_config *c, size_t bytes_per_elem) {
    return (size_t)c->n_layers * 2 * (size_t)c->n_kv_heads * (size_t)c->head_dim * bytes_per_elem;
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
