/* GGUF v2/v3 reader. The whole header is walked once at parse time with every
 * length, count, shape, type and offset checked against the buffer; the handle
 * then keeps offsets of values so the accessors need no further checks.
 * Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv key/values,
 * n_tensors tensor infos, padding to general.alignment, tensor data. */
#include "format/gguf.h"
#include "format/ggml.h"

#include "base/checked.h"
#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_KEY_LEN 65535 /* a key longer than this is corruption, not a key */
#define MAX_ARRAY_DEPTH 8
#define DEFAULT_ALIGNMENT 32

typedef struct gguf_kv {
    char *key;       /* NUL-terminated copy */
    uint32_t type;   /* lpx_gguf_type */
    size_t val;      /* offset of the value; strings: of the bytes; arrays: of element 0 */
    uint64_t len;    /* strings: byte length; arrays: element count */
    uint32_t elem;   /* arrays: element type */
    size_t *str_off; /* string arrays: offset of each element's u64 length prefix */
} gguf_kv;

typedef struct gguf_tensor {
    char name[96];
    uint32_t type; /* ggml type id */
    int n_dims;
    int64_t ne[LPX_MAX_DIMS]; /* ggml order: ne[0] innermost */
    uint64_t offset;          /* from the start of the data section */
    size_t nbytes;
} gguf_tensor;

struct lpx_gguf {
    const uint8_t *data;
    size_t size;
    uint32_t version;
    int64_t n_kv;
    gguf_kv *kv;
    int64_t n_tensors;
    gguf_tensor *t;
    size_t data_start;
    void *map; /* lpx_gguf_open's mapping, or NULL */
    size_t map_size;
};

typedef struct reader {
    const uint8_t *p;
    size_t size, pos;
    const char *name;
} reader;

static lpx_status need(reader *r, size_t n, const char *what) {
    if (n > r->size - r->pos)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: truncated: %s needs %zu bytes at offset %zu, only %zu left", r->name,
                          what, n, r->pos, r->size - r->pos);
    return LPX_OK;
}

static uint32_t le32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static lpx_status rd_u32(reader *r, uint32_t *v, const char *what) {
    LPX_TRY(need(r, 4, what));
    *v = le32(r->p + r->pos);
    r->pos += 4;
    return LPX_OK;
}
static lpx_status rd_u64(reader *r, uint64_t *v, const char *what) {
    LPX_TRY(need(r, 8, what));
    *v = le64(r->p + r->pos);
    r->pos += 8;
    return LPX_OK;
}

/* A u64 length then that many bytes; *off is where the bytes start. */
static lpx_status rd_str(reader *r, uint64_t cap, size_t *off, uint64_t *len, const char *what) {
    LPX_TRY(rd_u64(r, len, what));
    if (*len > cap)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: string length %llu of %s exceeds the limit %llu",
                          r->name, (unsigned long long)*len, what, (unsigned long long)cap);
    if (*len > r->size - r->pos)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: string length %llu of %s at offset %zu runs past the end of the "
                          "file (%zu bytes left)",
                          r->name, (unsigned long long)*len, what, r->pos, r->size - r->pos);
    *off = r->pos;
    r->pos += (size_t)*len;
    return LPX_OK;
}

static size_t scalar_size(uint32_t t) {
    switch (t) {
    case LPX_GGUF_U8:
    case LPX_GGUF_I8:
    case LPX_GGUF_BOOL:
        return 1;
    case LPX_GGUF_U16:
    case LPX_GGUF_I16:
        return 2;
    case LPX_GGUF_U32:
    case LPX_GGUF_I32:
    case LPX_GGUF_F32:
        return 4;
    case LPX_GGUF_U64:
    case LPX_GGUF_I64:
    case LPX_GGUF_F64:
        return 8;
    default:
        return 0;
    }
}

/* Smallest encoding of one value of type t (for checking counts against the file). */
static size_t min_size(uint32_t t) {
    if (t == LPX_GGUF_STRING) return 8;
    if (t == LPX_GGUF_ARRAY) return 12;
    return scalar_size(t);
}

static lpx_status check_bools(reader *r, size_t off, uint64_t n, const char *key) {
    for (uint64_t i = 0; i < n; i++)
        if (r->p[off + i] > 1)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: key %s: bool value %u is neither 0 nor 1",
                              r->name, key, r->p[off + i]);
    return LPX_OK;
}

/* Validates (and steps over) the elements of an array of type elem, count n. */
static lpx_status skip_array(reader *r, uint32_t elem, uint64_t n, int depth, const char *key,
                             size_t *str_off);

