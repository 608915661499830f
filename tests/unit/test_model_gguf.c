/* The GGUF reader on meta.gguf (written by gguf-py with every metadata type,
 * nested arrays and two tensors) and on a buffer corrupted byte by byte. */
#include "format/gguf.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define META "tests/fixtures/model/meta.gguf"

static void check_meta_v(lpx_gguf *g, uint32_t version) {
    int64_t v;
    double f;
    bool b;
    const char *s;
    size_t len;
    CHECK(lpx_gguf_version(g) == version);
    CHECK(lpx_gguf_get_str(g, "general.architecture", &s, &len) && len == 4 &&
          !memcmp(s, "test", 4));
    CHECK(lpx_gguf_get_i64(g, "t.u8", &v) && v == 200);
    CHECK(lpx_gguf_get_i64(g, "t.i8", &v) && v == -100);
    CHECK(lpx_gguf_get_i64(g, "t.u16", &v) && v == 60000);
    CHECK(lpx_gguf_get_i64(g, "t.i16", &v) && v == -30000);
    CHECK(lpx_gguf_get_i64(g, "t.u32", &v) && v == 4000000000LL);
    CHECK(lpx_gguf_get_i64(g, "t.i32", &v) && v == -2000000000LL);
    CHECK(!lpx_gguf_get_i64(g, "t.u64", &v)); /* 2^63 + 5 does not fit */
    CHECK(lpx_gguf_get_i64(g, "t.i64", &v) && v == -(1LL << 40));
    CHECK(lpx_gguf_get_f64(g, "t.f32", &f) && f == 1.5);
    CHECK(lpx_gguf_get_f64(g, "t.f64", &f) && f == 2.25);
    CHECK(!lpx_gguf_get_f64(g, "t.i8", &f));
    CHECK(lpx_gguf_get_bool(g, "t.bool", &b) && b);
    CHECK(lpx_gguf_get_str(g, "t.str", &s, &len) && len == 6 && !memcmp(s, "h\xc3\xa9llo", 6));
    CHECK(!lpx_gguf_get_str(g, "t.missing", &s, &len));
    CHECK(lpx_gguf_find(g, "t.missing") == -1);

    lpx_gguf_type et;
    uint64_t n;
    CHECK(lpx_gguf_get_arr(g, "t.arr_str", &et, &n) && et == LPX_GGUF_STRING && n == 3);
    CHECK(lpx_gguf_arr_str(g, "t.arr_str", 1, &s, &len) && len == 2 && !memcmp(s, "bc", 2));
    CHECK(lpx_gguf_arr_str(g, "t.arr_str", 2, &s, &len) && len == 0);
    CHECK(!lpx_gguf_arr_str(g, "t.arr_str", 3, &s, &len));
    CHECK(lpx_gguf_arr_i64(g, "t.arr_i16", 2, &v) && v == -3);
    CHECK(!lpx_gguf_arr_i64(g, "t.arr_i16", 3, &v));
    CHECK(lpx_gguf_arr_f64(g, "t.arr_f32", 1, &f) && f == -0.25);
    CHECK(lpx_gguf_get_arr(g, "t.nested", &et, &n) && et == LPX_GGUF_ARRAY && n == 2);
    CHECK(!lpx_gguf_arr_i64(g, "t.nested", 0, &v));
    int64_t k = lpx_gguf_find(g, "t.nested");
    CHECK(k >= 0 && !strcmp(lpx_gguf_key(g, k), "t.nested") &&
          lpx_gguf_kv_type(g, k) == LPX_GGUF_ARRAY);

    CHECK(lpx_gguf_n_tensors(g) == 2);
    CHECK(!strcmp(lpx_gguf_tensor_name(g, 0), "a") && lpx_gguf_tensor_ggml_type(g, 0) == 0);
    CHECK(lpx_gguf_tensor_n_dims(g, 0) == 2 && lpx_gguf_tensor_dim(g, 0, 0) == 2 &&
          lpx_gguf_tensor_dim(g, 0, 1) == 32);
    size_t nb;
    const float *a = lpx_gguf_tensor_data(g, 0, &nb);
    CHECK(nb == 256 && a[33] == 33.0f);
    CHECK(lpx_gguf_tensor_n_dims(g, 1) == 3 && lpx_gguf_tensor_dim(g, 1, 0) == 1 &&
          lpx_gguf_tensor_dim(g, 1, 2) == 3 && lpx_gguf_tensor_ggml_type(g, 1) == 1);
    CHECK(lpx_gguf_tensor_name(g, 2) == NULL);
}

int main(void) {
    lpx_gguf *g;
    lpx_status s = lpx_gguf_open(META, &g);
    CHECK(s == LPX_OK);
    if (s != LPX_OK) {
        fprintf(stderr, "%s\n", lpx_last_error());
        TEST_DONE();
    }
    check_meta_v(g, 3);
    lpx_gguf_close(g);

    CHECK(lpx_gguf_open("tests/fixtures/model/no-such.gguf", &g) == LPX_ERR_IO);
    CHECK(strstr(lpx_last_error(), "no-such.gguf") != NULL);

    /* GGUF v2 has the same layout (v3 added big-endian files, which say so only
     * by their byte order). */
    FILE *f2 = fopen(META, "rb");
    unsigned char v2[4096];
    size_t n2 = fread(v2, 1, sizeof v2, f2);
    fclose(f2);
    v2[4] = 2;
    CHECK(lpx_gguf_parse(v2, n2, "v2", &g) == LPX_OK);
    if (g) {
        CHECK(lpx_gguf_version(g) == 2);
        check_meta_v(g, 2);
        lpx_gguf_close(g);
    }

    /* Every truncation and every single-byte change must parse or fail cleanly
     * (the sanitizer build turns any out-of-bounds read into a failure). */
    FILE *f = fopen(META, "rb");
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int failed = 0;
    for (size_t cut = 0; cut < n; cut++) {
        unsigned char *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        if (lpx_gguf_parse(copy, cut, "cut", &g) == LPX_OK)
            lpx_gguf_close(g);
        else
            failed++;
        free(copy);
    }
    CHECK(failed > 0);
    for (size_t i = 0; i < n; i++) {
        for (int delta = 1; delta < 256; delta += 127) {
            unsigned char *copy = malloc(n);
            memcpy(copy, buf, n);
            copy[i] = (unsigned char)(copy[i] + delta);
            if (lpx_gguf_parse(copy, n, "flip", &g) == LPX_OK) lpx_gguf_close(g);
            free(copy);
        }
    }
    TEST_DONE();
}
