/* Dequantization against gguf-py's dequantize (fixtures written by
 * scripts/make-model-fixtures.py): every type lpx keeps as stored (F16, BF16,
 * Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K). */
#include "format/ggml.h"
#include "model/model.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void *slurp(const char *name, const char *ext, size_t *n) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/model/dtype/%s.%s", name, ext);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(*n);
    if (fread(p, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return p;
}

/* Largest relative difference between our rows and the reference. */
static double compare(const float *got, const float *ref, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]) / fmax(1.0, fabs((double)ref[i]));
        if (!(err <= worst)) worst = err; /* NaN counts as worst */
    }
    return worst;
}

static void check_type(const char *name, uint32_t ggml_id, lpx_dtype lpx_type) {
    size_t nraw = 0, nref = 0;
    unsigned char *raw = slurp(name, "bin", &nraw);
    float *ref = slurp(name, "f32", &nref);
    CHECK(raw && ref && nraw && nref);
    if (!raw || !ref) return;
    int64_t n = (int64_t)(nref / 4), rows = 4, cols = n / rows;
    const lpx_ggml_type_info *ti = lpx_ggml_type(ggml_id);
    CHECK(ti && !strcmp(ti->name, name) && ti->lpx_type == (int)lpx_type);
    size_t row_bytes = (size_t)(cols / ti->block_elems * ti->block_bytes);
    CHECK(row_bytes * (size_t)rows == nraw);
    float *got = calloc((size_t)n, sizeof *got);
    for (int64_t r = 0; r < rows; r++) {
        size_t rb = 0;
        CHECK(lpx_dtype_row_bytes(lpx_type, cols, &rb) && rb == row_bytes);
        lpx_dequantize_row(lpx_type, raw + r * row_bytes, got + r * cols, cols);
    }
    double err = compare(got, ref, (size_t)n);
    printf("%-5s max rel err %.3g\n", name, err);
    CHECK(err <= 1e-6);
    free(got);
    free(raw);
    free(ref);
}

int main(void) {
    check_type("F16", 1, LPX_DT_F16);
    check_type("BF16", 30, LPX_DT_BF16);
    check_type("Q8_0", 8, LPX_DT_Q8_0);
    check_type("Q4_0", 2, LPX_DT_Q4_0);
    check_type("Q4_1", 3, LPX_DT_Q4_1);
    check_type("Q4_K", 12, LPX_DT_Q4_K);
    check_type("Q5_K", 13, LPX_DT_Q5_K);
    check_type("Q6_K", 14, LPX_DT_Q6_K);

    size_t rb;
    CHECK(!lpx_dtype_row_bytes(LPX_DT_Q4_0, 33, &rb));       /* not whole blocks */
    CHECK(!lpx_dtype_row_bytes(LPX_DT_F32, INT64_MAX, &rb)); /* overflows */
    CHECK(lpx_dtype_row_bytes(LPX_DT_Q4_1, 64, &rb) && rb == 40);
    CHECK(lpx_dtype_block_bytes(LPX_DT_Q8_0) == 34 && lpx_dtype_block_elems(LPX_DT_Q8_0) == 32);
    CHECK(!strcmp(lpx_dtype_name(LPX_DT_BF16), "BF16"));
    CHECK(lpx_ggml_type(4) == NULL && lpx_ggml_type(1000) == NULL);
    TEST_DONE();
}
