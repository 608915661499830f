/* lpx — fast, dependable inference for small language models.
 *
 * Public C API. Every name is prefixed lpx_; handles are opaque; functions that
 * can fail return an lpx_status and leave a message in a thread-local buffer
 * read with lpx_last_error(). The library never exits and never aborts on bad
 * input. Enum values are explicit and append-only. */
#ifndef LPX_H
#define LPX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------- */

typedef enum lpx_status {
    LPX_OK = 0,
    LPX_ERR_INVALID_ARG = 1,   /* a caller passed a bad value */
    LPX_ERR_IO = 2,            /* open/read/mmap failed */
    LPX_ERR_FORMAT = 3,        /* a model/tokenizer file is malformed */
    LPX_ERR_UNSUPPORTED = 4,   /* well-formed but not supported (arch, dtype, template) */
    LPX_ERR_NOMEM = 5,         /* host or device allocation failed */
    LPX_ERR_TOO_LONG = 6,      /* prompt or request exceeds the context */
    LPX_ERR_DEVICE = 7,        /* GPU/driver failure */
    LPX_ERR_CANCELLED = 8,     /* request cancelled */
    LPX_ERR_BUSY = 9,          /* queue full / engine draining */
    LPX_ERR_INTERNAL = 10,     /* a bug in lpx */
} lpx_status;

/* Message of the last failure on this thread ("" when none). */
const char *lpx_last_error(void);
const char *lpx_status_name(lpx_status s);
const char *lpx_version(void);

/* ---- model -------------------------------------------------------------- */

typedef struct lpx_model lpx_model;

/* Opens a Hugging Face model directory or a .gguf file. The file is mmapped
 * and fully validated before any tensor is used. */
lpx_status lpx_model_open(const char *path, lpx_model **out);
void lpx_model_close(lpx_model *m);

typedef struct lpx_model_info {
    char arch[32];            /* "llama", "qwen2", "qwen3", "mistral" */
    char format[16];          /* "gguf" or "safetensors" */
    int32_t n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab_size;
    int32_t max_position_embeddings;
    float rope_theta, rms_norm_eps;
    char rope_scaling[16];    /* "none", "llama3", "linear" */
    bool tied_embeddings, qkv_bias, qk_norm, has_chat_template;
    int64_t n_params;
    int64_t weight_bytes;            /* bytes of weights as stored */
    int64_t decode_bytes_per_step;   /* bytes read per decode step at batch 1 */
    int64_t kv_bytes_per_token;      /* K+V of every layer in a bf16 KV cache (CUDA's auto) */
    int64_t dtype_params[16];        /* parameter count per lpx_dtype */
    int32_t n_dequantized_at_load;   /* tensors converted at load: the weights of a quantized
                                        Hugging Face checkpoint (fp8, awq, gptq); GGUF types
                                        are all kept as stored */
    int64_t dtype_bytes[16];         /* weight bytes per lpx_dtype */
    int64_t kv_bytes_per_token_fp8;  /* the same in an fp8 KV cache: codes + scales */
    char quantization[96];           /* what was converted at load, e.g. "awq (int4, group
                                        128) -> F16"; "" when nothing was */
} lpx_model_info;

lpx_status lpx_model_info_get(const lpx_model *m, lpx_model_info *out);

/* ---- tokenizer ---------------------------------------------------------- */

typedef struct lpx_tokenizer lpx_tokenizer;

/* The model's tokenizer (owned by the model; valid until lpx_model_close). */
const lpx_tokenizer *lpx_model_tokenizer(const lpx_model *m);

/* Encodes UTF-8 text. add_special adds BOS/EOS as the tokenizer config asks;
 * special tokens written in the text are recognised when parse_special is set.
 * Writes up to cap ids and sets *n_out to the full count (call again with a
 * larger buffer when *n_out > cap). */
lpx_status lpx_tokenize(const lpx_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t *ids, size_t cap, size_t *n_out);

