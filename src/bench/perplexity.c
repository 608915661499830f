/* Perplexity over windows of a text and KL divergence against saved log-probs: the
 * method and the file format are in perplexity.h. */
#include "bench/perplexity.h"

#include "backend/backend.h"
#include "base/error.h"
#include "base/readall.h"
#include "format/ggml.h"
#include "format/quantize.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CTX 512
#define MAX_TEXT (256u << 20)
#define BLOCK 16 /* KV block size */

typedef struct acc {
    double sum, sum2;
    int64_t n;
} acc;

static void acc_add(acc *a, double v) {
    a->sum += v;
    a->sum2 += v * v;
    a->n++;
}
static double acc_mean(const acc *a) {
    return a->n ? a->sum / (double)a->n : 0;
}
/* Standard error of the mean. */
static double acc_err(const acc *a) {
    if (a->n < 2) return 0;
    double m = acc_mean(a),
           var = (a->sum2 / (double)a->n - m * m) * (double)a->n / (double)(a->n - 1);
    return var > 0 ? sqrt(var / (double)a->n) : 0;
}

typedef struct ppl {
    const ppl_opts *o;
    lpx_model *m;
    lpx_backend *be;
    int32_t vocab, ctx, batch, max_blocks;
    int32_t *ids;
    size_t n_ids;
    int32_t bos; /* -1: windows keep their first token */
    int32_t *tok, *pos, *rows, *table;
    float *logits;    /* [batch][vocab] */
    double *lp;       /* [vocab] this position's log-softmax */
    uint16_t *h, *hb; /* [vocab] it as f16, and the base's */
    FILE *save, *base;
    double *kl; /* [n_scored] */
    acc nll, base_nll, kl_acc;
    int64_t same_top;
} ppl;

static int32_t argmax_h(const uint16_t *h, int32_t n) {
    int32_t best = 0;
    float bv = lpx_f16_to_f32(h[0]);
    for (int32_t i = 1; i < n; i++) {
        float v = lpx_f16_to_f32(h[i]);
        if (v > bv) {
            bv = v;
            best = i;
        }
    }
    return best;
}

/* One scored position: logits x predict `target`. */
static lpx_status score(ppl *p, const float *x, int32_t target) {
    const int32_t V = p->vocab;
    double mx = x[0], sum = 0;
    for (int32_t i = 1; i < V; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int32_t i = 0; i < V; i++)
        sum += exp((double)x[i] - mx);
    const double lse = mx + log(sum);
    for (int32_t i = 0; i < V; i++) {
        double l = (double)x[i] - lse;
        p->lp[i] = l;
        p->h[i] = lpx_f32_to_f16((float)(l < -65504 ? -65504 : l));
    }
    if (!isfinite(p->lp[target]))
        return lpx_errorf(LPX_ERR_INTERNAL, "the logits hold a non-finite value");
    acc_add(&p->nll, -p->lp[target]);
    if (p->save && fwrite(p->h, 2, (size_t)V, p->save) != (size_t)V)
        return lpx_errorf(LPX_ERR_IO, "writing %s: %s", p->o->save_logits, strerror(errno));
    if (!p->base) return LPX_OK;
    if (fread(p->hb, 2, (size_t)V, p->base) != (size_t)V)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: truncated", p->o->kl_base);
    double kl = 0;
    for (int32_t i = 0; i < V; i++) {
        double lb = lpx_f16_to_f32(p->hb[i]), lq = lpx_f16_to_f32(p->h[i]);
        kl += exp(lb) * (lb - lq);
    }
    acc_add(&p->base_nll, -(double)lpx_f16_to_f32(p->hb[target]));
    p->kl[p->kl_acc.n] = kl;
    acc_add(&p->kl_acc, kl);
    p->same_top += argmax_h(p->h, V) == argmax_h(p->hb, V);
    return LPX_OK;
}

/* Window w: its ctx tokens in steps of batch, the second half's logits scored. */
static lpx_status run_window(ppl *p, int64_t w) {
    const int32_t ctx = p->ctx, first = ctx / 2;
    const int32_t *ids = p->ids + w * ctx;
    for (int32_t c0 = 0; c0 < ctx; c0 += p->batch) {
        int32_t n = ctx - c0 < p->batch ? ctx - c0 : p->batch, nl = 0;
        for (int32_t i = 0; i < n; i++) {
            int32_t j = c0 + i;
            p->tok[i] = j == 0 && p->bos >= 0 ? p->bos : ids[j];
            p->pos[i] = j;
            if (j >= first && j < ctx - 1) p->rows[nl++] = i;
        }
        int32_t seq_start[2] = {0, n}, seq_len = c0 + n;
        lpx_batch bt = {n,        p->tok,   p->pos,        1,  seq_start,
                        &seq_len, p->table, p->max_blocks, nl, p->rows};
        LPX_TRY(lpx_backend_run(p->be, &(lpx_step){.batch = &bt, .logits = p->logits}));
        for (int32_t r = 0; r < nl; r++)
            LPX_TRY(score(p, p->logits + (size_t)r * (size_t)p->vocab, ids[c0 + p->rows[r] + 1]));
    }
    return LPX_OK;
}

