/* Engine internals shared by lpx_engine_create (create.c: device choice and
 * sizing) and the tests, which drive the engine over a mock backend. */
#ifndef LPX_ENGINE_ENGINE_H
#define LPX_ENGINE_ENGINE_H

#include "backend/backend.h"
#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Everything resolved: no zeros meaning "default" left. */
typedef struct lpx_engine_config {
    const lpx_backend_ops *ops;
    char device_name[32];
    int device; /* CUDA ordinal */
    int32_t n_threads;
    int32_t max_num_seqs;
    int32_t max_seqs_per_group; /* running sequences of one lpx_request.group; 0 = no cap */
    int32_t max_num_batched_tokens;
    int32_t max_model_len;
    int32_t block_size;
    int32_t n_blocks;
    lpx_kv_dtype kv_dtype; /* resolved: never auto */
    size_t kv_bytes_per_token;
    bool step_ahead;      /* begin step N+1 before step N ends where the batch allows it */
    bool device_sampling; /* steps with sample (tokens back) when every row allows it */
    bool prefix_caching;  /* reuse the KV blocks of cached prompt prefixes (kv_blocks.h) */
    const char *dev_tune, *dev_trace; /* for the backend (lpx_engine_opts); may be NULL */
} lpx_engine_config;

/* The device of an engine created without one: "cuda" when this build has CUDA and a
 * GPU answers, else "cpu". */
const char *lpx_engine_default_device(void);

lpx_status lpx_engine_create_config(const lpx_model *m, const lpx_engine_config *c,
                                    lpx_engine **out);

#endif
