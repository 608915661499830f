/* Quantized Hugging Face checkpoints: config.json's quantization_config read, every
 * quantized linear weight's parts checked against its format (src/format/hf_quant.h)
 * and converted at load to the checkpoint's float dtype, so that every backend runs
 * it as a plain weight. What is accepted and refused: docs/models.md. */
#include "model/loader.h"

#include "base/checked.h"
#include "base/error.h"
#include "base/threadpool.h"
#include "format/hf_quant.h"
#include "format/quantize.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define QC "config.json: quantization_config"
#define SUPPORTED                                                                                  \
    "fp8 (e4m3, per-tensor, per-channel or block scales), fbgemm_fp8, compressed-tensors "         \
    "(float-quantized 8-bit weights), awq (4-bit GEMM, group 32/64/128) and gptq (4-bit, group "   \
    "32/64/128, desc_act false)"

typedef enum qkind { Q_FP8, Q_INT4 } qkind;

typedef struct qcfg {
    qkind kind;
    char method[24]; /* quant_method as given */
    int64_t bm, bn;  /* fp8 weight_block_size; 0: none given */
    bool channel;    /* compressed-tensors / fbgemm: scales per output channel */
    lpx_hfq_int4_layout layout;
    int64_t group;
    int zero_offset;
    bool sym; /* gptq sym: every zero must be 8 */
    lpx_dtype target;
    bool *used;           /* [n_tensors]: parts consumed by a conversion */
    lpx_threadpool *pool; /* the conversion's threads, one per core */
} qcfg;

static const cJSON *item(const cJSON *o, const char *key) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNull(v) ? NULL : v;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = item(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* An integer field; absent gives dflt. */
static lpx_status int_of(const cJSON *o, const char *where, const char *key, int64_t dflt,
                         int64_t *out) {
    const cJSON *v = item(o, key);
    if (!v) {
        *out = dflt;
        return LPX_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 1e9)
        return lpx_errorf(LPX_ERR_FORMAT, "%s.%s must be an integer", where, key);
    *out = (int64_t)v->valuedouble;
    return LPX_OK;
}

static lpx_status group_of(const cJSON *qc, const char *key, int64_t *g) {
    LPX_TRY(int_of(qc, QC, key, 128, g));
    if (*g != 32 && *g != 64 && *g != 128)
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "%s.%s %lld is not supported (32, 64 or 128; -1, one group a row, "
                          "is not)",
                          QC, key, (long long)*g);
    return LPX_OK;
}

static lpx_status block_of(const cJSON *o, const char *where, const char *key, qcfg *q) {
    const cJSON *b = item(o, key);
    if (!b) return LPX_OK;
    int64_t d[2];
    if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != 2)
        return lpx_errorf(LPX_ERR_FORMAT, "%s.%s must be [rows, cols]", where, key);
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetArrayItem(b, i);
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1 << 20 ||
            v->valuedouble != floor(v->valuedouble))
            return lpx_errorf(LPX_ERR_FORMAT, "%s.%s must be two positive integers", where, key);
        d[i] = (int64_t)v->valuedouble;
    }
    q->bm = d[0];
    q->bn = d[1];
    return LPX_OK;
}

static lpx_status parse_fp8(const cJSON *qc, qcfg *q) {
    const char *fmt = str_of(qc, "fmt");
    if (fmt && strcmp(fmt, "e4m3"))
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s.fmt %s is not supported (e4m3)", QC, fmt);
    return block_of(qc, QC, "weight_block_size", q);
}

/* compressed-tensors: one config group of 8-bit float weights; activations (dynamic or
 * static) are not quantized by lpx, so their settings and input_scale are ignored. */
