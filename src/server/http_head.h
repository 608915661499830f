/* The request head of a new connection, checked before libmicrohttpd parses it.
 *
 * libmicrohttpd 0.9.75 answers what it cannot parse with HTML bodies it writes
 * itself (and a malformed Content-Length with a response whose head is written
 * twice); it offers no hook to replace them. So the server's front (http.c) peeks
 * at the first bytes of every connection and answers, with a JSON error, any head
 * that libmicrohttpd would reject, before it hands the connection over. The check
 * is RFC 9112's grammar, as strict as libmicrohttpd or stricter: whatever passes
 * here, libmicrohttpd parses. docs/server.md, "Robustness", lists what stays
 * libmicrohttpd's (a later request on a kept-alive connection, chunk lines after
 * the first). */
#ifndef LPX_SERVER_HTTP_HEAD_H
#define LPX_SERVER_HTTP_HEAD_H

#include "server/params.h"

#include <stdbool.h>
#include <stddef.h>

/* The bytes of a head (and a chunked body's first chunk line) the front reads
 * at most: well within libmicrohttpd's 32 KiB buffer for a connection. */
#define LPX_HTTP_HEAD_MAX 16384

typedef enum lpx_http_head {
    LPX_HTTP_HEAD_MORE, /* fine so far: wait for more bytes */
    LPX_HTTP_HEAD_OK,   /* a whole head libmicrohttpd parses: hand it over */
    LPX_HTTP_HEAD_BAD,  /* e says why (400, 413, 414, 431 or 505) */
} lpx_http_head;

/* Checks the first n bytes a connection sent. full: no more bytes will be looked
 * at (n is the front's limit), so a head that has not ended is refused. For a
 * chunked body (without `Expect: 100-continue`, whose client waits for the
 * server before sending it) the first chunk line must be complete and valid too. */
lpx_http_head lpx_http_head_check(const char *p, size_t n, bool full, lpx_srv_error *e);

#endif
