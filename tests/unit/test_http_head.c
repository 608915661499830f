/* server/http_head: every prefix of a valid head waits for more (a byte is refused only
 * where no valid head can have it), the whole head passes; the front's 16 KiB limit
 * and the cases libmicrohttpd 0.9.75 would answer itself (tests/py/test_serve_edges.py
 * sends them to a server). */
#include "server/http_head.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static lpx_http_head check(const char *p, size_t n, bool full, lpx_srv_error *e) {
    memset(e, 0, sizeof *e);
    return lpx_http_head_check(p, n, full, e);
}

static lpx_http_head check_s(const char *p, lpx_srv_error *e) {
    return check(p, strlen(p), false, e);
}

int main(void) {
    static const char *const good[] = {
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n", "\r\n\nGET /x?y=%20 HTTP/1.0\n\n",
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Length: 0002\r\n"
        "content-length:2\r\nX-Empty:\r\nX-Tab:\ta\tb\r\nX-Utf8: \xc3\xa9\r\n\r\n{}",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1a;name=\"v\";x\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n",
        /* the client waits for 100 Continue before its chunks */
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
        /* not chunked (the server answers 501): no chunk line is awaited */
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        "GET / HTTP/1.2\r\n\r\n", /* a later 1.x: libmicrohttpd serves it as 1.1 */
    };
    lpx_srv_error e;
    for (size_t g = 0; g < sizeof good / sizeof *good; g++) {
        size_t n = strlen(good[g]);
        for (size_t i = 0; i < n; i++) {
            lpx_http_head r = check(good[g], i, false, &e);
            if (r != LPX_HTTP_HEAD_MORE && !(r == LPX_HTTP_HEAD_OK && i > 0)) {
                fprintf(stderr, "good[%zu] prefix %zu: %d %s\n", g, i, r, e.message);
                CHECK(false);
            }
        }
        CHECK(check(good[g], n, false, &e) == LPX_HTTP_HEAD_OK);
        CHECK(check(good[g], n, true, &e) == LPX_HTTP_HEAD_OK);
    }

    /* refused at the first byte no head can have there, naming it */
    CHECK(check_s("\x16\x03\x01", &e) == LPX_HTTP_HEAD_BAD && e.status == 400 &&
          strstr(e.message, "byte 0: 0x16") && !strcmp(e.code, "malformed_http"));
    CHECK(check("\0\0", 2, false, &e) == LPX_HTTP_HEAD_BAD && strstr(e.message, "byte 0: 0x00"));
    CHECK(check_s("GET /a b HTTP/1.1\r\n", &e) == LPX_HTTP_HEAD_BAD &&
          strstr(e.message, "byte 7: 0x62"));
    CHECK(check_s("GET  / HTTP/1.1\r\n", &e) == LPX_HTTP_HEAD_BAD); /* empty target */
    CHECK(check_s("GET /\x01 HTTP/1.1\r\n", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/1.1 \r\n", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/1.1\rX", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/2.0\r\n", &e) == LPX_HTTP_HEAD_BAD && e.status == 505 &&
          !strcmp(e.code, "http_version_not_supported"));
    CHECK(check_s("GET / http/1.1\r\n", &e) == LPX_HTTP_HEAD_BAD && e.status == 400);
    CHECK(check_s("GET / HTTP/1.1\r\n folded\r\n", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/1.1\r\nA B: c\r\n", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/1.1\r\n: c\r\n", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/1.1\r\nA: \x7f\r\n", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/1.1\r\nContent-Length: 5 \r\n\r\n", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/1.1\r\nContent-Length:\r\n\r\n", &e) == LPX_HTTP_HEAD_BAD);
    CHECK(check_s("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", &e) ==
          LPX_HTTP_HEAD_BAD);
    /* 2^64 does not fit; 2^64 - 1 does */
    CHECK(check_s("GET / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n", &e) ==
              LPX_HTTP_HEAD_BAD &&
          e.status == 413);
    CHECK(check_s("GET / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n", &e) ==
          LPX_HTTP_HEAD_OK);
    static const char chunked[] = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    char buf[LPX_HTTP_HEAD_MAX + 64];
    snprintf(buf, sizeof buf, "%s;x\r\n", chunked);
    CHECK(check_s(buf, &e) == LPX_HTTP_HEAD_BAD); /* no size */
    snprintf(buf, sizeof buf, "%s5 \r\n", chunked);
    CHECK(check_s(buf, &e) == LPX_HTTP_HEAD_BAD);
    snprintf(buf, sizeof buf, "%s5;\x01\r\n", chunked);
    CHECK(check_s(buf, &e) == LPX_HTTP_HEAD_BAD);
    snprintf(buf, sizeof buf, "%s10000000000000000\r\n", chunked);
    CHECK(check_s(buf, &e) == LPX_HTTP_HEAD_BAD && e.status == 413);

    /* the front's limit: a head (or first chunk line) not ended in 16 KiB */
    size_t h = strlen(chunked);
    memcpy(buf, chunked, h);
    memcpy(buf + h, "2;", 2);
    memset(buf + h + 2, 'x', sizeof buf - h - 2);
    CHECK(check(buf, LPX_HTTP_HEAD_MAX, false, &e) == LPX_HTTP_HEAD_MORE);
    CHECK(check(buf, LPX_HTTP_HEAD_MAX, true, &e) == LPX_HTTP_HEAD_BAD && e.status == 400 &&
          strstr(e.message, "16384"));
    memcpy(buf, "GET /", 5);
    memset(buf + 5, 'a', sizeof buf - 5);
    CHECK(check(buf, LPX_HTTP_HEAD_MAX, true, &e) == LPX_HTTP_HEAD_BAD && e.status == 414 &&
          !strcmp(e.code, "uri_too_long"));
    static const char line[] = "GET / HTTP/1.1\r\nX: ";
    memcpy(buf, line, sizeof line - 1);
    memset(buf + sizeof line - 1, 'a', sizeof buf - sizeof line + 1);
    CHECK(check(buf, LPX_HTTP_HEAD_MAX, true, &e) == LPX_HTTP_HEAD_BAD && e.status == 431 &&
          !strcmp(e.code, "header_fields_too_large"));
    /* a head that ends exactly at the limit passes */
    memcpy(buf + LPX_HTTP_HEAD_MAX - 4, "\r\n\r\n", 4);
    CHECK(check(buf, LPX_HTTP_HEAD_MAX, true, &e) == LPX_HTTP_HEAD_OK);
    TEST_DONE();
}