static lpx_status parse_compressed(const cJSON *qc, qcfg *q) {
    const char *fmt = str_of(qc, "format");
    if (fmt && strcmp(fmt, "float-quantized") && strcmp(fmt, "naive-quantized"))
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "%s.format %s is not supported (compressed-tensors: float-quantized)", QC,
                          fmt);
    const cJSON *groups = item(qc, "config_groups");
    if (!cJSON_IsObject(groups) || cJSON_GetArraySize(groups) != 1)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s.config_groups: exactly one group is supported",
                          QC);
    const cJSON *w = item(groups->child, "weights");
    char where[128];
    snprintf(where, sizeof where, "%s.config_groups.%s.weights", QC, groups->child->string);
    const char *type = str_of(w, "type"), *strategy = str_of(w, "strategy");
    int64_t bits;
    LPX_TRY(int_of(w, where, "num_bits", 0, &bits));
    if (!cJSON_IsObject(w) || bits != 8 || !type || strcmp(type, "float"))
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "%s: only 8-bit float weights are supported (num_bits 8, type float)",
                          where);
    if (!strategy || !strcmp(strategy, "tensor")) return LPX_OK;
    if (!strcmp(strategy, "channel")) {
        q->channel = true;
        return LPX_OK;
    }
    if (!strcmp(strategy, "block")) {
        LPX_TRY(block_of(w, where, "block_structure", q));
        if (q->bm) return LPX_OK;
    }
    return lpx_errorf(LPX_ERR_UNSUPPORTED,
                      "%s.strategy %s is not supported (tensor, channel, block with "
                      "block_structure)",
                      where, strategy);
}

static lpx_status parse_int4(const cJSON *qc, const char *method, qcfg *q) {
    int64_t bits;
    q->kind = Q_INT4;
    LPX_TRY(int_of(qc, QC, item(qc, "w_bit") ? "w_bit" : "bits", 4, &bits));
    if (bits != 4)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: %s with %lld bits is not supported (4)", QC,
                          method, (long long)bits);
    if (!strcmp(method, "awq")) {
        q->layout = LPX_HFQ_AWQ;
        LPX_TRY(group_of(qc, item(qc, "q_group_size") ? "q_group_size" : "group_size", &q->group));
        const char *v = str_of(qc, "version");
        if (v && strcasecmp(v, "gemm"))
            return lpx_errorf(LPX_ERR_UNSUPPORTED,
                              "%s.version %s is not supported (awq: gemm packing only)", QC, v);
        const cJSON *zp = item(qc, "zero_point");
        if (zp && !cJSON_IsTrue(zp))
            return lpx_errorf(LPX_ERR_UNSUPPORTED,
                              "%s.zero_point false is not supported (awq: zero points)", QC);
        return LPX_OK;
    }
    q->layout = LPX_HFQ_GPTQ;
    LPX_TRY(group_of(qc, "group_size", &q->group));
    if (cJSON_IsTrue(item(qc, "desc_act")))
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "%s.desc_act true is not supported (gptq: desc_act false only)", QC);
    const char *cf = str_of(qc, "checkpoint_format");
    if (!cf || !strcmp(cf, "gptq"))
        q->zero_offset = 1;
    else if (strcmp(cf, "gptq_v2"))
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "%s.checkpoint_format %s is not supported (gptq, gptq_v2)", QC, cf);
    q->sym = !item(qc, "sym") || cJSON_IsTrue(item(qc, "sym"));
    return LPX_OK;
}

static lpx_status parse_qc(const cJSON *qc, const char *torch_dtype, qcfg *q) {
    if (!cJSON_IsObject(qc)) return lpx_errorf(LPX_ERR_FORMAT, "%s is not an object", QC);
    const char *method = str_of(qc, "quant_method");
    if (!method) return lpx_errorf(LPX_ERR_FORMAT, "%s.quant_method missing", QC);
    snprintf(q->method, sizeof q->method, "%s", method);
    lpx_status s;
    if (!strcmp(method, "fp8"))
        s = parse_fp8(qc, q);
    else if (!strcmp(method, "fbgemm_fp8"))
        s = (q->channel = true, LPX_OK);
    else if (!strcmp(method, "compressed-tensors"))
        s = parse_compressed(qc, q);
    else if (!strcmp(method, "awq") || !strcmp(method, "gptq"))
        s = parse_int4(qc, method, q);
    else
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s.quant_method %.40s is not supported (%s)", QC,
                          method, SUPPORTED);
    LPX_TRY(s);
    /* The dtype the checkpoint computes in: bf16 for fp8 releases, f16 for int4. */
    q->target = q->kind == Q_FP8 ? LPX_DT_BF16 : LPX_DT_F16;
    if (torch_dtype && !strcmp(torch_dtype, "bfloat16")) q->target = LPX_DT_BF16;
    if (torch_dtype && !strcmp(torch_dtype, "float16")) q->target = LPX_DT_F16;
    if (torch_dtype && !strcmp(torch_dtype, "float32")) q->target = LPX_DT_F32;
    return LPX_OK;
}