/* Decodes ids to UTF-8 text into buf (NUL-terminated); *n_out is the full length. */
lpx_status lpx_detokenize(const lpx_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                          char *buf, size_t cap, size_t *n_out);

int32_t lpx_vocab_size(const lpx_tokenizer *t);
/* The text of one token as stored in the vocabulary, or NULL for a bad id. */
const char *lpx_token_text(const lpx_tokenizer *t, int32_t id);

/* ---- chat templates ------------------------------------------------------ */

typedef struct lpx_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content;
} lpx_chat_message;

/* Renders the model's chat template as transformers' apply_chat_template does.
 * Returns a malloc'd string in *out (free with lpx_free). enable_thinking is
 * passed to templates that read it (Qwen3); -1 leaves it undefined. */
lpx_status lpx_chat_render(const lpx_model *m, const lpx_chat_message *msgs, size_t n_msgs,
                           bool add_generation_prompt, int enable_thinking, char **out);

void lpx_free(void *p);

/* ---- KV cache dtype ------------------------------------------------------ */

/* What the KV cache stores (--kv-cache-dtype, vLLM's flag). fp8 halves the bytes per
 * token against bf16: OCP E4M3 ("e4m3fn") codes with one float32 scale per token,
 * layer, K or V and KV head, quantized from the bf16 values (src/format/kv_fp8.h has
 * the exact arithmetic; docs/engine.md its measured accuracy). */
typedef enum lpx_kv_dtype {
    LPX_KV_AUTO = 0, /* the backend's own: bf16 on CUDA, f32 on the CPU backend */
    LPX_KV_BF16 = 1,
    LPX_KV_FP8 = 2,  /* e4m3 codes with a scale per head (format/kv_fp8.h), both backends */
    LPX_KV_F32 = 3,  /* the CPU backend's auto, named in stats and messages; not a
                        value of --kv-cache-dtype */
} lpx_kv_dtype;

/* "auto", "bf16" (or "bfloat16"), "fp8" (or "fp8_e4m3"); anything else is
 * LPX_ERR_INVALID_ARG with a message listing those. */
lpx_status lpx_kv_dtype_parse(const char *s, lpx_kv_dtype *out);
const char *lpx_kv_dtype_name(lpx_kv_dtype d); /* "auto", "bf16", "fp8", "f32" */

/* ---- engine -------------------------------------------------------------- */

/* An engine serves many concurrent requests on one model: a paged KV cache,
 * a continuous-batching scheduler with chunked prefill and preemption, the
 * sampler and the stop logic. submit/cancel/stats are thread-safe; the work
 * runs either on the engine's own thread (lpx_engine_start) or in the
 * caller's lpx_engine_step calls, never both. Callbacks run on the thread that
 * steps the engine, with no engine lock held: they may call submit/cancel/
 * stats, never lpx_engine_step/stop/destroy. docs/engine.md has the design. */
typedef struct lpx_engine lpx_engine;

