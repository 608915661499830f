/* lpx logits' job: drives a backend directly, without the engine. It feeds token ids
 * through one or more sequences (all of them in each step), writes the float32 logits of
 * every kept position to a file ([rows][vocab], sequences in the order given) and can
 * continue greedily, all sequences batched. Used by the backend conformance tests. */
#ifndef LPX_BENCH_LOGITS_RUN_H
#define LPX_BENCH_LOGITS_RUN_H

#include "backend/backend.h"
#include "lpx.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct logits_run_opts {
    const char *model;
    const lpx_backend_ops *ops; /* lpx_backend_select's answer */
    int ordinal;
    int32_t n_seqs;
    const int32_t *const *ids; /* [n_seqs] prompt ids of each sequence */
    const int32_t *n_ids;      /* [n_seqs] */
    const int32_t *chunks;     /* ids a step: NULL (by mode), one for all or [n_seqs] */
    int32_t n_chunks;          /* 0, 1 or n_seqs */
    bool decode;               /* no chunks: one id a step through the KV cache */
    int32_t tail;              /* > 0: keep only each sequence's last `tail` positions; with
                                  decode they are fed one id a step (decode at depth), the ids
                                  before them in steps of the chunk (default all) */
    int32_t n_greedy;          /* then generate this many tokens greedily */
    int32_t n_threads, block_size;
    lpx_kv_dtype kv_dtype;
    const char *tune, *trace; /* lpx_backend_opts' developer strings; may be NULL */
    const char *out_path;     /* where the logits go; NULL: nowhere */
} logits_run_opts;

typedef struct logits_run_result {
    int32_t *greedy; /* [n_seqs][n_greedy]; free() it */
    int64_t prefill_tokens, prefill_steps, decode_tokens;
    /* wall and CPU time: on a shared machine the wall time says how busy the neighbours
     * were, the CPU time what the work cost */
    double prefill_s, prefill_cpu_s, decode_s, decode_cpu_s;
} logits_run_result;

/* Runs the job; on failure the message names the stage ("step: ...", "creating the
 * backend: ...", "writing FILE: ...") and r->greedy is NULL. */
lpx_status logits_run(const logits_run_opts *o, logits_run_result *r);

#endif
