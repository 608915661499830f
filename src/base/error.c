#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LPX_ERRBUF 1024
static _Thread_local char errbuf[LPX_ERRBUF];

lpx_status lpx_errorf(lpx_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return s;
}

lpx_status lpx_error_wrap(lpx_status s, const char *fmt, ...) {
    char old[LPX_ERRBUF], prefix[LPX_ERRBUF];
    memcpy(old, errbuf, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t n = strlen(prefix);
    if (n > sizeof errbuf - 3) n = sizeof errbuf - 3;
    memcpy(errbuf, prefix, n);
    memcpy(errbuf + n, ": ", 2);
    size_t room = sizeof errbuf - n - 3;
    size_t m = strlen(old);
    if (m > room) m = room;
    memcpy(errbuf + n + 2, old, m);
    errbuf[n + 2 + m] = '\0';
    return s;
}

void lpx_error_clear(void) { errbuf[0] = '\0'; }

const char *lpx_last_error(void) { return errbuf; }

const char *lpx_status_name(lpx_status s) {
    switch (s) {
    case LPX_OK: return "ok";
    case LPX_ERR_INVALID_ARG: return "invalid argument";
    case LPX_ERR_IO: return "i/o error";
    case LPX_ERR_FORMAT: return "malformed file";
    case LPX_ERR_UNSUPPORTED: return "unsupported";
    case LPX_ERR_NOMEM: return "out of memory";
    case LPX_ERR_TOO_LONG: return "too long";
    case LPX_ERR_DEVICE: return "device error";
    case LPX_ERR_CANCELLED: return "cancelled";
    case LPX_ERR_BUSY: return "busy";
    case LPX_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *lpx_version(void) { return LPX_VERSION; }

void lpx_free(void *p) { free(p); }
