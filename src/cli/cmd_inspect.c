/* lpx inspect MODEL [--json]: what a model is and what it costs to run. */
#include "cli/commands.h"
#include "cli/opts.h"
#include "doctor/plan.h"
#include "lpx.h"
#include "model/model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: lpx inspect MODEL [--json]\n\n"
               "Opens MODEL (a .gguf file or a Hugging Face model directory), validates it and\n"
               "prints its architecture, sizes, rope, parameters per dtype, weight bytes read\n"
               "per decode step, KV-cache bytes per token (bf16 and fp8) and what was converted\n"
               "at load (the weights of fp8/awq/gptq checkpoints: docs/models.md).\n\n"
               "  -m, --model MODEL  the model (or give it as the first argument)\n"
               "  --json             print one JSON object instead of text\n"
               "  -h, --help         this help\n");
}

static const char *human(double bytes, char *buf, size_t cap) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

/* false when out of memory */
/* A sampling default of the file, null when it gives none (or it was ignored). */
static void add_default(cJSON *o, const char *k, double v) {
    char b[32];
    snprintf(b, sizeof b, "%g", v); /* a float's digits, not its double's */
    if (v >= 0)
        cJSON_AddNumberToObject(o, k, strtod(b, NULL));
    else
        cJSON_AddNullToObject(o, k);
}

static bool print_json(const lpx_model *m, const lpx_model_info *in) {
    const lpx_config *c = &m->cfg;
    cJSON *o = cJSON_CreateObject(), *rope = cJSON_CreateObject(), *dt = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", m->path);
    cJSON_AddStringToObject(o, "format", in->format);
    cJSON_AddStringToObject(o, "arch", in->arch);
    cJSON_AddNumberToObject(o, "n_layers", in->n_layers);
    cJSON_AddNumberToObject(o, "d_model", in->d_model);
    cJSON_AddNumberToObject(o, "n_heads", in->n_heads);
    cJSON_AddNumberToObject(o, "n_kv_heads", in->n_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", in->head_dim);
    cJSON_AddNumberToObject(o, "d_ff", in->d_ff);
    cJSON_AddNumberToObject(o, "vocab_size", in->vocab_size);
    cJSON_AddNumberToObject(o, "context_length", in->max_position_embeddings);
    cJSON_AddNumberToObject(o, "rms_norm_eps", in->rms_norm_eps);
    cJSON_AddNumberToObject(rope, "theta", in->rope_theta);
    cJSON_AddStringToObject(rope, "scaling", in->rope_scaling);
    if (c->rope_scaling != LPX_ROPE_NONE) cJSON_AddNumberToObject(rope, "factor", c->rope_factor);
    if (c->rope_scaling == LPX_ROPE_LLAMA3) {
        cJSON_AddNumberToObject(rope, "low_freq_factor", c->rope_low_freq_factor);
        cJSON_AddNumberToObject(rope, "high_freq_factor", c->rope_high_freq_factor);
        cJSON_AddNumberToObject(rope, "original_max_position_embeddings", c->rope_original_max_pos);
    }
    cJSON_AddBoolToObject(rope, "interleaved", c->rope_interleaved);
    cJSON_AddItemToObject(o, "rope", rope);
    cJSON_AddBoolToObject(o, "tied_embeddings", in->tied_embeddings);
    cJSON_AddBoolToObject(o, "qkv_bias", in->qkv_bias);
    cJSON_AddBoolToObject(o, "qk_norm", in->qk_norm);
    cJSON_AddNumberToObject(o, "sliding_window", c->sliding_window);
    cJSON_AddNumberToObject(o, "n_params", (double)in->n_params);
    for (int t = 0; t < LPX_DT_COUNT; t++)
        if (in->dtype_params[t])
            cJSON_AddNumberToObject(dt, lpx_dtype_name((lpx_dtype)t), (double)in->dtype_params[t]);
    cJSON_AddItemToObject(o, "dtype_params", dt);
    cJSON *db = cJSON_AddObjectToObject(o, "dtype_bytes");
    for (int t = 0; t < LPX_DT_COUNT; t++)
        if (in->dtype_bytes[t])
            cJSON_AddNumberToObject(db, lpx_dtype_name((lpx_dtype)t), (double)in->dtype_bytes[t]);
    cJSON_AddNumberToObject(o, "n_dequantized_at_load", in->n_dequantized_at_load);
    cJSON_AddStringToObject(o, "quantization", in->quantization);
    cJSON_AddNumberToObject(o, "weight_bytes", (double)in->weight_bytes);
    cJSON_AddNumberToObject(o, "decode_bytes_per_step", (double)in->decode_bytes_per_step);
    int64_t held, read;
    lpx_plan_bf16_bytes(m, in, &held, &read);
    cJSON_AddNumberToObject(o, "cuda_bf16_weight_bytes", (double)held);
    cJSON_AddNumberToObject(o, "cuda_bf16_decode_bytes_per_step", (double)read);
    cJSON_AddNumberToObject(o, "kv_bytes_per_token", (double)in->kv_bytes_per_token);
    cJSON_AddNumberToObject(o, "kv_bytes_per_token_fp8", (double)in->kv_bytes_per_token_fp8);
    cJSON_AddBoolToObject(o, "has_chat_template", in->has_chat_template);
    const lpx_tokenizer *tok = lpx_model_tokenizer(m);
    if (tok)
        cJSON_AddNumberToObject(o, "tokenizer_vocab", lpx_vocab_size(tok));
    else
        cJSON_AddNullToObject(o, "tokenizer_vocab");
    cJSON *eos = cJSON_CreateIntArray(m->gen.eos_ids, m->gen.n_eos);
    cJSON_AddItemToObject(o, "eos_token_ids", eos);
    cJSON_AddNumberToObject(o, "bos_token_id", m->gen.bos_id);
    cJSON *sd = cJSON_AddObjectToObject(o, "sampling_defaults");
    add_default(sd, "temperature", m->gen.temperature);
    add_default(sd, "top_p", m->gen.top_p);
    add_default(sd, "top_k", (double)m->gen.top_k);
    add_default(sd, "repetition_penalty", m->gen.repetition_penalty);
    cJSON *w = cJSON_AddArrayToObject(o, "warnings");
    for (int32_t i = 0; i < m->n_warnings; i++)
        cJSON_AddItemToArray(w, cJSON_CreateString(m->warnings[i]));
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) return false;
    puts(s);
    free(s);
    return true;
}