typedef struct lpx_engine_opts {
    const char *device;             /* "cpu", "cuda", "cuda:N"; NULL or "": cuda when built
                                       with CUDA and a GPU is usable, else cpu */
    int32_t max_num_seqs;           /* sequences in one step; 0 = 16 (cpu) / 64 (cuda) */
    int32_t max_num_batched_tokens; /* tokens in one step; 0 = 512 (cpu) / 2048 (cuda) */
    int32_t max_model_len;          /* prompt + output; 0 = the model's max positions */
    int64_t kv_cache_bytes;         /* KV pool budget; 0 = derived (see docs/engine.md) */
    float gpu_memory_utilization;   /* cuda, when kv_cache_bytes == 0; 0 = 0.9 */
    int32_t block_size;             /* tokens per KV block; 0 = 16 */
    int32_t n_threads;              /* cpu threads; 0 = all cores */
    int32_t step_ahead;             /* decode one step ahead when the backend can (the host
                                       enqueues step N+1 before it reads step N's tokens):
                                       1 = on, -1 = off, 0 = default (on) */
    int32_t device_sampling;        /* sample on the device when the backend can and no row
                                       needs logits (only token ids cross to the host):
                                       1 = on, -1 = off, 0 = default (on) */
    int32_t prefix_caching;         /* keep full KV blocks for reuse: a request whose tokens
                                       begin as an earlier one's takes its cached blocks and
                                       computes only the rest (outputs are unchanged):
                                       1 = on, -1 = off, 0 = default (on) */
    const char *dev_tune;           /* developer overrides of the backend's measured tuning,
                                       "key=value,..." (docs/dev.md); NULL = the defaults */
    const char *dev_trace;          /* developer tracing of the backend (docs/dev.md); NULL =
                                       none. Both are read during lpx_engine_create only; the
                                       CPU backend takes neither (non-empty: INVALID_ARG) */
    lpx_kv_dtype kv_cache_dtype;    /* KV cache dtype; 0 = LPX_KV_AUTO. The pool's bytes per
                                       token follow it (fp8: about half of bf16) */
    int32_t max_num_seqs_per_request; /* running sequences of one group (lpx_request.group:
                                       a client request's n choices) at once, so that one
                                       n=16 request leaves slots to others; 0 = half of
                                       max_num_seqs (at least 1); max_num_seqs: no cap */
} lpx_engine_opts;

/* One entry of a logit bias: bias is added to the logit of token id. */
typedef struct lpx_logit_bias {
    int32_t id;
    float bias;
} lpx_logit_bias;

#define LPX_MAX_LOGIT_BIAS 1024 /* entries per request */

/* Sampling, applied in this order (vLLM's): the logit bias; repetition,
 * presence and frequency penalties; temperature; min_p; top_k; top_p; then a draw from the per-request
 * generator seeded by (seed, index of the generated token), so a request gives
 * the same tokens whatever else is in the batch and across preemptions. */
typedef struct lpx_sampling_params {
    float temperature;        /* 0 = greedy (argmax after penalties) */
    int32_t top_k;            /* 0 or -1 = off */
    float top_p;              /* in (0, 1]; 1 = off */
    float min_p;              /* in [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off (transformers: over prompt and output) */
    float presence_penalty;   /* 0 = off (vLLM: over output tokens) */
    float frequency_penalty;  /* 0 = off (vLLM: over output tokens) */
    int64_t seed;             /* < 0: a fresh random seed per request */
    int32_t logprobs;         /* top-n log-probabilities per token, 0..20 */
    const lpx_logit_bias *logit_bias; /* [n_logit_bias] finite biases of ids in the
                                         vocabulary, copied by submit; a request with one is
                                         sampled on the host (docs/engine.md) */
    int32_t n_logit_bias;     /* 0..LPX_MAX_LOGIT_BIAS */
} lpx_sampling_params;

/* What the output must be (docs/structured-outputs.md). A constrained request is
 * sampled on the host (its token mask depends on the token before), masks cached per
 * grammar state; EOS is allowed only where the output is a whole document, and the
 * output ends (finish "stop") once nothing can follow. */
typedef enum lpx_output_format {
    LPX_OUTPUT_TEXT = 0,        /* anything */
    LPX_OUTPUT_JSON_OBJECT = 1, /* a JSON object */
    LPX_OUTPUT_JSON_SCHEMA = 2, /* a JSON value valid against json_schema */
    LPX_OUTPUT_TOOL_CALLS = 3,  /* tool calls in a model family's format: json_schema is
                                   {"format": "hermes" | "llama3", "functions": [{"name",
                                   "parameters": a schema}, ...], "parallel": bool}
                                   (docs/server.md "Tool calls") */
} lpx_output_format;

/* One request. The prompt is exactly one of: token ids; text (tokenized with
 * the tokenizer's BOS/EOS rules, special tokens recognised); chat messages
 * (rendered with the model's chat template + generation prompt, then
 * tokenized without adding specials). Everything is copied by submit. */
