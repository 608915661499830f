/* safetensors reader: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data area that the offsets index. Every entry is checked against
 * the data area before a tensor is returned. */
#include "format/safetensors.h"

#include "base/checked.h"
#include "base/error.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The safetensors library refuses headers above 100 MB; so do we. */
#define MAX_HEADER 100000000ull
/* Integers above 2^53 do not survive cJSON's doubles. */
#define MAX_JSON_INT 9007199254740992.0

static lpx_status json_uint(const cJSON *v, const char *name, const char *tensor, const char *what,
                            int64_t *out) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > MAX_JSON_INT ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: %s is not a non-negative integer", name,
                          tensor, what);
    *out = (int64_t)v->valuedouble;
    return LPX_OK;
}

/* The lpx_dtype of a safetensors dtype name, or for the parts of quantized checkpoints
 * F32 with *raw set; -1 (with *why) for anything else. */
static int dtype_from_name(const char *s, lpx_raw_type *raw, lpx_status *why) {
    static const char *kept[] = {
        [LPX_DT_F32] = "F32", [LPX_DT_F16] = "F16", [LPX_DT_BF16] = "BF16"};
    static const char *known[] = {"F64", "I64",  "I16",     "I8",      "U8", "U16",     "U32",
                                  "U64", "BOOL", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2"};
    *raw = LPX_RAW_NONE;
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, kept[i])) return i;
    *raw = !strcmp(s, "F8_E4M3") ? LPX_RAW_F8_E4M3 : !strcmp(s, "I32") ? LPX_RAW_I32 : LPX_RAW_NONE;
    if (*raw) return LPX_DT_F32;
    *why = LPX_ERR_FORMAT;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(s, known[i])) *why = LPX_ERR_UNSUPPORTED;
    return -1;
}

static lpx_status parse_entry(const cJSON *e, const char *name, const unsigned char *base,
                              size_t data_size, lpx_tensor *t) {
    const char *tn = e->string;
    if (strlen(tn) >= sizeof t->name)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor name of %zu bytes is too long (at most %zu)",
                          name, strlen(tn), sizeof t->name - 1);
    memcpy(t->name, tn, strlen(tn) + 1);
    if (!cJSON_IsObject(e))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: entry is not a JSON object", name, tn);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: dtype missing", name, tn);
    lpx_status why = LPX_OK;
    int type = dtype_from_name(dt->valuestring, &t->raw, &why);
    if (type < 0)
        return lpx_errorf(why,
                          "%s: tensor %s: %s dtype %s (expected F32, F16 or BF16; F8_E4M3 and "
                          "I32 in quantized checkpoints)",
                          name, tn, why == LPX_ERR_UNSUPPORTED ? "unsupported" : "unknown",
                          dt->valuestring);
    t->type = (lpx_dtype)type;
    if (!cJSON_IsArray(shape))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: shape missing", name, tn);
    int nd = cJSON_GetArraySize(shape);
    if (nd > LPX_MAX_DIMS)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: %d dims (expected 0 to %d)", name, tn, nd,
                          LPX_MAX_DIMS);
    /* A scalar (shape [], one element: quantized checkpoints' per-tensor scales) is held
     * as shape [1], so that every lpx_tensor has a row and column count. */
    t->n_dims = nd ? nd : 1;
    t->shape[0] = 1;
    size_t bytes = t->raw == LPX_RAW_F8_E4M3 ? 1
                   : t->raw == LPX_RAW_I32   ? 4
                                             : (size_t)lpx_dtype_block_bytes(t->type);
    for (int d = 0; d < nd; d++) {
        LPX_TRY(json_uint(cJSON_GetArrayItem(shape, d), name, tn, "a dimension", &t->shape[d]));
        if (t->shape[d] < 1)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: dimension %d is 0", name, tn, d);
        if (!lpx_mul_size(bytes, (size_t)t->shape[d], &bytes))
            return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: byte size overflows", name, tn);
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: data_offsets is not [begin, end]", name,
                          tn);
    int64_t begin = 0, end = 0;
    LPX_TRY(json_uint(cJSON_GetArrayItem(offs, 0), name, tn, "data_offsets[0]", &begin));
    LPX_TRY(json_uint(cJSON_GetArrayItem(offs, 1), name, tn, "data_offsets[1]", &end));
    if (begin > end)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: data_offsets inverted (%lld > %lld)",
                          name, tn, (long long)begin, (long long)end);
    if ((uint64_t)end > data_size)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: data_offsets end %lld is past the end of the data area "
                          "(%zu bytes)",
                          name, tn, (long long)end, data_size);
    if ((uint64_t)(end - begin) != bytes)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: size mismatch: data_offsets span %lld bytes, shape and "
                          "dtype need %zu",
                          name, tn, (long long)(end - begin), bytes);
    t->data = base + begin;
    t->nbytes = bytes;
    return LPX_OK;
}

static int cmp_begin(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const lpx_tensor *)a)->data;
    uintptr_t y = (uintptr_t)((const lpx_tensor *)b)->data;
    return x < y ? -1 : x > y;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const lpx_tensor *)a)->name, ((const lpx_tensor *)b)->name);
}

static lpx_status check_entries(lpx_tensor *ts, int64_t n, const char *name) {
    qsort(ts, (size_t)n, sizeof *ts, cmp_name);
    for (int64_t i = 1; i < n; i++)
        if (!strcmp(ts[i - 1].name, ts[i].name))
            return lpx_errorf(LPX_ERR_FORMAT, "%s: duplicate tensor name %s", name, ts[i].name);
    qsort(ts, (size_t)n, sizeof *ts, cmp_begin);
    for (int64_t i = 1; i < n; i++)
        if ((uintptr_t)ts[i - 1].data + ts[i - 1].nbytes > (uintptr_t)ts[i].data)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: tensors %s and %s overlap", name, ts[i - 1].name,
                              ts[i].name);
    return LPX_OK;
}

lpx_status lpx_safetensors_parse(const void *data, size_t size, const char *name, lpx_tensor **out,
                                 int64_t *n_out) {
    *out = NULL;
    *n_out = 0;
    const unsigned char *p = data;
    if (size < 8)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: truncated: %zu bytes, no header length", name, size);
    uint64_t hlen;
    memcpy(&hlen, p, 8);
    if (hlen > MAX_HEADER)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: header length %llu exceeds the limit %llu", name,
                          (unsigned long long)hlen, MAX_HEADER);
    if (hlen > size - 8)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: truncated: header length %llu is larger than the file (%zu bytes)",
                          name, (unsigned long long)hlen, size);
    cJSON *root = cJSON_ParseWithLength((const char *)p + 8, (size_t)hlen);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lpx_errorf(LPX_ERR_FORMAT, "%s: invalid JSON header", name);
    }
    size_t data_size = size - 8 - (size_t)hlen;
    int64_t n = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        n += strcmp(e->string, "__metadata__") != 0;
    lpx_tensor *ts = calloc((size_t)(n ? n : 1), sizeof *ts);
    lpx_status s = ts ? LPX_OK : lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", name);
    int64_t i = 0;
    for (const cJSON *e = root->child; s == LPX_OK && e; e = e->next)
        if (strcmp(e->string, "__metadata__"))
            s = parse_entry(e, name, p + 8 + hlen, data_size, &ts[i++]);
    cJSON_Delete(root);
    if (s == LPX_OK) s = check_entries(ts, n, name);
    if (s != LPX_OK) {
        free(ts);
        return s;
    }
    *out = ts;
    *n_out = n;
    return LPX_OK;
}