static lpx_status skip_value(reader *r, uint32_t type, int depth, const char *key) {
    size_t sz = scalar_size(type), off;
    uint64_t len;
    if (sz) {
        LPX_TRY(need(r, sz, key));
        if (type == LPX_GGUF_BOOL) LPX_TRY(check_bools(r, r->pos, 1, key));
        r->pos += sz;
        return LPX_OK;
    }
    if (type == LPX_GGUF_STRING) return rd_str(r, UINT64_MAX, &off, &len, key);
    if (type == LPX_GGUF_ARRAY) {
        uint32_t elem;
        uint64_t n;
        if (depth >= MAX_ARRAY_DEPTH)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: key %s: arrays nested deeper than %d", r->name,
                              key, MAX_ARRAY_DEPTH);
        LPX_TRY(rd_u32(r, &elem, key));
        LPX_TRY(rd_u64(r, &n, key));
        return skip_array(r, elem, n, depth + 1, key, NULL);
    }
    return lpx_errorf(LPX_ERR_FORMAT, "%s: key %s: unknown value type %u", r->name, key, type);
}

static lpx_status skip_array(reader *r, uint32_t elem, uint64_t n, int depth, const char *key,
                             size_t *str_off) {
    size_t m = min_size(elem);
    if (!m)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: key %s: unknown array element type %u", r->name, key,
                          elem);
    if (n > (r->size - r->pos) / m)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: key %s: array count %llu exceeds what the file can hold (%zu bytes "
                          "left)",
                          r->name, key, (unsigned long long)n, r->size - r->pos);
    size_t sz = scalar_size(elem);
    if (sz) {
        if (elem == LPX_GGUF_BOOL) LPX_TRY(check_bools(r, r->pos, n, key));
        r->pos += (size_t)n * sz;
        return LPX_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (str_off) str_off[i] = r->pos;
        LPX_TRY(skip_value(r, elem, depth, key));
    }
    return LPX_OK;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Finds a repeated string among n names; returns it or NULL. */
static const char *find_duplicate(const char **names, int64_t n) {
    qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
    for (int64_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) return names[i];
    return NULL;
}

static lpx_status parse_kvs(lpx_gguf *g, reader *r) {
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        size_t off;
        uint64_t len;
        char what[64];
        snprintf(what, sizeof what, "key %lld", (long long)i);
        LPX_TRY(rd_str(r, MAX_KEY_LEN, &off, &len, what));
        if (memchr(r->p + off, 0, (size_t)len))
            return lpx_errorf(LPX_ERR_FORMAT, "%s: key %lld contains a NUL byte", r->name,
                              (long long)i);
        if (!(kv->key = malloc((size_t)len + 1)))
            return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", r->name);
        memcpy(kv->key, r->p + off, (size_t)len);
        kv->key[len] = '\0';
        LPX_TRY(rd_u32(r, &kv->type, kv->key));
        if (kv->type == LPX_GGUF_STRING) {
            LPX_TRY(rd_str(r, UINT64_MAX, &kv->val, &kv->len, kv->key));
        } else if (kv->type == LPX_GGUF_ARRAY) {
            LPX_TRY(rd_u32(r, &kv->elem, kv->key));
            LPX_TRY(rd_u64(r, &kv->len, kv->key));
            kv->val = r->pos;
            /* The count is bounded by the file size before anything is allocated. */
            if (kv->elem == LPX_GGUF_STRING && kv->len <= (r->size - r->pos) / 8) {
                kv->str_off = malloc(kv->len ? (size_t)kv->len * sizeof(size_t) : 1);
                if (!kv->str_off) return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", r->name);
            }
            LPX_TRY(skip_array(r, kv->elem, kv->len, 1, kv->key, kv->str_off));
        } else {
            kv->val = r->pos;
            LPX_TRY(skip_value(r, kv->type, 0, kv->key));
        }
    }
    const char **names = malloc((size_t)(g->n_kv ? g->n_kv : 1) * sizeof *names);
    if (!names) return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", r->name);
    for (int64_t i = 0; i < g->n_kv; i++)
        names[i] = g->kv[i].key;
    const char *dup = find_duplicate(names, g->n_kv);
    lpx_status s = dup ? lpx_errorf(LPX_ERR_FORMAT, "%s: duplicate key %s", r->name, dup) : LPX_OK;
    free(names);
    return s;
}