typedef struct logp_head {
    char magic[8];
    uint32_t version, vocab, ctx, reserved;
    uint64_t n_tokens;
} logp_head;

static lpx_status open_base(ppl *p, uint64_t n_positions) {
    const char *path = p->o->kl_base;
    if (!(p->base = fopen(path, "rb")))
        return lpx_errorf(LPX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    logp_head h;
    if (fread(&h, sizeof h, 1, p->base) != 1 || memcmp(h.magic, LPX_LOGP_MAGIC, 8))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: not an lpx log-prob file (--save-logits)", path);
    if (h.version != LPX_LOGP_VERSION)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: version %u (this lpx reads %d)", path,
                          h.version, LPX_LOGP_VERSION);
    if (h.vocab != (uint32_t)p->vocab)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "%s: a vocabulary of %u tokens, this model has %d: another tokenizer",
                          path, h.vocab, p->vocab);
    if (h.ctx != (uint32_t)p->ctx)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "%s: made with --ctx %u, this run uses %d", path,
                          h.ctx, p->ctx);
    if (h.n_tokens != p->n_ids)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "%s: %llu tokens, this text has %zu: another text or tokenizer", path,
                          (unsigned long long)h.n_tokens, p->n_ids);
    for (size_t i = 0; i < p->n_ids; i++) {
        int32_t id;
        if (fread(&id, 4, 1, p->base) != 1)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: truncated", path);
        if (id != p->ids[i])
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "%s: token %zu is %d, this text's is %d: another text or tokenizer",
                              path, i, id, p->ids[i]);
    }
    uint64_t np;
    if (fread(&np, 8, 1, p->base) != 1 || np != n_positions)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: does not hold %llu positions", path,
                          (unsigned long long)n_positions);
    if (!(p->kl = malloc((size_t)n_positions * sizeof *p->kl)))
        return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    return LPX_OK;
}

