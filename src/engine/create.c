/* lpx_engine_create: picks the backend for the device string and sizes the
 * engine (defaults, KV pool from the memory budget). */
#include "engine/engine.h"

#include "base/checked.h"
#include "base/error.h"
#include "engine/kv_blocks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LPX_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

void lpx_engine_opts_init(lpx_engine_opts *o) {
    memset(o, 0, sizeof *o);
}

/* CPU default KV budget: every sequence at full length, but no more than
 * 1 GiB unless one full-length sequence needs more. */
#define LPX_CPU_KV_CAP ((int64_t)1 << 30)

/* Device string to backend (lpx_backend_select); no device means cuda when
 * this build has it and a GPU answers, else cpu. */
const char *lpx_engine_default_device(void) {
#ifdef LPX_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) return "cuda";
#endif
    return "cpu";
}

static lpx_status pick_device(const char *dev, lpx_engine_config *c) {
    if (!dev || !dev[0]) dev = lpx_engine_default_device();
    LPX_TRY(lpx_backend_select(dev, &c->ops, &c->device));
    snprintf(c->device_name, sizeof c->device_name, "cpu");
#ifdef LPX_HAVE_CUDA
    if (c->ops == &lpx_cuda_backend_ops)
        snprintf(c->device_name, sizeof c->device_name, "cuda:%d", c->device);
#endif
    return LPX_OK;
}

static int64_t default_kv_budget(const lpx_model *m, const lpx_engine_opts *o,
                                 const lpx_engine_config *c) {
    int64_t bpt = (int64_t)c->kv_bytes_per_token;
    /* One full-length sequence, in whole blocks. */
    int64_t blocks = ((int64_t)c->max_model_len + c->block_size - 1) / c->block_size;
    int64_t one = blocks * c->block_size * bpt;
#ifdef LPX_HAVE_CUDA
    if (c->ops != &lpx_cpu_backend_ops) {
        size_t free_b = 0, total_b = 0;
        if (cudaSetDevice(c->device) == cudaSuccess &&
            cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
            double util = o->gpu_memory_utilization > 0 ? o->gpu_memory_utilization : 0.9;
            int64_t weights = 0;
            for (int64_t i = 0; i < m->n_tensors; i++)
                weights += (int64_t)m->tensors[i].nbytes;
            /* Scratch: activations and logits of a full step, with room to spare. */
            int64_t scratch =
                ((int64_t)c->max_num_batched_tokens * m->cfg.vocab_size * 4) + ((int64_t)512 << 20);
            int64_t used = (int64_t)(total_b - free_b);
            int64_t budget = (int64_t)(util * (double)total_b) - used - weights - scratch;
            if (budget <= 0)
                lpx_errorf(LPX_ERR_NOMEM,
                           "no GPU memory left for the KV cache: gpu_memory_utilization %.2f of "
                           "%.2f GiB, %.2f GiB already in use on the device (another engine or "
                           "process), weights %.2f GiB, scratch %.2f GiB; lower the utilization "
                           "or give the KV cache's size (kv_cache_bytes, --kv-bytes)",
                           util, total_b / 1073741824.0, used / 1073741824.0,
                           weights / 1073741824.0, scratch / 1073741824.0);
            return budget;
        }
    }
#endif
    (void)m;
    (void)o;
    int64_t all = (int64_t)c->max_num_seqs * one;
    int64_t cap = LPX_CPU_KV_CAP > one ? LPX_CPU_KV_CAP : one;
    return all < cap ? all : cap;
}