/* ---- tensors --------------------------------------------------------------------- */

static const char *raw_name(const lpx_tensor *t) {
    return t->raw == LPX_RAW_F8_E4M3 ? "F8_E4M3"
           : t->raw == LPX_RAW_I32   ? "I32"
                                     : lpx_dtype_name(t->type);
}

/* base + suffix, when m has it (marked used). */
static lpx_tensor *part(lpx_model *m, qcfg *q, const char *base, const char *suffix) {
    char name[160];
    snprintf(name, sizeof name, "%s%s", base, suffix);
    for (int64_t i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) {
            q->used[i] = true;
            return &m->tensors[i];
        }
    return NULL;
}

static int64_t numel(const lpx_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++)
        n *= t->shape[d]; /* fits: the parser bounded the byte size */
    return n;
}

static void fmt_shape(const lpx_tensor *t, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int d = 0; d < t->n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
}

/* t must be (rows, cols) of I32 (raw) or F16 (scales). */
static lpx_status want_shape(const lpx_model *m, const qcfg *q, const lpx_tensor *t,
                             lpx_raw_type raw, int64_t rows, int64_t cols, const char *what) {
    if (t->raw == raw && (raw || t->type == LPX_DT_F16) && t->n_dims == 2 && t->shape[0] == rows &&
        t->shape[1] == cols)
        return LPX_OK;
    char found[64];
    fmt_shape(t, found, sizeof found);
    return lpx_errorf(LPX_ERR_FORMAT,
                      "%s: tensor %s: expected %s [%lld, %lld] (%s of a %s checkpoint, group "
                      "%lld), found %s [%s]",
                      m->path, t->name, raw ? "I32" : "F16", (long long)rows, (long long)cols, what,
                      q->method, (long long)q->group, raw_name(t), found);
}

/* A tensor's values as floats (scales: F32, F16 or BF16), each finite. */
static lpx_status finite_floats(const lpx_model *m, const lpx_tensor *t, float **out) {
    int64_t n = numel(t);
    *out = NULL;
    if (t->raw)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: scales of dtype %s (expected F32, F16 or "
                          "BF16)",
                          m->path, t->name, raw_name(t));
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", m->path);
    lpx_dequantize_row(t->type, t->data, v, n);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            bool nan = isnan(v[i]);
            free(v);
            return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: scale %lld is %s", m->path, t->name,
                              (long long)i, nan ? "NaN" : "infinite");
        }
    *out = v;
    return LPX_OK;
}

/* Tiles of up to LPX_HFQ_TILE output rows decoded to floats: dst[n][in]. */
typedef void (*tile_fn)(const void *ctx, int64_t o0, int64_t n, float *dst);

typedef struct conv_job {
    tile_fn tile;
    const void *ctx;
    lpx_dtype target;
    int64_t out, in;
    size_t row_bytes;
    uint8_t *dst;
    float *scratch;  /* [threads][LPX_HFQ_TILE * in] */
    int64_t *bad_at; /* [threads]: the first row * in + col that failed, else -1 */
    float *bad_v;    /* [threads] */
} conv_job;

static void conv_tiles(void *vctx, int64_t begin, int64_t end, int thread) {
    conv_job *j = vctx;
    float *x = j->scratch + (size_t)thread * LPX_HFQ_TILE * (size_t)j->in;
    for (int64_t t = begin; t < end; t++) {
        int64_t o0 = t * LPX_HFQ_TILE, n = j->out - o0 < LPX_HFQ_TILE ? j->out - o0 : LPX_HFQ_TILE;
        j->tile(j->ctx, o0, n, x);
        for (int64_t k = 0; k < n; k++) {
            int64_t bad;
            uint8_t *row = j->dst + (size_t)(o0 + k) * j->row_bytes;
            if (lpx_quantize_row(j->target, x + k * j->in, row, j->in, &bad)) continue;
            int64_t at = (o0 + k) * j->in + bad;
            if (j->bad_at[thread] < 0 || at < j->bad_at[thread]) {
                j->bad_at[thread] = at;
                j->bad_v[thread] = x[k * j->in + bad];
            }
        }
    }
}

