/* A request head's grammar (RFC 9112 section 2 to 7), checked on the bytes
 * peeked so far: a byte that no valid head can have at its place is refused at
 * once, so bytes that never make a line (a TLS ClientHello on the plain port)
 * are answered without waiting for a deadline. */
#include "server/http_head.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 5.6.2: the bytes of a token (a method, a header name). */
static bool tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool ctl(unsigned char c) {
    return c < 0x20 || c == 0x7f;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

typedef struct head {
    const char *p;
    size_t n;
    bool full;
    lpx_srv_error *e;
} head;

/* A line end at i: its length (1: a bare LF, which libmicrohttpd and RFC 9112
 * 2.2 accept; 2: CRLF), 0 when the byte is no line end, -1 when more bytes are
 * needed to tell, -2 for a CR that no LF follows. */
static int eol(const head *h, size_t i) {
    if (i >= h->n) return -1;
    if (h->p[i] == '\n') return 1;
    if (h->p[i] != '\r') return 0;
    if (i + 1 >= h->n) return -1;
    return h->p[i + 1] == '\n' ? 2 : -2;
}

static lpx_http_head bad_at(const head *h, size_t i, const char *what) {
    if (i < h->n)
        lpx_srv_fail(h->e, 400, "invalid_request_error", "malformed_http", NULL,
                     "malformed HTTP request (byte %zu: 0x%02X): %s", i, (unsigned char)h->p[i],
                     what);
    else
        lpx_srv_fail(h->e, 400, "invalid_request_error", "malformed_http", NULL,
                     "malformed HTTP request: %s", what);
    return LPX_HTTP_HEAD_BAD;
}

/* Bytes up to i are fine and more are needed: wait, unless no more will be read. */
static lpx_http_head more(const head *h, int status, const char *code, const char *what) {
    if (!h->full) return LPX_HTTP_HEAD_MORE;
    lpx_srv_fail(h->e, status, "invalid_request_error", code, NULL,
                 "%s is longer than the %d bytes "
                 "the server reads for a request's head",
                 what, LPX_HTTP_HEAD_MAX);
    return LPX_HTTP_HEAD_BAD;
}

/* The line end after a line's last byte at i: its length, or 0 with *r set (junk
 * says what a byte other than a line end there is). */
static int line_end(const head *h, size_t i, lpx_http_head *r, int status, const char *code,
                    const char *what, const char *junk) {
    int k = eol(h, i);
    if (k > 0) return k;
    *r = k == -1 ? more(h, status, code, what)
                 : bad_at(h, i, k == -2 ? "a CR that no LF follows" : junk);
    return 0;
}

/* The value of an unsigned decimal or hex number of n bytes; false when a byte is
 * not a digit, *over when it does not fit 64 bits. */
static bool number(const char *p, size_t n, int base, uint64_t *v, bool *over) {
    *v = 0;
    *over = false;
    if (!n) return false;
    for (size_t i = 0; i < n; i++) {
        int d = base == 16 ? hexval((unsigned char)p[i])
                           : (p[i] >= '0' && p[i] <= '9' ? p[i] - '0' : -1);
        if (d < 0) return false;
        if (*v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) *over = true;
        *v = *v * (uint64_t)base + (uint64_t)d;
    }
    return true;
}

static bool name_is(const char *p, size_t n, const char *name) {
    return n == strlen(name) && !strncasecmp(p, name, n);
}

/* The request line from 0 (after any empty lines, which RFC 9112 2.2 lets a
 * server skip): its end in *end. */
static lpx_http_head request_line(const head *h, size_t *end) {
    const char *p = h->p;
    size_t i = 0;
    lpx_http_head r;
    for (int k; (k = eol(h, i)) > 0;)
        i += (size_t)k;
    if (eol(h, i) == -2) return bad_at(h, i, "a CR that no LF follows");
    size_t m = i;
    while (m < h->n && tchar((unsigned char)p[m]))
        m++;
    if (m == h->n) return more(h, 414, "uri_too_long", "the request line");
    if (p[m] != ' ' || m == i)
        return bad_at(h, m,
                      "a request line is a method (a token), a space, the target, a space "
                      "and the HTTP version");
    size_t t = m + 1;
    while (t < h->n && p[t] != ' ' && !ctl((unsigned char)p[t]))
        t++;
    if (t == h->n) return more(h, 414, "uri_too_long", "the request line");
    if (t == m + 1) return bad_at(h, t, "the request target is empty");
    if (p[t] == '\r' || p[t] == '\n')
        return bad_at(h, t,
                      "the request line ends before the HTTP version (HTTP/0.9 is not "
                      "served)");
    if (p[t] != ' ') return bad_at(h, t, "a control byte in the request target");
    static const char pat[] = "HTTP/9.9"; /* 9: a digit */
    size_t v = t + 1;
    for (size_t j = 0; j < sizeof pat - 1; j++) {
        if (v + j >= h->n) return more(h, 414, "uri_too_long", "the request line");
        unsigned char c = (unsigned char)p[v + j];
        if (pat[j] == '9' ? !(c >= '0' && c <= '9') : c != (unsigned char)pat[j])
            return bad_at(h, v + j,
                          "the HTTP version is HTTP/1.1 or HTTP/1.0 (a space in the "
                          "target must be sent as %20)");
    }
    int k = line_end(h, v + 8, &r, 414, "uri_too_long", "the request line",
                     "bytes after the HTTP version");
    if (!k) return r;
    if (p[v + 5] != '1') {
        lpx_srv_fail(h->e, 505, "invalid_request_error", "http_version_not_supported", NULL,
                     "HTTP/%c.%c is not supported: send HTTP/1.1 or HTTP/1.0", p[v + 5], p[v + 7]);
        return LPX_HTTP_HEAD_BAD;
    }
    *end = v + 8 + (size_t)k;
    return LPX_HTTP_HEAD_OK;
}

/* What the header lines say about the body. */
typedef struct framing {
    bool have_len, te_seen, chunked, expect_continue;
    uint64_t len;
} framing;

/* The header value p[0..n) (without the whitespace before it) of a header the
 * framing depends on. */
static lpx_http_head header(const head *h, const char *name, size_t nn, const char *p, size_t n,
                            size_t at, framing *f) {
    if (name_is(name, nn, "content-length")) {
        uint64_t v;
        bool over;
        if (!number(p, n, 10, &v, &over))
            return bad_at(h, at, "Content-Length is a decimal number of bytes");
        if (over || (f->have_len && f->len != v)) {
            if (over)
                lpx_srv_fail(h->e, 413, "invalid_request_error", "request_too_large", NULL,
                             "the request's Content-Length does not fit 64 bits");
            return over ? LPX_HTTP_HEAD_BAD
                        : bad_at(h, at, "two Content-Length headers with different values");
        }
        f->have_len = true;
        f->len = v;
    } else if (name_is(name, nn, "transfer-encoding") && !f->te_seen) {
        /* the first one, as libmicrohttpd and the server's 501 look at */
        f->te_seen = true;
        f->chunked = name_is(p, n, "chunked");
    } else if (name_is(name, nn, "expect")) {
        f->expect_continue = name_is(p, n, "100-continue");
    }
    return LPX_HTTP_HEAD_OK;
}

/* The first chunk line of a chunked body at i: its size in hex and any
 * extensions (which the server ignores, as RFC 9112 7.1.1 says). */
static lpx_http_head first_chunk(const head *h, size_t i) {
    const char *p = h->p;
    static const char what[] = "the head with the body's first chunk line";
    size_t j = i;
    while (j < h->n && hexval((unsigned char)p[j]) >= 0)
        j++;
    if (j == h->n) return more(h, 400, "malformed_http", what);
    if (j == i) return bad_at(h, j, "a chunk line starts with the chunk's size in hex");
    uint64_t v;
    bool over;
    number(p + i, j - i, 16, &v, &over);
    if (over) {
        lpx_srv_fail(h->e, 413, "invalid_request_error", "request_too_large", NULL,
                     "a chunk's size does not fit 64 bits");
        return LPX_HTTP_HEAD_BAD;
    }
    if (p[j] == ';')
        while (++j < h->n && p[j] != '\r' && p[j] != '\n')
            if (ctl((unsigned char)p[j]) && p[j] != '\t')
                return bad_at(h, j, "a control byte in a chunk extension");
    lpx_http_head r;
    return line_end(h, j, &r, 400, "malformed_http", what,
                    "a chunk's size is followed by extensions (';') or the line's end")
               ? LPX_HTTP_HEAD_OK
               : r;
}

lpx_http_head lpx_http_head_check(const char *p, size_t n, bool full, lpx_srv_error *e) {
    head h = {.p = p, .n = n, .full = full, .e = e};
    size_t i = 0;
    lpx_http_head r = request_line(&h, &i);
    if (r != LPX_HTTP_HEAD_OK) return r;
    framing f = {0};
    for (;;) {
        int k = eol(&h, i);
        if (k > 0) break; /* the empty line: the head's end */
        if (k == -1) return more(&h, 431, "header_fields_too_large", "the request's head");
        if (k == -2) return bad_at(&h, i, "a CR that no LF follows");
        if (p[i] == ' ' || p[i] == '\t')
            return bad_at(&h, i,
                          "a header line starts with whitespace (obsolete line folding "
                          "is refused, RFC 9112 5.2)");
        size_t c = i;
        while (c < n && tchar((unsigned char)p[c]))
            c++;
        if (c == n) return more(&h, 431, "header_fields_too_large", "the request's head");
        if (p[c] != ':' || c == i)
            return bad_at(&h, c,
                          "a header line is a name (a token), ':' right after it, and a "
                          "value");
        size_t v = c + 1;
        while (v < n && p[v] != '\r' && p[v] != '\n') {
            if (ctl((unsigned char)p[v]) && p[v] != '\t')
                return bad_at(&h, v, "a control byte in a header value");
            v++;
        }
        /* v is at a CR, an LF or n: never junk */
        k = line_end(&h, v, &r, 431, "header_fields_too_large", "the request's head", "");
        if (!k) return r;
        /* whitespace before the value is not part of it; after it, it is, as
         * libmicrohttpd reads it (so "Content-Length: 5 " is no number) */
        size_t a = c + 1;
        while (a < v && (p[a] == ' ' || p[a] == '\t'))
            a++;
        r = header(&h, p + i, c - i, p + a, v - a, a, &f);
        if (r != LPX_HTTP_HEAD_OK) return r;
        i = v + (size_t)k;
    }
    i += (size_t)eol(&h, i);
    if (f.chunked && !f.expect_continue) return first_chunk(&h, i);
    return LPX_HTTP_HEAD_OK;
}