static void print_text(const lpx_model *m, const lpx_model_info *in) {
    const lpx_config *c = &m->cfg;
    char b1[32];
    printf("model               %s\n", m->path);
    printf("format              %s\n", in->format);
    printf("architecture        %s\n", in->arch);
    printf("layers              %d\n", in->n_layers);
    printf("hidden size         %d\n", in->d_model);
    printf("heads               %d (kv heads %d, head dim %d)\n", in->n_heads, in->n_kv_heads,
           in->head_dim);
    printf("ffn size            %d\n", in->d_ff);
    printf("vocab               %d\n", in->vocab_size);
    printf("context length      %d\n", in->max_position_embeddings);
    printf("rope                theta %g, scaling %s", in->rope_theta, in->rope_scaling);
    if (c->rope_scaling != LPX_ROPE_NONE) printf(" (factor %g)", c->rope_factor);
    printf(", %s\n", c->rope_interleaved ? "interleaved pairs" : "rotate-half pairs");
    printf("rms norm eps        %g\n", in->rms_norm_eps);
    printf("tied embeddings     %s\n", in->tied_embeddings ? "yes" : "no");
    printf("qkv bias, qk norm   %s, %s\n", in->qkv_bias ? "yes" : "no", in->qk_norm ? "yes" : "no");
    printf("parameters          %.1fM (%lld)\n", (double)in->n_params / 1e6,
           (long long)in->n_params);
    printf("dtypes             ");
    for (int t = 0; t < LPX_DT_COUNT; t++)
        if (in->dtype_params[t])
            printf(" %s %.1f%% (%s)", lpx_dtype_name((lpx_dtype)t),
                   100.0 * (double)in->dtype_params[t] / (double)in->n_params,
                   human((double)in->dtype_bytes[t], b1, sizeof b1));
    printf("\n");
    if (in->n_dequantized_at_load)
        printf("converted at load   %d tensors: %s\n", in->n_dequantized_at_load, in->quantization);
    else
        printf("converted at load   none\n");
    printf("weight bytes        %s\n", human((double)in->weight_bytes, b1, sizeof b1));
    printf("bytes per decode    %s (one embedding row, all layers, lm_head)\n",
           human((double)in->decode_bytes_per_step, b1, sizeof b1));
    int64_t held, read;
    lpx_plan_bf16_bytes(m, in, &held, &read);
    char b2[32];
    printf("on CUDA             %s held, %s a step: its bf16 copy where it fits, else as stored\n",
           human((double)held, b1, sizeof b1), human((double)read, b2, sizeof b2));
    printf("KV bytes per token  %lld bf16, %lld fp8 (--kv-cache-dtype; cpu auto: f32, %lld)\n",
           (long long)in->kv_bytes_per_token, (long long)in->kv_bytes_per_token_fp8,
           (long long)in->kv_bytes_per_token * 2);
    printf("chat template       %s\n", in->has_chat_template ? "yes" : "no");
    const lpx_tokenizer *tok = lpx_model_tokenizer(m);
    if (tok)
        printf("tokenizer           %d tokens\n", lpx_vocab_size(tok));
    else
        printf("tokenizer           none (weights only)\n");
    const lpx_gen_defaults *g = &m->gen;
    printf("sampling defaults  ");
    if (g->temperature >= 0) printf(" temperature %g", g->temperature);
    if (g->top_p >= 0) printf(" top_p %g", g->top_p);
    if (g->top_k >= 0) printf(" top_k %d", g->top_k);
    if (g->repetition_penalty >= 0) printf(" repetition_penalty %g", g->repetition_penalty);
    if (g->temperature < 0 && g->top_p < 0 && g->top_k < 0 && g->repetition_penalty < 0)
        printf(" none in the file");
    printf("\n");
    for (int32_t i = 0; i < m->n_warnings; i++)
        printf("warning             %s\n", m->warnings[i]);
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    const char *arg;
    lpx_opts a = {.cmd = "inspect", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_flag(&a, "--json"))
            json = true;
        else if (!path && lpx_opts_arg(&a, &arg))
            path = arg;
        else if (!lpx_opts_str(&a, LPX_OPT_MODEL, &path) && lpx_opts_left(&a)) {
            fprintf(stderr, "lpx inspect: unexpected argument '%s' (lpx inspect --help)\n",
                    argv[a.i]);
            a.bad = true;
        }
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (!path) {
        usage(stderr);
        return 2;
    }
    lpx_model *m;
    lpx_model_info info;
    if (lpx_model_open(path, &m) != LPX_OK || lpx_model_info_get(m, &info) != LPX_OK) {
        fprintf(stderr, "lpx inspect: %s\n", lpx_last_error());
        return 1;
    }
    int rc = 0;
    if (!json)
        print_text(m, &info);
    else if (!print_json(m, &info)) {
        fprintf(stderr, "lpx inspect: out of memory\n");
        rc = 1;
    }
    lpx_model_close(m);
    return rc;
}