/* The converted weight: tiles from tile() written as q->target (on the pool's
 * threads) into a buffer that replaces t's data; t becomes a plain (out, in) weight
 * named base.weight. The first value that does not fit, in row-major order, is the
 * error. */
static lpx_status convert(lpx_model *m, const qcfg *q, lpx_tensor *t, const char *base, int64_t out,
                          int64_t in, tile_fn tile, const void *ctx) {
    size_t rb, total;
    if (!lpx_dtype_row_bytes(q->target, in, &rb) || !lpx_mul_size(rb, (size_t)out, &total))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: size overflows", m->path, t->name);
    size_t nt = (size_t)lpx_threadpool_size(q->pool);
    conv_job j = {.tile = tile,
                  .ctx = ctx,
                  .target = q->target,
                  .out = out,
                  .in = in,
                  .row_bytes = rb,
                  .dst = lpx_store_alloc(m->impl, total),
                  .scratch = malloc(nt * LPX_HFQ_TILE * (size_t)in * sizeof(float)),
                  .bad_at = malloc(nt * sizeof(int64_t)),
                  .bad_v = malloc(nt * sizeof(float))};
    lpx_status s = LPX_OK;
    if (!j.dst || !j.scratch || !j.bad_at || !j.bad_v)
        s = lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", m->path);
    for (size_t i = 0; s == LPX_OK && i < nt; i++)
        j.bad_at[i] = -1;
    if (s == LPX_OK)
        lpx_parallel_for(q->pool, (out + LPX_HFQ_TILE - 1) / LPX_HFQ_TILE, 1, conv_tiles, &j);
    size_t worst = nt;
    for (size_t i = 0; s == LPX_OK && i < nt; i++)
        if (j.bad_at[i] >= 0 && (worst == nt || j.bad_at[i] < j.bad_at[worst])) worst = i;
    if (s == LPX_OK && worst < nt) {
        float v = j.bad_v[worst];
        s = lpx_errorf(
            LPX_ERR_FORMAT, "%s: tensor %s: weight [%lld, %lld] dequantizes to %g, which %s",
            m->path, t->name, (long long)(j.bad_at[worst] / in), (long long)(j.bad_at[worst] % in),
            (double)v, isfinite(v) ? "is beyond F16's range" : "is not finite");
    }
    free(j.scratch);
    free(j.bad_at);
    free(j.bad_v);
    if (s != LPX_OK) return s;
    if ((size_t)snprintf(t->name, sizeof t->name, "%s.weight", base) >= sizeof t->name)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor name %s.weight is too long", m->path, base);
    t->raw = LPX_RAW_NONE;
    t->type = q->target;
    t->n_dims = 2;
    t->shape[0] = out;
    t->shape[1] = in;
    t->data = j.dst;
    t->nbytes = total;
    m->n_converted++;
    return LPX_OK;
}

typedef struct fp8_ctx {
    const uint8_t *q;
    const float *scale;
    int64_t in, bm, bn, scale_cols;
} fp8_ctx;

static void fp8_tile(const void *ctx, int64_t o0, int64_t n, float *dst) {
    const fp8_ctx *c = ctx;
    for (int64_t k = 0; k < n; k++)
        lpx_hfq_fp8_row(c->q, c->scale, c->in, o0 + k, c->bm, c->bn, c->scale_cols,
                        dst + k * c->in);
}

/* An fp8 weight base.weight (t) and its scale: weight_scale_inv (blocks of the config's
 * weight_block_size, or one for the tensor) or weight_scale (one value, or one a row). */
