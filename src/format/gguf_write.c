/* GGUF v3 writer. Layout: magic, version, tensor count, kv count, key/values, tensor
 * infos (dims innermost first), padding to the alignment, tensor data with each
 * tensor's offset aligned. */
#include "format/gguf_write.h"

#include "base/checked.h"
#include "base/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf;

struct lpx_gguf_writer {
    char path[4096], tmp[4112];
    FILE *f;
    bool overwrite, header_done;
    size_t align;
    buf kv, ti; /* the header's key/values and tensor infos */
    uint64_t n_kv;
    size_t *sizes; /* [n_t] bytes of each tensor */
    int64_t n_t, cap_t;
    size_t data_off; /* offset of the next tensor added, in the data section */
    int64_t cur;     /* tensor whose bytes put_data writes next */
    size_t cur_done, written;
    lpx_status err; /* the first failure of a header call */
};

static void fail_nomem(lpx_gguf_writer *w) {
    if (w->err == LPX_OK) w->err = lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", w->path);
}

static void put(lpx_gguf_writer *w, buf *b, const void *p, size_t n) {
    if (w->err != LPX_OK || !n) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) return fail_nomem(w);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}
/* Little-endian hosts only (x86-64, arm64), as the reader. */
static void put_u32(lpx_gguf_writer *w, buf *b, uint32_t v) {
    put(w, b, &v, 4);
}
static void put_u64(lpx_gguf_writer *w, buf *b, uint64_t v) {
    put(w, b, &v, 8);
}
static void put_str(lpx_gguf_writer *w, buf *b, const char *s, size_t n) {
    put_u64(w, b, n);
    put(w, b, s, n);
}

static void kv_head(lpx_gguf_writer *w, const char *key, lpx_gguf_type t) {
    put_str(w, &w->kv, key, strlen(key));
    put_u32(w, &w->kv, (uint32_t)t);
    w->n_kv++;
}

void lpx_gguf_kv_u32(lpx_gguf_writer *w, const char *key, uint32_t v) {
    kv_head(w, key, LPX_GGUF_U32);
    put_u32(w, &w->kv, v);
}
void lpx_gguf_kv_i32(lpx_gguf_writer *w, const char *key, int32_t v) {
    kv_head(w, key, LPX_GGUF_I32);
    put(w, &w->kv, &v, 4);
}
void lpx_gguf_kv_f32(lpx_gguf_writer *w, const char *key, float v) {
    kv_head(w, key, LPX_GGUF_F32);
    put(w, &w->kv, &v, 4);
}
void lpx_gguf_kv_bool(lpx_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v;
    kv_head(w, key, LPX_GGUF_BOOL);
    put(w, &w->kv, &b, 1);
}
void lpx_gguf_kv_str(lpx_gguf_writer *w, const char *key, const char *s, size_t len) {
    kv_head(w, key, LPX_GGUF_STRING);
    put_str(w, &w->kv, s, len);
}
void lpx_gguf_kv_arr(lpx_gguf_writer *w, const char *key, lpx_gguf_type elem, uint64_t n) {
    kv_head(w, key, LPX_GGUF_ARRAY);
    put_u32(w, &w->kv, (uint32_t)elem);
    put_u64(w, &w->kv, n);
}
void lpx_gguf_put_str(lpx_gguf_writer *w, const char *s, size_t len) {
    put_str(w, &w->kv, s, len);
}
void lpx_gguf_put_i32(lpx_gguf_writer *w, int32_t v) {
    put(w, &w->kv, &v, 4);
}
void lpx_gguf_put_f32(lpx_gguf_writer *w, float v) {
    put(w, &w->kv, &v, 4);
}