typedef struct lpx_request {
    const int32_t *prompt_ids;
    size_t n_prompt_ids;
    const char *prompt_text;
    const lpx_chat_message *messages;
    size_t n_messages;
    lpx_sampling_params sampling;
    int32_t max_tokens;           /* generated tokens; -1 = up to max_model_len */
    const char *const *stop;      /* stop strings: end the output, never emitted */
    size_t n_stop;
    const int32_t *stop_token_ids; /* extra ids that end the output (kept in token_ids) */
    size_t n_stop_token_ids;
    bool ignore_eos;              /* don't stop on the model's EOS ids */
    bool skip_special;            /* leave special tokens out of the text (default true) */
    lpx_output_format output_format; /* default LPX_OUTPUT_TEXT */
    const char *json_schema;      /* LPX_OUTPUT_JSON_SCHEMA: the schema's JSON text (the
                                     subset of docs/structured-outputs.md; anything else
                                     is LPX_ERR_INVALID_ARG naming the keyword's path);
                                     LPX_OUTPUT_TOOL_CALLS: the calls' description */
    int32_t prompt_logprobs;      /* 0 = off; 1..20: each prompt token's log-probability
                                     given the tokens before it, and that many most likely
                                     tokens at its place, from the model's raw logits (no
                                     bias, penalty or temperature), sent with the first
                                     output token's event. Such a request reads no prefix
                                     cache until then and is sampled on the host */
    uint64_t group;               /* 0: a group of its own; else the id submit gave an
                                     earlier request of the group (the first choice of a
                                     client request with n > 1): a group runs at most
                                     max_num_seqs_per_request sequences at once */
} lpx_request;

/* Defaults: greedy, no penalties, random seed, max_tokens -1, skip_special. */
void lpx_request_init(lpx_request *r);
void lpx_engine_opts_init(lpx_engine_opts *o);

typedef enum lpx_finish_reason {
    LPX_FINISH_NONE = 0,      /* not finished */
    LPX_FINISH_STOP = 1,      /* EOS, a stop token id or a stop string */
    LPX_FINISH_LENGTH = 2,    /* max_tokens or max_model_len */
    LPX_FINISH_CANCELLED = 3, /* lpx_engine_cancel */
    LPX_FINISH_ERROR = 4,     /* the backend failed; see lpx_event.error */
} lpx_finish_reason;

const char *lpx_finish_reason_name(lpx_finish_reason r); /* "stop", "length", ... */

typedef struct lpx_token_logprob {
    int32_t id;
    float logprob;
} lpx_token_logprob;

/* One callback per generated token, plus the finish (which may come with the
 * last token or alone, token == -1). text is the output text that became final
 * with this event: it may be empty (an incomplete UTF-8 character, or text held
 * back because it could begin a stop string) and a later event may release it.
 * The concatenation of all texts is the output. Pointers are valid during the
 * callback only. Logprobs are log-softmax of the logits after penalties and
 * temperature, before min_p/top_k/top_p (greedy: temperature 1). */
typedef struct lpx_event {
    uint64_t id;
    int32_t token;               /* -1: no new token (a finish alone) */
    int32_t index;               /* index of this token in the output */
    const char *text;
    size_t text_len;
    float logprob;               /* of token, when sampling.logprobs > 0 */
    const lpx_token_logprob *top; /* [n_top], most likely first */
    int32_t n_top;
    lpx_finish_reason finish;
    const char *error;           /* finish == LPX_FINISH_ERROR: the message */
    /* Set on the finish event. */
    int32_t n_prompt_tokens, n_output_tokens, n_preemptions;
    double ttft_ms;              /* submit to first token */
    double total_ms;             /* submit to finish */
    double decode_tok_s;         /* output tokens after the first / their time */
    double queue_ms;             /* submit to the first step that ran it (total_ms if none) */
    int32_t n_cached_tokens;     /* prompt tokens whose KV came from the prefix cache (before
                                    any preemption), not computed */
    /* The first output token's event of a request with prompt_logprobs (else NULL):
     * prompt_logprob[i] is prompt token i's log-probability ([n_prompt_tokens], also set
     * here; [0] is NAN: nothing comes before it), prompt_top[i * n_prompt_top ..] the
     * n_prompt_top most likely tokens at position i, most likely first (row 0 unset),
     * prompt_rank[i] token i's rank there: how many tokens are at least as likely,
     * itself included (1 = the most likely; [0] is 0). */
    const float *prompt_logprob;
    const lpx_token_logprob *prompt_top;
    int32_t n_prompt_top;
    const int32_t *prompt_rank;
} lpx_event;

