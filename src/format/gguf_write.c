/* GGUF v3 writer for lpx slice. Layout: magic, version, tensor count, kv count,
 * key/values, tensor infos (dims innermost first), padding to general.alignment,
 * tensor data with each tensor's offset aligned. */
#include "format/gguf_write.h"

#include "base/checked.h"
#include "base/error.h"
#include "format/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct writer {
    FILE *f;
    const char *path;
    bool failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (!w->failed && n && fwrite(p, 1, n, w->f) != n) w->failed = true;
}
static void put_u32(writer *w, uint32_t v) { put(w, &v, 4); } /* x86/arm little-endian */
static void put_u64(writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(writer *w, const char *s, size_t n) {
    put_u64(w, n);
    put(w, s, n);
}

/* Writes one scalar of the given type from an integer or float reading. */
static lpx_status put_scalar(writer *w, lpx_gguf_type t, int64_t iv, double fv, const char *key) {
    switch (t) {
    case LPX_GGUF_U8: case LPX_GGUF_I8: case LPX_GGUF_BOOL: { uint8_t v = (uint8_t)iv; put(w, &v, 1); break; }
    case LPX_GGUF_U16: case LPX_GGUF_I16: { uint16_t v = (uint16_t)iv; put(w, &v, 2); break; }
    case LPX_GGUF_U32: case LPX_GGUF_I32: put_u32(w, (uint32_t)iv); break;
    case LPX_GGUF_U64: case LPX_GGUF_I64: put_u64(w, (uint64_t)iv); break;
    case LPX_GGUF_F32: { float v = (float)fv; put(w, &v, 4); break; }
    case LPX_GGUF_F64: put(w, &fv, 8); break;
    default:
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "key %s: value type %d not supported", key, t);
    }
    return LPX_OK;
}

static bool is_float(lpx_gguf_type t) { return t == LPX_GGUF_F32 || t == LPX_GGUF_F64; }

static lpx_status copy_kv(writer *w, const lpx_gguf *g, int64_t i, const char *count_key,
                          int n_layers) {
    const char *key = lpx_gguf_key(g, i);
    const lpx_gguf_type t = lpx_gguf_kv_type(g, i);
    put_str(w, key, strlen(key));
    put_u32(w, (uint32_t)t);
    if (!strcmp(key, count_key)) return put_scalar(w, t, n_layers, 0, key);
    if (t == LPX_GGUF_STRING) {
        const char *s;
        size_t len;
        if (!lpx_gguf_get_str(g, key, &s, &len))
            return lpx_errorf(LPX_ERR_FORMAT, "key %s: unreadable string", key);
        put_str(w, s, len);
        return LPX_OK;
    }
    if (t == LPX_GGUF_BOOL) {
        bool b;
        if (!lpx_gguf_get_bool(g, key, &b))
            return lpx_errorf(LPX_ERR_FORMAT, "key %s: unreadable bool", key);
        return put_scalar(w, t, b, 0, key);
    }
    if (t != LPX_GGUF_ARRAY) {
        int64_t iv = 0;
        double fv = 0;
        if (is_float(t) ? !lpx_gguf_get_f64(g, key, &fv) : !lpx_gguf_get_i64(g, key, &iv))
            return lpx_errorf(LPX_ERR_UNSUPPORTED, "key %s: value not representable", key);
        return put_scalar(w, t, iv, fv, key);
    }
    lpx_gguf_type et;
    uint64_t n;
    if (!lpx_gguf_get_arr(g, key, &et, &n))
        return lpx_errorf(LPX_ERR_FORMAT, "key %s: unreadable array", key);
    if (et == LPX_GGUF_ARRAY || et == LPX_GGUF_BOOL)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "key %s: arrays of type %d not supported", key, et);
    put_u32(w, (uint32_t)et);
    put_u64(w, n);
    for (uint64_t k = 0; k < n; k++) {
        if (et == LPX_GGUF_STRING) {
            const char *s;
            size_t len;
            if (!lpx_gguf_arr_str(g, key, k, &s, &len))
                return lpx_errorf(LPX_ERR_FORMAT, "key %s[%llu]: unreadable", key,
                                  (unsigned long long)k);
            put_str(w, s, len);
        } else {
            int64_t iv = 0;
            double fv = 0;
            if (is_float(et) ? !lpx_gguf_arr_f64(g, key, k, &fv) : !lpx_gguf_arr_i64(g, key, k, &iv))
                return lpx_errorf(LPX_ERR_UNSUPPORTED, "key %s[%llu]: not representable", key,
                                  (unsigned long long)k);
            LPX_TRY(put_scalar(w, et, iv, fv, key));
        }
    }
    return LPX_OK;
}

