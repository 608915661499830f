/* The backend interface: the one boundary between the engine and the kernels.
 * CPU (src/backend/cpu/) and CUDA (src/backend/cuda/) implement it; the engine,
 * scheduler and every front end above it see only this.
 *
 * The engine owns KV *block ids* (src/engine/kv_blocks.c); the backend owns the
 * KV *memory*: n_blocks blocks of block_size token slots, each holding K and V
 * for every layer. A token at position p of a sequence lives in block
 * block_table[p / block_size], slot p % block_size. */
#ifndef LPX_BACKEND_BACKEND_H
#define LPX_BACKEND_BACKEND_H

#include "lpx.h"
#include "model/model.h"
#include "sample/sampler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lpx_backend lpx_backend;

typedef struct lpx_backend_opts {
    int device;               /* CUDA ordinal; ignored by the CPU backend */
    int n_threads;            /* CPU: 0 = all cores */
    int32_t block_size;       /* tokens per KV block (16 by default) */
    int32_t n_blocks;         /* KV blocks to allocate */
    int32_t max_batch_tokens; /* most tokens one step may carry */
    int32_t max_seqs;         /* most sequences one step may carry */
    const char *tune;         /* developer overrides of the backend's tuning (docs/dev.md);
                                 NULL or "" = the measured defaults. Read at create only */
    const char *trace;        /* developer tracing (docs/dev.md); NULL or "" = none */
    lpx_kv_dtype kv_dtype;    /* what the KV cache stores; auto = the backend's own (CPU f32,
                                 CUDA bf16). Layout of fp8: format/kv_fp8.h */
} lpx_backend_opts;

/* One step over a batch of sequences. Tokens are grouped by sequence: the
 * tokens of sequence s are tokens[seq_start[s] .. seq_start[s+1]), at
 * consecutive positions ending at seq_len[s]-1 (a prefill chunk or 1 decode
 * token). Their K/V are written to the cache, then attention runs over
 * positions 0 .. seq_len[s]-1 of that sequence. */
typedef struct lpx_batch {
    int32_t n_tokens;
    const int32_t *tokens;    /* [n_tokens] */
    const int32_t *positions; /* [n_tokens] */
    int32_t n_seqs;
    const int32_t *seq_start;   /* [n_seqs + 1] */
    const int32_t *seq_len;     /* [n_seqs] context length after this step */
    const int32_t *block_table; /* [n_seqs][max_blocks] block ids, row-major */
    int32_t max_blocks;         /* row stride of block_table */
    int32_t n_logits;
    const int32_t *logit_rows; /* [n_logits] token indices whose logits are wanted */
} lpx_batch;

/* One step: the batch, and what comes back: with sample, one token per logits
 * row, drawn on the backend exactly as lpx_sample would draw it from that row
 * (bit for bit: sample_math.h), so only token ids leave the device; without, the
 * float logits rows themselves. */
typedef struct lpx_step {
    const lpx_batch *batch;
    const lpx_sample_batch *sample; /* [n_logits] rows, or NULL: the step returns logits */
    const int32_t *feed;            /* [n_tokens] or NULL; only with sample (below) */
    int32_t *tokens;                /* with sample: [n_logits] host, written by step_end */
    float *logits;                  /* without: [n_logits][vocab_size] host, written by
                                       step_end at the latest */
} lpx_step;

/* The one way to run a step, for every caller (engine, bench, lpx logits):
 *  - step_begin checks the step, queues it and returns without waiting for it
 *    (the CPU backend runs it at once). s->batch, s->sample and s->feed may be
 *    reused once it returns; s->tokens / s->logits must stay valid until the
 *    step's step_end returns. A step_begin that fails queues nothing.
 *  - step_end waits for the oldest step begun and not yet ended; when it returns,
 *    that step's tokens or logits are in place. A step_end that fails ends every
 *    step in flight: their sequences' caches are unknown, as after a failed step.
 * lpx_backend_run is the two together, for a caller that waits at once.
 *
 * So that the host prepares and queues step N+1 while the device runs step N (one
 * step ahead; docs/backend.md), at most two steps may be in flight (begun, not
 * ended): a third step_begin is LPX_ERR_BUSY. A step without sample runs alone:
 * it begins only when none is in flight and nothing begins until it has ended
 * (LPX_ERR_BUSY).
 * feed: where feed[i] >= 0, token i is the token that the previous step_begin's
 * step draws for its logits row feed[i] (the host need not know it yet;
 * batch->tokens[i] is ignored). That step must have been a step with sample,
 * begun successfully, with no other step_begin since, and feed[i] must be below
 * its n_logits (else LPX_ERR_INVALID_ARG). A row with a penalty counts every
 * output token, so a step with feed must have no penalised row (checked). */
typedef struct lpx_backend_ops {
    const char *name;
    /* Uploads/prepares weights and allocates the KV cache. */
    lpx_status (*create)(const lpx_model *m, const lpx_backend_opts *o, lpx_backend **out);
    lpx_status (*step_begin)(lpx_backend *b, const lpx_step *s);
    lpx_status (*step_end)(lpx_backend *b);
    /* Copies KV slots of one block to another (prefix sharing/forking; optional, may be NULL). */
    lpx_status (*copy_block)(lpx_backend *b, int32_t src, int32_t dst);
    /* Bytes of device memory in use (weights + KV + scratch). */
    size_t (*memory_used)(const lpx_backend *b);
    void (*destroy)(lpx_backend *b);
} lpx_backend_ops;

struct lpx_backend {
    const lpx_backend_ops *ops;
    const lpx_model *model;
    lpx_backend_opts opts;
};

extern const lpx_backend_ops lpx_cpu_backend_ops;
#ifdef LPX_HAVE_CUDA
extern const lpx_backend_ops lpx_cuda_backend_ops;
#endif

/* step_begin then step_end: one step, waited for (nothing may be in flight). */
lpx_status lpx_backend_run(lpx_backend *b, const lpx_step *s);

/* The dtype a backend stores for a requested one: auto is the CPU backend's f32 and
 * CUDA's bf16; the others are themselves. */
lpx_kv_dtype lpx_kv_dtype_resolve(const lpx_backend_ops *ops, lpx_kv_dtype requested);

/* Bytes of K+V for one token across all layers at a dtype (fp8: with its scales;
 * auto counts as bf16: resolve it first); 0 on overflow. */
size_t lpx_kv_bytes_per_token(const lpx_config *c, lpx_kv_dtype d);

/* The one place that maps a device name to a backend: NULL, "" or "cpu" gives
 * the CPU backend; "cuda" or "cuda:N" the CUDA backend and ordinal N (an
 * LPX_ERR_UNSUPPORTED error when built without CUDA). */
lpx_status lpx_backend_select(const char *device, const lpx_backend_ops **ops, int *ordinal);

#endif