typedef void (*lpx_event_cb)(const lpx_event *ev, void *user);

/* Loads the backend for opts->device and allocates the KV pool. The model must
 * outlive the engine. */
lpx_status lpx_engine_create(const lpx_model *m, const lpx_engine_opts *opts, lpx_engine **out);
/* Stops the engine thread if running; outstanding requests finish as cancelled. */
void lpx_engine_destroy(lpx_engine *e);

/* Validates and queues a request; *id identifies it. Refuses (LPX_ERR_TOO_LONG,
 * naming the limit, and for the KV pool the memory the request needs) a prompt that
 * leaves no room for one output token within max_model_len or within the whole KV
 * pool, and a request whose prompt + max_tokens fits max_model_len but not the KV
 * pool, before taking memory. */
lpx_status lpx_engine_submit(lpx_engine *e, const lpx_request *r, lpx_event_cb cb, void *user,
                             uint64_t *id);
/* Ends a request with LPX_FINISH_CANCELLED at the next step; a finished or
 * unknown-but-issued id is a no-op. */
lpx_status lpx_engine_cancel(lpx_engine *e, uint64_t id);

/* Single-threaded use: runs one scheduling step (may run no model step when
 * idle); *busy tells whether requests remain or a step is still in flight (one
 * step ahead: docs/engine.md). Not while the engine thread runs. */
lpx_status lpx_engine_step(lpx_engine *e, bool *busy);
/* Runs the engine loop on its own thread until lpx_engine_stop. */
lpx_status lpx_engine_start(lpx_engine *e);
void lpx_engine_stop(lpx_engine *e);

typedef struct lpx_engine_stats {
    char device[32];
    int64_t n_submitted, n_finished, n_running, n_waiting;
    int64_t prompt_tokens;      /* prompt tokens of admitted requests */
    int64_t generated_tokens;
    int64_t computed_tokens;    /* tokens through the model (prefill + decode + recompute) */
    int64_t n_steps, n_preemptions;
    double ttft_ms_mean;        /* over finished requests that produced a token */
    double busy_s;              /* time inside steps */
    double tok_s;               /* generated_tokens / busy_s */
    int32_t block_size;
    int32_t kv_blocks_total, kv_blocks_used, kv_blocks_peak;
    int64_t kv_bytes;           /* KV pool size */
    int32_t max_model_len, max_num_seqs, max_num_batched_tokens;
    size_t backend_memory;      /* backend's memory_used */
    size_t peak_rss;            /* this process, bytes */
    int64_t steps_ahead;        /* of n_steps, those begun before the previous one ended */
    /* Prefix cache, in tokens: each admission to the batch (a preempted request's again)
     * queries its tokens; hits are those whose KV came from the cache, not computed. */
    int64_t prefix_cache_queries, prefix_cache_hits;
    int32_t kv_blocks_cached;   /* blocks kept for reuse, held or not (not in kv_blocks_used
                                   unless a request holds them; evicted when the pool needs) */
    char kv_cache_dtype[8];     /* what the pool stores: "bf16", "fp8", "f32" */
    int64_t kv_bytes_per_token; /* of the pool at that dtype */
    int32_t max_num_seqs_per_request; /* the cap on one group's running sequences */
} lpx_engine_stats;

lpx_status lpx_engine_get_stats(lpx_engine *e, lpx_engine_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* LPX_H */
