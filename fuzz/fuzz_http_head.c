/* libFuzzer target: the server front's request-head check (src/server/http_head.c)
 * on arbitrary bytes, as the front peeks them (at most LPX_HTTP_HEAD_MAX). A refusal
 * must carry one of the statuses the front answers with and make an error object;
 * a head that waits for more bytes must have waited at every shorter prefix too (a
 * byte is refused only where no valid head can have it). Built by scripts/fuzz.sh. */
#include "server/http_head.h"
#include "server/openai.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    size_t n = size < LPX_HTTP_HEAD_MAX ? size : LPX_HTTP_HEAD_MAX;
    const char *p = (const char *)data;
    lpx_srv_error e;
    lpx_http_head r = lpx_http_head_check(p, n, n == LPX_HTTP_HEAD_MAX, &e);
    if (r == LPX_HTTP_HEAD_BAD) {
        if (e.status != 400 && e.status != 413 && e.status != 414 && e.status != 431 &&
            e.status != 505)
            abort();
        char *s = lpx_oa_error(&e);
        if (!s) abort();
        free(s);
    }
    if (r == LPX_HTTP_HEAD_MORE && n > 1 && lpx_http_head_check(p, n - 1, false, &e) != r) abort();
    return 0;
}