static lpx_status fp8_weight(lpx_model *m, qcfg *q, lpx_tensor *t, const char *base) {
    int64_t out = lpx_tensor_rows(t), in = lpx_tensor_cols(t);
    if (t->n_dims != 2)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: an fp8 weight of %d dims (expected 2)",
                          m->path, t->name, t->n_dims);
    lpx_tensor *inv = part(m, q, base, ".weight_scale_inv"),
               *sc = part(m, q, base, ".weight_scale");
    part(m, q, base, ".input_scale"); /* static activation scales: lpx keeps activations */
    if (!!inv == !!sc)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: an fp8 weight needs one of %s.weight_scale_inv and "
                          "%s.weight_scale (%s)",
                          m->path, t->name, base, base, inv ? "found both" : "found neither");
    lpx_tensor *s = inv ? inv : sc;
    fp8_ctx c = {.q = t->data, .in = in, .bm = out, .bn = in};
    if (q->bm) {
        c.bm = q->bm;
        c.bn = q->bn;
    } else if (q->channel || (sc && numel(sc) == out && numel(sc) > 1)) {
        c.bm = 1;
    }
    int64_t sr = (out + c.bm - 1) / c.bm, scols = (in + c.bn - 1) / c.bn;
    /* per tensor: any shape of one value; per channel: (out) or (out, 1) */
    bool shape_ok =
        numel(s) == sr * scols && (sr * scols == 1 || (s->n_dims == 2 && s->shape[0] == sr) ||
                                   (c.bm == 1 && c.bn == in && s->n_dims == 1));
    if (!shape_ok) {
        char found[64];
        fmt_shape(s, found, sizeof found);
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: expected %lld x %lld scales for a [%lld, %lld] weight in "
                          "blocks of %lld x %lld, found [%s]",
                          m->path, s->name, (long long)sr, (long long)scols, (long long)out,
                          (long long)in, (long long)c.bm, (long long)c.bn, found);
    }
    float *scale;
    LPX_TRY(finite_floats(m, s, &scale));
    c.scale = scale;
    c.scale_cols = scols;
    lpx_status st = convert(m, q, t, base, out, in, fp8_tile, &c);
    free(scale);
    return st;
}

static void int4_tile(const void *ctx, int64_t o0, int64_t n, float *dst) {
    lpx_hfq_int4_rows(ctx, o0, n, dst);
}

/* AWQ / GPTQ: base.qweight (t), base.qzeros, base.scales and (GPTQ) base.g_idx. */
static lpx_status int4_weight(lpx_model *m, qcfg *q, lpx_tensor *t, const char *base) {
    bool awq = q->layout == LPX_HFQ_AWQ;
    if (t->raw != LPX_RAW_I32 || t->n_dims != 2)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: expected a 2-dim I32 qweight, found %s",
                          m->path, t->name, raw_name(t));
    int64_t in = awq ? t->shape[0] : t->shape[0] * 8, out = awq ? t->shape[1] * 8 : t->shape[1];
    lpx_tensor *qz = part(m, q, base, ".qzeros"), *sc = part(m, q, base, ".scales");
    lpx_tensor *gi = awq ? NULL : part(m, q, base, ".g_idx");
    if (!qz || !sc)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: missing %s.%s (a %s checkpoint)", m->path,
                          t->name, base, qz ? "scales" : "qzeros", q->method);
    if (in % q->group)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: group size %lld does not divide in_features %lld",
                          m->path, t->name, (long long)q->group, (long long)in);
    if (out % 8)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: out_features %lld is not a multiple of 8",
                          m->path, sc->name, (long long)out);
    int64_t ng = in / q->group;
    LPX_TRY(want_shape(m, q, qz, LPX_RAW_I32, ng, out / 8, "in_features / group, out / 8"));
    LPX_TRY(want_shape(m, q, sc, LPX_RAW_NONE, ng, out, "in_features / group, out_features"));
    float *scale;
    LPX_TRY(finite_floats(m, sc, &scale)); /* checked here; read as f16 by the row decoder */
    free(scale);
    lpx_hfq_int4 w = {.layout = q->layout,
                      .in = in,
                      .out = out,
                      .group = q->group,
                      .qweight = t->data,
                      .qzeros = qz->data,
                      .scales = sc->data,
                      .zero_offset = q->zero_offset};
    if (gi) { /* desc_act false: the trivial order, i / group */
        if (gi->raw != LPX_RAW_I32 || numel(gi) != in)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: expected %lld I32 values", m->path,
                              gi->name, (long long)in);
        for (int64_t i = 0; i < in; i++) {
            int32_t v;
            memcpy(&v, (const uint8_t *)gi->data + 4 * i, 4);
            if (v != i / q->group)
                return lpx_errorf(LPX_ERR_FORMAT,
                                  "%s: tensor %s: g_idx[%lld] is %d, not %lld: an act-order "
                                  "(desc_act) checkpoint, which is not supported",
                                  m->path, gi->name, (long long)i, v, (long long)(i / q->group));
        }
    }
    for (int64_t g = 0; q->sym && g < ng; g++)
        for (int64_t o = 0; o < out; o++)
            if (lpx_hfq_int4_zero(&w, g, o) + q->zero_offset != 8)
                return lpx_errorf(
                    LPX_ERR_FORMAT,
                    "%s: tensor %s: zero point %d at [%lld, %lld] in a sym checkpoint "
                    "(expected 8: is checkpoint_format right?)",
                    m->path, qz->name, lpx_hfq_int4_zero(&w, g, o) + q->zero_offset, (long long)g,
                    (long long)o);
    return convert(m, q, t, base, out, in, int4_tile, &w);
}