lpx_status lpx_engine_create(const lpx_model *m, const lpx_engine_opts *opts, lpx_engine **out) {
    *out = NULL;
    lpx_engine_opts o;
    if (opts)
        o = *opts;
    else
        lpx_engine_opts_init(&o);
    if (!m) return lpx_errorf(LPX_ERR_INVALID_ARG, "engine: no model");
    if (o.max_num_seqs < 0 || o.max_num_batched_tokens < 0 || o.max_model_len < 0 ||
        o.max_num_seqs_per_request < 0 || o.kv_cache_bytes < 0 || o.block_size < 0 ||
        o.n_threads < 0 || !(o.gpu_memory_utilization >= 0 && o.gpu_memory_utilization <= 1))
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "engine options: max_num_seqs %d, max_num_seqs_per_request %d, "
                          "max_num_batched_tokens %d, max_model_len %d, kv_cache_bytes %lld, "
                          "block_size %d, n_threads %d, gpu_memory_utilization %g: expected >= "
                          "0 (utilization <= 1)",
                          o.max_num_seqs, o.max_num_seqs_per_request, o.max_num_batched_tokens,
                          o.max_model_len, (long long)o.kv_cache_bytes, o.block_size, o.n_threads,
                          o.gpu_memory_utilization);
    if (o.step_ahead < -1 || o.step_ahead > 1 || o.device_sampling < -1 || o.device_sampling > 1 ||
        o.prefix_caching < -1 || o.prefix_caching > 1)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "engine options: step_ahead %d, device_sampling %d, prefix_caching %d: "
                          "expected -1 (off), 0 (default) or 1 (on)",
                          o.step_ahead, o.device_sampling, o.prefix_caching);
    if ((unsigned)o.kv_cache_dtype > LPX_KV_F32)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "engine options: kv_cache_dtype %d: expected an "
                          "lpx_kv_dtype (auto, bf16, fp8)",
                          (int)o.kv_cache_dtype);
    lpx_engine_config c = {0};
    LPX_TRY(pick_device(o.device, &c));
    bool gpu = strcmp(c.device_name, "cpu") != 0;
    c.n_threads = o.n_threads;
    c.max_num_seqs = o.max_num_seqs ? o.max_num_seqs : gpu ? 64 : 16;
    /* half the slots: one request with n = max_num_seqs leaves the other half moving */
    c.max_seqs_per_group = o.max_num_seqs_per_request ? o.max_num_seqs_per_request
                           : c.max_num_seqs > 1       ? c.max_num_seqs / 2
                                                      : 1;
    c.max_num_batched_tokens = o.max_num_batched_tokens ? o.max_num_batched_tokens
                               : gpu                    ? 2048
                                                        : 512;
    if (c.max_num_batched_tokens < c.max_num_seqs)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "max_num_batched_tokens %d is below max_num_seqs %d: every running "
                          "sequence needs a token in each step",
                          c.max_num_batched_tokens, c.max_num_seqs);
    int32_t model_len = m->cfg.max_position_embeddings > 0 ? m->cfg.max_position_embeddings : 2048;
    c.max_model_len = o.max_model_len ? o.max_model_len : model_len;
    if (c.max_model_len > model_len)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "max_model_len %d exceeds the model's max_position_embeddings %d",
                          c.max_model_len, model_len);
    if (c.max_model_len < 2)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "max_model_len %d: expected >= 2", c.max_model_len);
    c.block_size = o.block_size ? o.block_size : 16;
    c.step_ahead = o.step_ahead >= 0;
    c.device_sampling = o.device_sampling >= 0;
    c.prefix_caching = o.prefix_caching >= 0;
    c.dev_tune = o.dev_tune;
    c.dev_trace = o.dev_trace;
    c.kv_dtype = lpx_kv_dtype_resolve(c.ops, o.kv_cache_dtype);
    c.kv_bytes_per_token = lpx_kv_bytes_per_token(&m->cfg, c.kv_dtype);
    int64_t budget = o.kv_cache_bytes ? o.kv_cache_bytes : default_kv_budget(m, &o, &c);
    if (budget <= 0 && !o.kv_cache_bytes) /* default_kv_budget said why */
        return lpx_error_wrap(LPX_ERR_NOMEM, "engine on %s", c.device_name);
    lpx_status st =
        lpx_kv_blocks_for_budget(budget, c.kv_bytes_per_token, c.block_size, &c.n_blocks);
    if (st != LPX_OK) return lpx_error_wrap(st, "engine on %s", c.device_name);
    return lpx_engine_create_config(m, &c, out);
}