static lpx_status open_save(ppl *p, uint64_t n_positions) {
    const char *path = p->o->save_logits;
    if (!(p->save = fopen(path, "wb")))
        return lpx_errorf(LPX_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    logp_head h = {LPX_LOGP_MAGIC, LPX_LOGP_VERSION, (uint32_t)p->vocab, (uint32_t)p->ctx, 0,
                   p->n_ids};
    if (fwrite(&h, sizeof h, 1, p->save) != 1 || fwrite(p->ids, 4, p->n_ids, p->save) != p->n_ids ||
        fwrite(&n_positions, 8, 1, p->save) != 1)
        return lpx_errorf(LPX_ERR_IO, "writing %s: %s", path, strerror(errno));
    return LPX_OK;
}

static lpx_status tokenize(ppl *p) {
    char *text;
    size_t len, n;
    LPX_TRY(lpx_read_file(p->o->text_file, MAX_TEXT, &text, &len));
    const lpx_tokenizer *t = lpx_model_tokenizer(p->m);
    lpx_status s = LPX_OK;
    if (!t) s = lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: the model has no tokenizer", p->o->model);
    size_t cap = len + 16; /* a token covers at least a byte; BOS/EOS */
    if (s == LPX_OK && !(p->ids = malloc(cap * sizeof *p->ids)))
        s = lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    if (s == LPX_OK) s = lpx_tokenize(t, text, len, true, false, p->ids, cap, &n);
    if (s == LPX_OK && n > cap) s = lpx_errorf(LPX_ERR_INTERNAL, "tokenize: %zu ids", n);
    free(text);
    LPX_TRY(s);
    p->n_ids = n;
    int32_t bos = lpx_tokenizer_bos(t);
    p->bos = n && bos >= 0 && p->ids[0] == bos ? bos : -1;
    return LPX_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static lpx_status run(ppl *p, ppl_result *r) {
    const ppl_opts *o = p->o;
    LPX_TRY(lpx_model_open(o->model, &p->m));
    p->vocab = p->m->cfg.vocab_size;
    p->ctx = o->ctx > 0 ? o->ctx : DEFAULT_CTX;
    p->batch = o->batch > 0 && o->batch < p->ctx ? o->batch : p->ctx;
    if (p->ctx < 4 || p->ctx > p->m->cfg.max_position_embeddings)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "--ctx %d: expected 4 to the model's %d", p->ctx,
                          p->m->cfg.max_position_embeddings);
    LPX_TRY(tokenize(p));
    r->n_tokens = (int64_t)p->n_ids;
    r->n_windows = (int64_t)(p->n_ids / (size_t)p->ctx);
    if (r->n_windows < 1)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "%s: %zu tokens, fewer than one window (--ctx %d)",
                          o->text_file, p->n_ids, p->ctx);
    const uint64_t per = (uint64_t)(p->ctx - 1 - p->ctx / 2), n_pos = per * (uint64_t)r->n_windows;
    if (o->kl_base) LPX_TRY(open_base(p, n_pos));
    if (o->save_logits) LPX_TRY(open_save(p, n_pos));

    const lpx_backend_ops *ops;
    int ordinal;
    LPX_TRY(lpx_backend_select(o->device, &ops, &ordinal));
    p->max_blocks = (p->ctx + BLOCK - 1) / BLOCK;
    lpx_backend_opts bo = {.device = ordinal,
                           .n_threads = o->n_threads,
                           .block_size = BLOCK,
                           .n_blocks = p->max_blocks,
                           .max_batch_tokens = p->batch,
                           .max_seqs = 1,
                           .tune = o->tune,
                           .trace = o->trace};
    p->tok = malloc((size_t)p->batch * sizeof(int32_t));
    p->pos = malloc((size_t)p->batch * sizeof(int32_t));
    p->rows = malloc((size_t)p->batch * sizeof(int32_t));
    p->table = malloc((size_t)p->max_blocks * sizeof(int32_t));
    p->logits = malloc((size_t)p->batch * (size_t)p->vocab * sizeof(float));
    p->lp = malloc((size_t)p->vocab * sizeof(double));
    p->h = malloc((size_t)p->vocab * 2);
    p->hb = malloc((size_t)p->vocab * 2);
    if (!p->tok || !p->pos || !p->rows || !p->table || !p->logits || !p->lp || !p->h || !p->hb)
        return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < p->max_blocks; i++)
        p->table[i] = i;
    LPX_TRY(ops->create(p->m, &bo, &p->be));
    for (int64_t w = 0; w < r->n_windows; w++) {
        LPX_TRY(run_window(p, w));
        if (o->progress)
            o->progress(o->ctx_arg, w + 1, r->n_windows, exp(acc_mean(&p->nll)),
                        exp(acc_mean(&p->nll)) * acc_err(&p->nll));
    }
    r->n_scored = p->nll.n;
    r->ppl = exp(acc_mean(&p->nll));
    r->ppl_err = r->ppl * acc_err(&p->nll);
    if (p->save && fclose(p->save) != 0) {
        p->save = NULL;
        return lpx_errorf(LPX_ERR_IO, "writing %s: %s", o->save_logits, strerror(errno));
    }
    p->save = NULL;
    if (p->base) {
        r->have_kl = true;
        r->base_ppl = exp(acc_mean(&p->base_nll));
        r->base_ppl_err = r->base_ppl * acc_err(&p->base_nll);
        r->kl_mean = acc_mean(&p->kl_acc);
        r->kl_err = acc_err(&p->kl_acc);
        r->same_top = p->same_top;
        int64_t n = p->kl_acc.n;
        double *k = p->kl;
        qsort(k, (size_t)n, sizeof *k, cmp_double);
        int64_t at = (int64_t)ceil(0.99 * (double)n) - 1;
        r->kl_p99 = k[at < 0 ? 0 : at];
        r->kl_max = k[n - 1];
    }
    return LPX_OK;
}

lpx_status ppl_run(const ppl_opts *o, ppl_result *r) {
    memset(r, 0, sizeof *r);
    ppl p = {.o = o, .bos = -1};
    lpx_status s = run(&p, r);
    if (p.save) {
        fclose(p.save);
        remove(o->save_logits);
    }
    if (p.base) fclose(p.base);
    if (p.be) p.be->ops->destroy(p.be);
    lpx_model_close(p.m);
    free(p.ids);
    free(p.tok);
    free(p.pos);
    free(p.rows);
    free(p.table);
    free(p.logits);
    free(p.lp);
    free(p.h);
    free(p.hb);
    free(p.kl);
    return s;
}