static lpx_status parse_tensor_info(reader *r, int64_t i, gguf_tensor *t) {
    size_t off;
    uint64_t len, v;
    char what[64];
    snprintf(what, sizeof what, "name of tensor %lld", (long long)i);
    LPX_TRY(rd_str(r, sizeof t->name - 1, &off, &len, what));
    if (memchr(r->p + off, 0, (size_t)len))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %lld: name contains a NUL byte", r->name,
                          (long long)i);
    memcpy(t->name, r->p + off, (size_t)len);
    t->name[len] = '\0';
    uint32_t n_dims;
    LPX_TRY(rd_u32(r, &n_dims, t->name));
    if (n_dims < 1 || n_dims > LPX_MAX_DIMS)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: %u dims (expected 1 to %d)", r->name,
                          t->name, n_dims, LPX_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < t->n_dims; d++) {
        LPX_TRY(rd_u64(r, &v, t->name));
        if (v < 1 || v > INT64_MAX)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: dimension %d is %llu", r->name,
                              t->name, d, (unsigned long long)v);
        t->ne[d] = (int64_t)v;
    }
    LPX_TRY(rd_u32(r, &t->type, t->name));
    LPX_TRY(rd_u64(r, &t->offset, t->name));
    const lpx_ggml_type_info *ti = lpx_ggml_type(t->type);
    if (!ti)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: unknown type id %u", r->name, t->name,
                          t->type);
    if (t->ne[0] % ti->block_elems)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: innermost dimension %lld is not a multiple of the %s "
                          "block of %d",
                          r->name, t->name, (long long)t->ne[0], ti->name, ti->block_elems);
    int64_t elems = 1;
    size_t bytes = (size_t)(t->ne[0] / ti->block_elems);
    bool ok = lpx_mul_size(bytes, (size_t)ti->block_bytes, &bytes);
    for (int d = 0; d < t->n_dims; d++)
        ok = ok && lpx_mul_i64(elems, t->ne[d], &elems);
    for (int d = 1; d < t->n_dims; d++)
        ok = ok && lpx_mul_size(bytes, (size_t)t->ne[d], &bytes);
    if (!ok)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: element count or byte size overflows",
                          r->name, t->name);
    t->nbytes = bytes;
    return LPX_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static lpx_status parse_tensors(lpx_gguf *g, reader *r) {
    for (int64_t i = 0; i < g->n_tensors; i++)
        LPX_TRY(parse_tensor_info(r, i, &g->t[i]));

    uint32_t align = DEFAULT_ALIGNMENT;
    int64_t ai = lpx_gguf_find(g, "general.alignment");
    if (ai >= 0) {
        if (g->kv[ai].type != LPX_GGUF_U32)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: general.alignment has type %u, expected u32",
                              r->name, g->kv[ai].type);
        align = le32(r->p + g->kv[ai].val);
        if (align == 0 || (align & (align - 1)))
            return lpx_errorf(LPX_ERR_FORMAT, "%s: general.alignment %u is not a power of two",
                              r->name, align);
    }
    size_t start;
    if (!lpx_add_size(r->pos, align - 1, &start))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: data section offset overflows", r->name);
    start &= ~(size_t)(align - 1);
    if (start > r->size) {
        if (g->n_tensors)
            return lpx_errorf(LPX_ERR_FORMAT,
                              "%s: truncated: data section starts at %zu, past the end (%zu)",
                              r->name, start, r->size);
        start = r->size;
    }
    g->data_start = start;
    size_t avail = r->size - start;

    const gguf_tensor **order = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *order);
    const char **names = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *names);
    lpx_status s = LPX_OK;
    if (!order || !names) s = lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", r->name);
    for (int64_t i = 0; s == LPX_OK && i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->t[i];
        if (t->offset % align)
            s = lpx_errorf(LPX_ERR_FORMAT,
                           "%s: tensor %s: offset %llu is misaligned (alignment %u)", r->name,
                           t->name, (unsigned long long)t->offset, align);
        else if (t->offset > avail || t->nbytes > avail - t->offset)
            s = lpx_errorf(LPX_ERR_FORMAT,
                           "%s: tensor %s: data at offset %llu + %zu bytes runs past the end of "
                           "the data section (%zu bytes)",
                           r->name, t->name, (unsigned long long)t->offset, t->nbytes, avail);
        order[i] = t;
        names[i] = t->name;
    }
    if (s == LPX_OK) {
        const char *dup = find_duplicate(names, g->n_tensors);
        if (dup) s = lpx_errorf(LPX_ERR_FORMAT, "%s: duplicate tensor name %s", r->name, dup);
    }
    if (s == LPX_OK) {
        qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_offset);
        for (int64_t i = 1; s == LPX_OK && i < g->n_tensors; i++)
            if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
                s = lpx_errorf(LPX_ERR_FORMAT, "%s: tensors %s and %s overlap", r->name,
                               order[i - 1]->name, order[i]->name);
    }
    free(order);
    free(names);
    return s;
}

