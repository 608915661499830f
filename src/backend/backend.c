#include "backend/backend.h"

#include "base/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

size_t lpx_kv_bytes_per_token(const lpx_config *c, size_t bytes_per_elem) {
    return (size_t)c->n_layers * 2 * (size_t)c->n_kv_heads * (size_t)c->head_dim * bytes_per_elem;
}

lpx_status lpx_sample_batch_check(const lpx_sample_batch *s, int32_t n_rows, int32_t vocab) {
    if (n_rows > 0 && (!s || !s->rows))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "step_sample: %d rows but no sampling rows", n_rows);
    for (int32_t i = 0; i < n_rows; i++) {
        const lpx_sample_row *r = &s->rows[i];
        if (r->p.logprobs != 0)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "step_sample: row %d asks for %d logprobs (expected 0: logprobs "
                              "need the logits)",
                              i, r->p.logprobs);
        if (r->seen_start < 0 || r->n_seen < 0 || r->seen_start > s->n_seen - r->n_seen)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "step_sample: row %d: token counts %d..+%d outside the %d given", i,
                              r->seen_start, r->n_seen, s->n_seen);
        for (int32_t j = 0; j < r->n_seen; j++) {
            int32_t id = s->seen[r->seen_start + j].id;
            if (id < 0 || id >= vocab)
                return lpx_errorf(LPX_ERR_INVALID_ARG,
                                  "step_sample: row %d: token id %d outside the vocabulary (%d)", i,
                                  id, vocab);
        }
    }
    return LPX_OK;
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