static bool ends_with(const char *s, const char *suffix, size_t *base_len) {
    size_t n = strlen(s), k = strlen(suffix);
    *base_len = n - k;
    return n > k && !strcmp(s + n - k, suffix);
}

static lpx_status apply(lpx_model *m, qcfg *q) {
    const char *primary = q->kind == Q_FP8 ? ".weight" : ".qweight";
    int64_t n = m->n_tensors;
    for (int64_t i = 0; i < n; i++) {
        lpx_tensor *t = &m->tensors[i];
        size_t bl;
        if (q->used[i] || !ends_with(t->name, primary, &bl)) continue;
        if (q->kind == Q_FP8 && t->raw != LPX_RAW_F8_E4M3) continue; /* norms, embeddings */
        char base[160];
        snprintf(base, sizeof base, "%.*s", (int)bl, t->name);
        q->used[i] = true;
        LPX_TRY(q->kind == Q_FP8 ? fp8_weight(m, q, t, base) : int4_weight(m, q, t, base));
        q->used[i] = false; /* the converted weight stays */
    }
    if (!m->n_converted)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %s.quant_method is %s but no tensor is %s", m->path,
                          QC, q->method, q->kind == Q_FP8 ? "an F8_E4M3 .weight" : "a .qweight");
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const lpx_tensor *t = &m->tensors[i];
        if (q->used[i]) continue;
        if (t->raw)
            return lpx_errorf(LPX_ERR_FORMAT,
                              "%s: tensor %s: dtype %s is not part of a %s weight that lpx reads",
                              m->path, t->name, raw_name(t), q->method);
        m->tensors[k++] = *t;
    }
    m->n_tensors = k;
    return LPX_OK;
}

lpx_status lpx_hf_quant_apply(lpx_model *m, const cJSON *qc, const char *torch_dtype) {
    qcfg q = {.kind = Q_FP8};
    LPX_TRY(parse_qc(qc, torch_dtype, &q));
    if (!(q.used = calloc((size_t)(m->n_tensors ? m->n_tensors : 1), sizeof *q.used)))
        return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", m->path);
    lpx_status s = lpx_threadpool_create(0, &q.pool);
    if (s == LPX_OK) s = apply(m, &q);
    lpx_threadpool_destroy(q.pool);
    free(q.used);
    if (s == LPX_OK) {
        char what[48];
        if (q.kind == Q_INT4)
            snprintf(what, sizeof what, "int4, group %lld", (long long)q.group);
        else if (q.bm)
            snprintf(what, sizeof what, "fp8 e4m3, %lldx%lld blocks", (long long)q.bm,
                     (long long)q.bn);
        else
            snprintf(what, sizeof what, "fp8 e4m3");
        snprintf(m->quant, sizeof m->quant, "%s (%s) -> %s", q.method, what,
                 lpx_dtype_name(q.target));
    }
    return s;
}
