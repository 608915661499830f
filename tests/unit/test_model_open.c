/* lpx_model_open on the tiny fixtures of tests/fixtures/model/ (made by
 * scripts/make-model-fixtures.py; the values checked here are the ones that
 * script wrote): weights bound per family, generation defaults, templates. */
#include "lpx.h"
#include "model/model.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FIX "tests/fixtures/model/"

static lpx_model *open_ok(const char *path) {
    lpx_model *m = NULL;
    lpx_status s = lpx_model_open(path, &m);
    if (s != LPX_OK) fprintf(stderr, "%s: %s\n", path, lpx_last_error());
    CHECK(s == LPX_OK && m);
    return s == LPX_OK ? m : NULL;
}

static void check_gguf_llama(void) {
    lpx_model *m = open_ok(FIX "tiny-llama.gguf");
    if (!m) return;
    const lpx_config *c = &m->cfg;
    CHECK(c->arch == LPX_ARCH_LLAMA && c->rope_interleaved && c->tied_embeddings);
    CHECK(c->n_layers == 2 && c->d_model == 64 && c->n_heads == 4 && c->n_kv_heads == 2);
    CHECK(c->head_dim == 16 && c->d_ff == 128 && c->vocab_size == 260);
    CHECK(c->rope_scaling == LPX_ROPE_LINEAR && c->rope_factor == 2.0f);
    CHECK(m->w.lm_head == m->w.tok_embd && m->w.tok_embd->type == LPX_DT_Q8_0);
    CHECK(m->w.layers[1].wq->type == LPX_DT_Q4_0 && m->w.layers[1].wk->type == LPX_DT_Q4_1);
    CHECK(m->w.layers[0].wq->shape[0] == 64 && m->w.layers[0].wq->shape[1] == 64);
    CHECK(m->w.layers[0].wk->shape[0] == 32 && m->w.layers[0].w_down->shape[1] == 128);
    CHECK(m->w.layers[0].bq == NULL && m->w.layers[0].q_norm == NULL);
    CHECK(lpx_model_find_tensor(m, "blk.1.ffn_up.weight") == m->w.layers[1].w_up);
    CHECK(lpx_model_find_tensor(m, "blk.2.ffn_up.weight") == NULL);
    CHECK(m->gen.n_eos == 1 && m->gen.eos_ids[0] == 259 && m->gen.bos_id == 258);
    CHECK(m->gen.temperature < 0 && m->gen.top_k < 0);
    CHECK(m->chat_template && strstr(m->chat_template, "<|im_start|>assistant"));
    lpx_model_info info;
    CHECK(lpx_model_info_get(m, &info) == LPX_OK);
    CHECK(info.n_dequantized_at_load == 0);
    CHECK(!strcmp(info.arch, "llama") && !strcmp(info.format, "gguf"));
    CHECK(info.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2);
    int64_t embd = (int64_t)m->w.tok_embd->nbytes;
    CHECK(info.decode_bytes_per_step == info.weight_bytes + embd / 260);
    lpx_model_close(m);
}

/* rope_freqs.weight as llama.cpp writes it for Llama 3.x (factor 32) */
static void check_gguf_llama3(void) {
    lpx_model *m = open_ok(FIX "tiny-llama3.gguf");
    if (!m) return;
    const lpx_config *c = &m->cfg;
    CHECK(c->rope_scaling == LPX_ROPE_LLAMA3 && c->rope_factor == 32.0f);
    CHECK(c->rope_low_freq_factor == 1.0f && c->rope_high_freq_factor == 4.0f);
    CHECK(c->rope_original_max_pos == 8192 && c->rope_interleaved);
    lpx_model_close(m);
}