/* One scalar of type t from an integer or float reading. */
static lpx_status put_scalar(lpx_gguf_writer *w, lpx_gguf_type t, int64_t iv, double fv,
                             const char *key) {
    switch (t) {
    case LPX_GGUF_U8:
    case LPX_GGUF_I8:
    case LPX_GGUF_BOOL: {
        uint8_t v = (uint8_t)iv;
        put(w, &w->kv, &v, 1);
        break;
    }
    case LPX_GGUF_U16:
    case LPX_GGUF_I16: {
        uint16_t v = (uint16_t)iv;
        put(w, &w->kv, &v, 2);
        break;
    }
    case LPX_GGUF_U32:
    case LPX_GGUF_I32:
        put_u32(w, &w->kv, (uint32_t)iv);
        break;
    case LPX_GGUF_U64:
    case LPX_GGUF_I64:
        put_u64(w, &w->kv, (uint64_t)iv);
        break;
    case LPX_GGUF_F32: {
        float v = (float)fv;
        put(w, &w->kv, &v, 4);
        break;
    }
    case LPX_GGUF_F64:
        put(w, &w->kv, &fv, 8);
        break;
    default:
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "key %s: value type %d not supported", key, t);
    }
    return LPX_OK;
}

static bool is_float(lpx_gguf_type t) {
    return t == LPX_GGUF_F32 || t == LPX_GGUF_F64;
}

static lpx_status copy_kv(lpx_gguf_writer *w, const lpx_gguf *g, int64_t i) {
    const char *key = lpx_gguf_key(g, i);
    const lpx_gguf_type t = lpx_gguf_kv_type(g, i);
    kv_head(w, key, t);
    if (t == LPX_GGUF_STRING) {
        const char *s;
        size_t len;
        if (!lpx_gguf_get_str(g, key, &s, &len))
            return lpx_errorf(LPX_ERR_FORMAT, "key %s: unreadable string", key);
        put_str(w, &w->kv, s, len);
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
    put_u32(w, &w->kv, (uint32_t)et);
    put_u64(w, &w->kv, n);
    for (uint64_t k = 0; k < n; k++) {
        if (et == LPX_GGUF_STRING) {
            const char *s;
            size_t len;
            if (!lpx_gguf_arr_str(g, key, k, &s, &len))
                return lpx_errorf(LPX_ERR_FORMAT, "key %s[%llu]: unreadable", key,
                                  (unsigned long long)k);
            put_str(w, &w->kv, s, len);
        } else {
            int64_t iv = 0;
            double fv = 0;
            if (is_float(et) ? !lpx_gguf_arr_f64(g, key, k, &fv)
                             : !lpx_gguf_arr_i64(g, key, k, &iv))
                return lpx_errorf(LPX_ERR_UNSUPPORTED, "key %s[%llu]: not representable", key,
                                  (unsigned long long)k);
            LPX_TRY(put_scalar(w, et, iv, fv, key));
        }
    }
    return LPX_OK;
}

void lpx_gguf_kv_copy(lpx_gguf_writer *w, const lpx_gguf *g, int64_t i) {
    if (w->err != LPX_OK) return;
    lpx_status s = copy_kv(w, g, i);
    if (s != LPX_OK && w->err == LPX_OK) w->err = s;
}

static size_t pad_to(size_t off, size_t align) {
    return (off + align - 1) / align * align;
}

void lpx_gguf_add_tensor(lpx_gguf_writer *w, const char *name, int n_dims, const int64_t *shape,
                         uint32_t ggml_type, size_t nbytes) {
    if (w->err != LPX_OK) return;
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? 2 * w->cap_t : 256;
        size_t *s = realloc(w->sizes, (size_t)cap * sizeof *s);
        if (!s) return fail_nomem(w);
        w->sizes = s;
        w->cap_t = cap;
    }
    put_str(w, &w->ti, name, strlen(name));
    put_u32(w, &w->ti, (uint32_t)n_dims);
    for (int d = n_dims - 1; d >= 0; d--)
        put_u64(w, &w->ti, (uint64_t)shape[d]);
    put_u32(w, &w->ti, ggml_type);
    put_u64(w, &w->ti, w->data_off);
    w->sizes[w->n_t++] = nbytes;
    if (!lpx_add_size(w->data_off, nbytes, &w->data_off) ||
        pad_to(w->data_off, w->align) < w->data_off)
        w->err = lpx_errorf(LPX_ERR_INVALID_ARG, "%s: tensor data too large", w->path);
    w->data_off = pad_to(w->data_off, w->align);
}