static lpx_status parse(lpx_gguf *g, const char *name) {
    reader r = {g->data, g->size, 0, name};
    uint64_t n_tensors, n_kv;
    if (g->size < 4 || memcmp(g->data, "GGUF", 4))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: bad magic (not a GGUF file)", name);
    r.pos = 4;
    LPX_TRY(rd_u32(&r, &g->version, "version"));
    if (g->version != 2 && g->version != 3)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: unsupported GGUF version %u (expected 2 or 3)", name,
                          g->version);
    LPX_TRY(rd_u64(&r, &n_tensors, "tensor count"));
    LPX_TRY(rd_u64(&r, &n_kv, "key/value count"));
    /* Each key/value takes at least 13 bytes, each tensor info at least 32. */
    if (n_kv > (r.size - r.pos) / 13)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: key/value count %llu exceeds what the file can hold (%zu bytes)",
                          name, (unsigned long long)n_kv, r.size);
    if (n_tensors > (r.size - r.pos) / 32)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor count %llu exceeds what the file can hold (%zu bytes)", name,
                          (unsigned long long)n_tensors, r.size);
    g->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof *g->kv);
    g->t = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *g->t);
    if (!g->kv || !g->t) return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", name);
    g->n_kv = (int64_t)n_kv;
    LPX_TRY(parse_kvs(g, &r));
    g->n_tensors = (int64_t)n_tensors;
    return parse_tensors(g, &r);
}

lpx_status lpx_gguf_parse(const void *data, size_t size, const char *name, lpx_gguf **out) {
    *out = NULL;
    lpx_gguf *g = calloc(1, sizeof *g);
    if (!g) return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", name);
    g->data = data;
    g->size = size;
    lpx_status s = parse(g, name);
    if (s != LPX_OK) {
        lpx_gguf_close(g);
        return s;
    }
    *out = g;
    return LPX_OK;
}