static void check_gguf_qwen(void) {
    lpx_model *m = open_ok(FIX "tiny-qwen2.gguf");
    if (m) {
        CHECK(m->cfg.qkv_bias && !m->cfg.rope_interleaved && !m->cfg.tied_embeddings);
        CHECK(m->w.layers[0].bq && m->w.layers[0].bq->shape[0] == 64 &&
              m->w.layers[0].bv->shape[0] == 32);
        CHECK(m->w.lm_head != m->w.tok_embd && m->w.lm_head->type == LPX_DT_Q8_0);
        CHECK(m->w.layers[0].wq->type == LPX_DT_BF16);
        lpx_model_info info;
        lpx_model_info_get(m, &info);
        /* Untied: one embedding row instead of the whole embedding. */
        int64_t embd = (int64_t)m->w.tok_embd->nbytes;
        CHECK(info.decode_bytes_per_step == info.weight_bytes - embd + embd / 260);
        lpx_model_close(m);
    }
    m = open_ok(FIX "tiny-qwen3.gguf");
    if (m) {
        CHECK(m->cfg.qk_norm && m->cfg.head_dim == 32 && m->cfg.d_model == 256);
        CHECK(m->w.layers[1].q_norm && m->w.layers[1].q_norm->shape[0] == 32);
        const lpx_tensor *t = m->w.layers[0].w_down; /* Q6_K in the file: kept as blocks */
        CHECK(t->type == LPX_DT_Q6_K && t->nbytes == 256 * 512 / 256 * 210 && t->shape[1] == 512);
        CHECK(m->w.layers[0].w_gate->type == LPX_DT_Q4_K);
        float x[512];
        lpx_dequantize_row(t->type, t->data, x, 512);
        double sum = 0;
        for (int i = 0; i < 512; i++)
            sum += fabs(x[i]);
        CHECK(sum > 0 && isfinite(sum));
        lpx_model_info info;
        lpx_model_info_get(m, &info);
        CHECK(info.n_dequantized_at_load == 0);
        lpx_model_close(m);
    }
}

static void check_hf(void) {
    lpx_model *m = open_ok(FIX "hf-qwen2");
    if (m) {
        CHECK(!strcmp(m->format, "safetensors") && m->cfg.arch == LPX_ARCH_QWEN2);
        CHECK(m->cfg.qkv_bias && !m->cfg.tied_embeddings && m->w.layers[0].bk);
        CHECK(m->gen.temperature == 0.6f && m->gen.top_p == 0.9f && m->gen.top_k == 20);
        CHECK(m->gen.repetition_penalty == 1.05f && m->gen.bos_id == 258);
        CHECK(m->gen.n_eos == 2 && m->gen.eos_ids[0] == 259 && m->gen.eos_ids[1] == 258);
        /* The template list's "default" entry, not the "tool_use" one. */
        CHECK(m->chat_template && strstr(m->chat_template, "add_generation_prompt"));
        CHECK(m->w.layers[0].wq->type == LPX_DT_F32);
        lpx_model_close(m);
    }
    m = open_ok(FIX "hf-llama");
    if (m) {
        const lpx_config *c = &m->cfg;
        CHECK(c->rope_scaling == LPX_ROPE_LLAMA3 && c->rope_factor == 8.0f);
        CHECK(c->rope_low_freq_factor == 1.0f && c->rope_high_freq_factor == 4.0f);
        CHECK(c->rope_original_max_pos == 256 && c->rope_theta == 500000.0f);
        CHECK(c->tied_embeddings && m->w.lm_head == m->w.tok_embd && !c->rope_interleaved);
        CHECK(m->w.tok_embd->type == LPX_DT_F16);
        lpx_model_close(m);
    }
    m = open_ok(FIX "hf-qwen3"); /* sharded */
    if (m) {
        CHECK(m->cfg.head_dim == 32 && m->cfg.d_model == 64 && m->w.layers[1].k_norm);
        CHECK(m->w.layers[0].wq->shape[0] == 128 && m->w.layers[0].wo->shape[1] == 128);
        lpx_model_close(m);
    }
    m = open_ok(FIX "hf-mistral");
    if (m) {
        CHECK(m->cfg.arch == LPX_ARCH_MISTRAL && m->cfg.sliding_window == 256);
        CHECK(m->cfg.n_kv_heads == 1);
        lpx_model_close(m);
    }
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*n + 1);
    if (fread(p, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return p;
}

static void spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n);
    if (f) fclose(f);
}