static const uint8_t zeros[256];

static bool write_raw(lpx_gguf_writer *w, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, w->f) != n) return false;
    w->written += n;
    return true;
}

static lpx_status write_header(lpx_gguf_writer *w) {
    LPX_TRY(w->err);
    w->header_done = true;
    buf h = {0};
    put(w, &h, "GGUF", 4);
    put_u32(w, &h, 3);
    put_u64(w, &h, (uint64_t)w->n_t);
    put_u64(w, &h, w->n_kv);
    LPX_TRY(w->err);
    bool ok = write_raw(w, h.p, h.len) && write_raw(w, w->kv.p, w->kv.len) &&
              write_raw(w, w->ti.p, w->ti.len);
    free(h.p);
    ok = ok && write_raw(w, zeros, pad_to(w->written, w->align) - w->written);
    if (!ok) return lpx_errorf(LPX_ERR_IO, "writing %s: %s", w->tmp, strerror(errno));
    w->written = 0; /* from here: offsets in the data section */
    return LPX_OK;
}

/* Pads after every tensor whose bytes are complete, up to the next one with bytes due. */
static bool close_tensors(lpx_gguf_writer *w) {
    while (w->cur < w->n_t && w->cur_done == w->sizes[w->cur]) {
        w->cur++;
        w->cur_done = 0;
        if (!write_raw(w, zeros, pad_to(w->written, w->align) - w->written)) return false;
    }
    return true;
}

lpx_status lpx_gguf_put_data(lpx_gguf_writer *w, const void *p, size_t n) {
    if (!w->header_done) LPX_TRY(write_header(w));
    const uint8_t *b = p;
    while (n) {
        if (!close_tensors(w))
            return lpx_errorf(LPX_ERR_IO, "writing %s: %s", w->tmp, strerror(errno));
        if (w->cur == w->n_t)
            return lpx_errorf(LPX_ERR_INTERNAL, "%s: more tensor data than declared", w->path);
        size_t take = w->sizes[w->cur] - w->cur_done;
        if (take > n) take = n;
        if (!write_raw(w, b, take))
            return lpx_errorf(LPX_ERR_IO, "writing %s: %s", w->tmp, strerror(errno));
        w->cur_done += take;
        b += take;
        n -= take;
    }
    return LPX_OK;
}

lpx_status lpx_gguf_writer_create(const char *path, size_t alignment, bool overwrite,
                                  lpx_gguf_writer **out) {
    *out = NULL;
    struct stat st;
    if (!overwrite && stat(path, &st) == 0)
        return lpx_errorf(LPX_ERR_IO, "%s exists (not overwritten)", path);
    if (!alignment || alignment > sizeof zeros || (alignment & (alignment - 1)))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "alignment %zu: expected a power of 2 up to %zu",
                          alignment, sizeof zeros);
    lpx_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path) {
        free(w);
        return lpx_errorf(LPX_ERR_INVALID_ARG, "output path too long");
    }
    /* The temporary file beside the target, so that the rename stays in one file system. */
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path + 1) : 0;
    snprintf(w->tmp, sizeof w->tmp, "%.*s.%s.XXXXXX", dir_len, path, slash ? slash + 1 : path);
    int fd = mkstemp(w->tmp);
    if (fd < 0 || fchmod(fd, 0644) != 0 || !(w->f = fdopen(fd, "wb"))) {
        lpx_status s =
            lpx_errorf(LPX_ERR_IO, "cannot create a file beside %s: %s", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(w->tmp);
        }
        free(w);
        return s;
    }
    w->overwrite = overwrite;
    w->align = alignment;
    *out = w;
    return LPX_OK;
}

static void writer_free(lpx_gguf_writer *w) {
    free(w->kv.p);
    free(w->ti.p);
    free(w->sizes);
    free(w);
}

void lpx_gguf_writer_abort(lpx_gguf_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->tmp);
    writer_free(w);
}

