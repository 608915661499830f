/* Base layer: error messages and checked arithmetic. */
#include "base/checked.h"
#include "base/error.h"
#include "test.h"

#include <string.h>

int main(void) {
    CHECK(lpx_errorf(LPX_ERR_FORMAT, "bad %d", 7) == LPX_ERR_FORMAT);
    CHECK(!strcmp(lpx_last_error(), "bad 7"));
    lpx_error_wrap(LPX_ERR_FORMAT, "file %s", "x.gguf");
    CHECK(!strcmp(lpx_last_error(), "file x.gguf: bad 7"));
    size_t s;
    CHECK(!lpx_mul_size(SIZE_MAX / 2 + 1, 2, &s));
    CHECK(lpx_mul_size(1000, 1000, &s) && s == 1000000);
    CHECK(!lpx_add_size(SIZE_MAX, 1, &s));
    int64_t v;
    CHECK(!lpx_mul_i64(INT64_MAX, 2, &v));
    TEST_DONE();
}