/* safetensors does not align tensor data: one byte more of header (JSON
 * whitespace) leaves every F32 tensor of hf-mistral misaligned; the loader
 * must hand backends aligned copies with the same bytes. */
static void check_unaligned_safetensors(void) {
    char dir[] = "/tmp/lpx-test-unaligned-XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    size_t n, cn;
    unsigned char *st = slurp(FIX "hf-mistral/model.safetensors", &n);
    unsigned char *cfg = slurp(FIX "hf-mistral/config.json", &cn);
    CHECK(st && cfg && n > 8);
    if (!st || !cfg) return;
    uint64_t hlen;
    memcpy(&hlen, st, 8);
    unsigned char *shifted = malloc(n + 1);
    uint64_t hlen1 = hlen + 1;
    memcpy(shifted, &hlen1, 8);
    memcpy(shifted + 8, st + 8, hlen);
    shifted[8 + hlen] = ' ';
    memcpy(shifted + 9 + hlen, st + 8 + hlen, n - 8 - hlen);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    spit(path, shifted, n + 1);
    snprintf(path, sizeof path, "%s/config.json", dir);
    spit(path, cfg, cn);
    lpx_model *a = open_ok(FIX "hf-mistral"), *b = open_ok(dir);
    if (a && b) {
        const lpx_tensor *ta = a->w.layers[1].w_down, *tb = b->w.layers[1].w_down;
        CHECK(tb->type == LPX_DT_F32 && (uintptr_t)tb->data % 4 == 0);
        CHECK(ta->nbytes == tb->nbytes && !memcmp(ta->data, tb->data, ta->nbytes));
    }
    lpx_model_close(a);
    lpx_model_close(b);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    remove(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    remove(path);
    remove(dir);
    free(st);
    free(cfg);
    free(shifted);
}

/* The model's tokenizer, GGUF metadata and tokenizer.json alike, encodes as the
 * tokenizers package does with hf-llama/tokenizer.json: ids 116 257 256 104 105
 * 110 103 259 ('t' 'he' 'Ġt' 'h' 'i' 'n' 'g' '<|im_end|>'). */
static void check_tokenizer(const char *path) {
    static const int32_t want[] = {116, 257, 256, 104, 105, 110, 103, 259};
    lpx_model *m = open_ok(path);
    if (!m) return;
    const lpx_tokenizer *t = lpx_model_tokenizer(m);
    CHECK(t && lpx_vocab_size(t) == 260);
    int32_t ids[16];
    size_t n = 0;
    const char *text = "the thing<|im_end|>";
    CHECK(t && lpx_tokenize(t, text, strlen(text), false, true, ids, 16, &n) == LPX_OK);
    CHECK(n == 8 && !memcmp(ids, want, sizeof want));
    lpx_model_close(m);
}

int main(void) {
    check_tokenizer(FIX "tiny-qwen2.gguf");
    check_tokenizer(FIX "hf-llama");
    lpx_model *w = open_ok("tests/fixtures/models/qwen3"); /* weights only */
    CHECK(w && lpx_model_tokenizer(w) == NULL);
    lpx_model_close(w);
    check_unaligned_safetensors();
    check_gguf_llama();
    check_gguf_llama3();
    check_gguf_qwen();
    check_hf();
    lpx_model *m = (lpx_model *)1;
    CHECK(lpx_model_open(FIX "does-not-exist", &m) == LPX_ERR_IO && m == NULL);
    CHECK(strstr(lpx_last_error(), "does-not-exist") != NULL);
    CHECK(lpx_model_open(FIX "meta.gguf", &m) == LPX_ERR_UNSUPPORTED); /* arch "test" */
    CHECK(lpx_model_open("", &m) == LPX_ERR_INVALID_ARG);
    lpx_model_close(NULL);
    TEST_DONE();
}
