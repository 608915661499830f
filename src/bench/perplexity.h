/* lpx perplexity: perplexity of a model over a text, as llama.cpp's llama-perplexity
 * computes it, and the divergence of its next-token distributions from a base model's
 * saved ones. It drives a backend through the step contract (backend.h), so it runs on
 * the CPU and on CUDA alike.
 *
 * The text is tokenized whole (with the BOS the tokenizer adds) and cut into windows of
 * ctx tokens (a shorter tail is dropped); each window is evaluated from an empty cache,
 * its first token set to BOS when the tokenizer adds one, and only its second half is
 * scored: the positions j in [ctx/2, ctx - 1) each predict token j + 1, so every scored
 * token has at least ctx/2 tokens of context. PPL = exp(mean NLL); its error is
 * PPL * the standard error of the mean NLL.
 *
 * Log-prob files (--save-logits, --kl-base), little-endian:
 *   char magic[8] "LPXLOGP\0", u32 version (1), u32 vocab, u32 ctx, u32 reserved (0),
 *   u64 n_tokens, i32 tokens[n_tokens] (the whole tokenized text),
 *   u64 n_positions, then per scored position in order f16 log_softmax[vocab].
 * A comparison needs the same vocab, ctx and token ids. The KL divergence
 * KL(base || model) of a position is computed over the f16-rounded log-probs of both
 * (the model's are rounded as the base's were), so a model against its own file gives 0. */
#ifndef LPX_BENCH_PERPLEXITY_H
#define LPX_BENCH_PERPLEXITY_H

#include "lpx.h"

#include <stdbool.h>
#include <stdint.h>

#define LPX_LOGP_MAGIC "LPXLOGP"
#define LPX_LOGP_VERSION 1

typedef struct ppl_opts {
    const char *model;
    const char *text_file;
    const char *device;       /* NULL: cpu */
    int32_t n_threads;        /* cpu; 0 = all cores */
    int32_t ctx;              /* window tokens; 0 = 512 */
    int32_t batch;            /* tokens per step; 0 = ctx */
    const char *save_logits;  /* write the scored positions' log-probs here, or NULL */
    const char *kl_base;      /* compare against this file, or NULL */
    const char *tune, *trace; /* lpx_backend_opts' developer strings; may be NULL */
    /* After each window: its number (1-based), of n, and the running PPL. May be NULL. */
    void (*progress)(void *ctx, int64_t window, int64_t n, double ppl, double err);
    void *ctx_arg;
} ppl_opts;

typedef struct ppl_result {
    int64_t n_tokens, n_windows, n_scored;
    double ppl, ppl_err;
    bool have_kl;                  /* kl_base given: */
    double base_ppl, base_ppl_err; /* the base's own, from its log-probs */
    double kl_mean, kl_err, kl_p99, kl_max;
    int64_t same_top; /* positions whose most likely token agrees with the base's */
} ppl_result;

lpx_status ppl_run(const ppl_opts *o, ppl_result *r);

#endif