lpx_status lpx_gguf_writer_finish(lpx_gguf_writer *w) {
    lpx_status s = w->header_done ? LPX_OK : write_header(w);
    if (s == LPX_OK && !close_tensors(w))
        s = lpx_errorf(LPX_ERR_IO, "writing %s: %s", w->tmp, strerror(errno));
    if (s == LPX_OK && w->cur != w->n_t)
        s = lpx_errorf(LPX_ERR_INTERNAL, "%s: tensor %lld of %lld has %zu of its %zu bytes",
                       w->path, (long long)w->cur, (long long)w->n_t, w->cur_done,
                       w->sizes[w->cur]);
    if (s == LPX_OK && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
        s = lpx_errorf(LPX_ERR_IO, "writing %s: %s", w->tmp, strerror(errno));
    if (fclose(w->f) != 0 && s == LPX_OK)
        s = lpx_errorf(LPX_ERR_IO, "writing %s: %s", w->tmp, strerror(errno));
    w->f = NULL;
    /* link fails where the target exists: no-overwrite holds even against a racing writer. */
    if (s == LPX_OK && (w->overwrite ? rename(w->tmp, w->path) : link(w->tmp, w->path)) != 0)
        s = errno == EEXIST
                ? lpx_errorf(LPX_ERR_IO, "%s exists (not overwritten)", w->path)
                : lpx_errorf(LPX_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
    if (s != LPX_OK || !w->overwrite) unlink(w->tmp);
    writer_free(w);
    return s;
}

/* true when name is blk.N.* with N >= n_layers */
static bool dropped(const char *name, int n_layers) {
    if (strncmp(name, "blk.", 4)) return false;
    char *end;
    const long k = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' && k >= n_layers;
}

static lpx_status write_slice(lpx_gguf_writer *w, const lpx_gguf *g, int n_layers) {
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
    const int64_t nt = lpx_gguf_n_tensors(g), nkv = lpx_gguf_n_kv(g);
    for (int64_t i = 0; i < nkv; i++) {
        if (!strcmp(lpx_gguf_key(g, i), count_key))
            lpx_gguf_kv_u32(w, count_key, (uint32_t)n_layers);
        else
            lpx_gguf_kv_copy(w, g, i);
    }
    for (int64_t i = 0; i < nt; i++) {
        const char *name = lpx_gguf_tensor_name(g, i);
        if (dropped(name, n_layers)) continue;
        int64_t shape[LPX_MAX_DIMS];
        const int nd = lpx_gguf_tensor_n_dims(g, i);
        for (int d = 0; d < nd; d++)
            shape[d] = lpx_gguf_tensor_dim(g, i, d);
        size_t nbytes;
        lpx_gguf_tensor_data(g, i, &nbytes);
        lpx_gguf_add_tensor(w, name, nd, shape, lpx_gguf_tensor_ggml_type(g, i), nbytes);
    }
    for (int64_t i = 0; i < nt; i++) {
        if (dropped(lpx_gguf_tensor_name(g, i), n_layers)) continue;
        size_t nbytes;
        const void *data = lpx_gguf_tensor_data(g, i, &nbytes);
        LPX_TRY(lpx_gguf_put_data(w, data, nbytes));
    }
    return LPX_OK;
}

lpx_status lpx_gguf_write_slice(const char *in_path, int n_layers, const char *out_path) {
    lpx_gguf *g = NULL;
    LPX_TRY(lpx_gguf_open(in_path, &g));
    int64_t align = 32;
    lpx_gguf_writer *w = NULL;
    lpx_status s = LPX_OK;
    if (lpx_gguf_find(g, "general.alignment") >= 0 &&
        !lpx_gguf_get_i64(g, "general.alignment", &align))
        s = lpx_errorf(LPX_ERR_FORMAT, "general.alignment unreadable");
    if (s == LPX_OK) s = lpx_gguf_writer_create(out_path, (size_t)align, true, &w);
    if (s == LPX_OK && (s = write_slice(w, g, n_layers)) != LPX_OK) lpx_gguf_writer_abort(w);
    if (s == LPX_OK) s = lpx_gguf_writer_finish(w);
    lpx_gguf_close(g);
    return s;
}