lpx_status lpx_gguf_open(const char *path, lpx_gguf **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lpx_errorf(LPX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return lpx_errorf(LPX_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return lpx_errorf(LPX_ERR_FORMAT, "%s: truncated: the file is empty", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (map == MAP_FAILED)
        return lpx_errorf(LPX_ERR_IO, "%s: mmap failed: %s", path, strerror(err));
    lpx_gguf *g;
    lpx_status s = lpx_gguf_parse(map, size, path, &g);
    if (s != LPX_OK) {
        munmap(map, size);
        return s;
    }
    g->map = map;
    g->map_size = size;
    *out = g;
    return LPX_OK;
}

void lpx_gguf_close(lpx_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; g->kv && i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str_off);
    }
    free(g->kv);
    free(g->t);
    if (g->map) munmap(g->map, g->map_size);
    free(g);
}

uint32_t lpx_gguf_version(const lpx_gguf *g) {
    return g->version;
}
int64_t lpx_gguf_n_kv(const lpx_gguf *g) {
    return g->n_kv;
}
const char *lpx_gguf_key(const lpx_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}
lpx_gguf_type lpx_gguf_kv_type(const lpx_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? (lpx_gguf_type)g->kv[i].type : (lpx_gguf_type)-1;
}

int64_t lpx_gguf_find(const lpx_gguf *g, const char *key) {
    /* Keys are parsed in order, so a partly parsed handle is searched safely. */
    for (int64_t i = 0; i < g->n_kv && g->kv[i].key; i++)
        if (!strcmp(g->kv[i].key, key)) return i;
    return -1;
}

static const gguf_kv *find_kv(const lpx_gguf *g, const char *key, uint32_t type) {
    int64_t i = lpx_gguf_find(g, key);
    return i >= 0 && g->kv[i].type == type ? &g->kv[i] : NULL;
}

static bool read_int(uint32_t type, const uint8_t *p, int64_t *v) {
    switch (type) {
    case LPX_GGUF_U8:
        *v = p[0];
        return true;
    case LPX_GGUF_I8:
        *v = (int8_t)p[0];
        return true;
    case LPX_GGUF_U16:
        *v = (uint16_t)(p[0] | p[1] << 8);
        return true;
    case LPX_GGUF_I16:
        *v = (int16_t)(p[0] | p[1] << 8);
        return true;
    case LPX_GGUF_U32:
        *v = le32(p);
        return true;
    case LPX_GGUF_I32:
        *v = (int32_t)le32(p);
        return true;
    case LPX_GGUF_I64:
        *v = (int64_t)le64(p);
        return true;
    case LPX_GGUF_U64: {
        uint64_t u = le64(p);
        if (u > INT64_MAX) return false;
        *v = (int64_t)u;
        return true;
    }
    default:
        return false;
    }
}

static bool read_float(uint32_t type, const uint8_t *p, double *v) {
    if (type == LPX_GGUF_F32) {
        float f;
        memcpy(&f, p, 4);
        *v = f;
        return true;
    }
    if (type == LPX_GGUF_F64) {
        memcpy(v, p, 8);
        return true;
    }
    return false;
}

bool lpx_gguf_get_str(const lpx_gguf *g, const char *key, const char **s, size_t *len) {
    const gguf_kv *kv = find_kv(g, key, LPX_GGUF_STRING);
    if (!kv) return false;
    *s = (const char *)g->data + kv->val;
    *len = (size_t)kv->len;
    return true;
}

bool lpx_gguf_get_i64(const lpx_gguf *g, const char *key, int64_t *v) {
    int64_t i = lpx_gguf_find(g, key);
    return i >= 0 && read_int(g->kv[i].type, g->data + g->kv[i].val, v);
}

bool lpx_gguf_get_f64(const lpx_gguf *g, const char *key, double *v) {
    int64_t i = lpx_gguf_find(g, key);
    return i >= 0 && read_float(g->kv[i].type, g->data + g->kv[i].val, v);
}

bool lpx_gguf_get_bool(const lpx_gguf *g, const char *key, bool *v) {
    const gguf_kv *kv = find_kv(g, key, LPX_GGUF_BOOL);
    if (!kv) return false;
    *v = g->data[kv->val] != 0;
    return true;
}

bool lpx_gguf_get_arr(const lpx_gguf *g, const char *key, lpx_gguf_type *elem, uint64_t *n) {
    const gguf_kv *kv = find_kv(g, key, LPX_GGUF_ARRAY);
    if (!kv) return false;
    *elem = (lpx_gguf_type)kv->elem;
    *n = kv->len;
    return true;
}

bool lpx_gguf_arr_str(const lpx_gguf *g, const char *key, uint64_t i, const char **s, size_t *len) {
    const gguf_kv *kv = find_kv(g, key, LPX_GGUF_ARRAY);
    if (!kv || kv->elem != LPX_GGUF_STRING || i >= kv->len) return false;
    size_t off = kv->str_off[i];
    *len = (size_t)le64(g->data + off);
    *s = (const char *)g->data + off + 8;
    return true;
}

static const uint8_t *arr_elem(const lpx_gguf *g, const char *key, uint64_t i, uint32_t *type) {
    const gguf_kv *kv = find_kv(g, key, LPX_GGUF_ARRAY);
    size_t sz = kv ? scalar_size(kv->elem) : 0;
    if (!sz || i >= kv->len) return NULL;
    *type = kv->elem;
    return g->data + kv->val + (size_t)i * sz;
}

bool lpx_gguf_arr_i64(const lpx_gguf *g, const char *key, uint64_t i, int64_t *v) {
    uint32_t type;
    const uint8_t *p = arr_elem(g, key, i, &type);
    return p && read_int(type, p, v);
}

bool lpx_gguf_arr_f64(const lpx_gguf *g, const char *key, uint64_t i, double *v) {
    uint32_t type;
    const uint8_t *p = arr_elem(g, key, i, &type);
    return p && read_float(type, p, v);
}

int64_t lpx_gguf_n_tensors(const lpx_gguf *g) {
    return g->n_tensors;
}

static const gguf_tensor *tensor(const lpx_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->t[i] : NULL;
}

uint32_t lpx_gguf_tensor_ggml_type(const lpx_gguf *g, int64_t i) {
    const gguf_tensor *t = tensor(g, i);
    return t ? t->type : UINT32_MAX;
}
const char *lpx_gguf_tensor_name(const lpx_gguf *g, int64_t i) {
    const gguf_tensor *t = tensor(g, i);
    return t ? t->name : NULL;
}
int lpx_gguf_tensor_n_dims(const lpx_gguf *g, int64_t i) {
    const gguf_tensor *t = tensor(g, i);
    return t ? t->n_dims : 0;
}
int64_t lpx_gguf_tensor_dim(const lpx_gguf *g, int64_t i, int d) {
    const gguf_tensor *t = tensor(g, i);
    if (!t || d < 0 || d >= t->n_dims) return 0;
    return t->ne[t->n_dims - 1 - d];
}
const void *lpx_gguf_tensor_data(const lpx_gguf *g, int64_t i, size_t *nbytes) {
    const gguf_tensor *t = tensor(g, i);
    if (!t) return NULL;
    if (nbytes) *nbytes = t->nbytes;
    return g->data + g->data_start + t->offset;
}