/* true when name is blk.N.* with N >= n_layers */
static bool dropped(const char *name, int n_layers) {
    if (strncmp(name, "blk.", 4)) return false;
    char *end;
    const long k = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' && k >= n_layers;
}

static size_t pad_to(size_t off, size_t align) { return (off + align - 1) / align * align; }

static lpx_status write_all(writer *w, const lpx_gguf *g, int n_layers) {
    const char *arch;
    size_t alen;
    if (!lpx_gguf_get_str(g, "general.architecture", &arch, &alen) || alen > 64)
        return lpx_errorf(LPX_ERR_FORMAT, "general.architecture missing");
    char count_key[96];
    snprintf(count_key, sizeof count_key, "%.*s.block_count", (int)alen, arch);
    int64_t have;
    if (!lpx_gguf_get_i64(g, count_key, &have))
        return lpx_errorf(LPX_ERR_FORMAT, "%s missing", count_key);
    if (n_layers < 1 || n_layers > have)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "--layers %d, the model has 1..%lld", n_layers,
                          (long long)have);
    int64_t align = 32;
    if (lpx_gguf_find(g, "general.alignment") >= 0 &&
        !lpx_gguf_get_i64(g, "general.alignment", &align))
        return lpx_errorf(LPX_ERR_FORMAT, "general.alignment unreadable");
    const int64_t nt = lpx_gguf_n_tensors(g), nkv = lpx_gguf_n_kv(g);
    int64_t kept = 0;
    for (int64_t i = 0; i < nt; i++) kept += !dropped(lpx_gguf_tensor_name(g, i), n_layers);
    put(w, "GGUF", 4);
    put_u32(w, 3);
    put_u64(w, (uint64_t)kept);
    put_u64(w, (uint64_t)nkv);
    for (int64_t i = 0; i < nkv; i++) LPX_TRY(copy_kv(w, g, i, count_key, n_layers));
    size_t off = 0;
    for (int64_t i = 0; i < nt; i++) {
        const char *name = lpx_gguf_tensor_name(g, i);
        if (dropped(name, n_layers)) continue;
        const int nd = lpx_gguf_tensor_n_dims(g, i);
        size_t nbytes;
        lpx_gguf_tensor_data(g, i, &nbytes);
        put_str(w, name, strlen(name));
        put_u32(w, (uint32_t)nd);
        for (int d = nd - 1; d >= 0; d--) put_u64(w, (uint64_t)lpx_gguf_tensor_dim(g, i, d));
        put_u32(w, lpx_gguf_tensor_ggml_type(g, i));
        put_u64(w, off);
        if (!lpx_add_size(off, nbytes, &off)) return lpx_errorf(LPX_ERR_FORMAT, "too large");
        off = pad_to(off, (size_t)align);
    }
    long pos = ftell(w->f);
    if (pos < 0) w->failed = true;
    static const uint8_t zeros[256];
    put(w, zeros, pad_to((size_t)pos, (size_t)align) - (size_t)pos);
    off = 0;
    for (int64_t i = 0; i < nt; i++) {
        if (dropped(lpx_gguf_tensor_name(g, i), n_layers)) continue;
        size_t nbytes;
        const void *data = lpx_gguf_tensor_data(g, i, &nbytes);
        put(w, data, nbytes);
        off += nbytes;
        const size_t padded = pad_to(off, (size_t)align);
        put(w, zeros, padded - off);
        off = padded;
    }
    return LPX_OK;
}

lpx_status lpx_gguf_write_slice(const char *in_path, int n_layers, const char *out_path) {
    lpx_gguf *g = NULL;
    LPX_TRY(lpx_gguf_open(in_path, &g));
    writer w = {fopen(out_path, "wb"), out_path, false};
    if (!w.f) {
        lpx_gguf_close(g);
        return lpx_errorf(LPX_ERR_IO, "cannot create %s: %s", out_path, strerror(errno));
    }
    lpx_status s = write_all(&w, g, n_layers);
    if (fclose(w.f) != 0) w.failed = true;
    if (s == LPX_OK && w.failed)
        s = lpx_errorf(LPX_ERR_IO, "writing %s failed: %s", out_path, strerror(errno));
    if (s != LPX_OK) remove(out_path);
    lpx_gguf_close(g);
    return s;
}
