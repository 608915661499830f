/* Whole-stream reads: doubling growth up to the cap, one byte past it to tell
 * "exactly cap bytes" from "too large". */
#include "base/readall.h"

#include "base/checked.h"
#include "base/error.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

lpx_status lpx_read_stream(FILE *f, const char *name, size_t cap, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (cap > SIZE_MAX - 2) cap = SIZE_MAX - 2; /* room for the byte past the cap and the NUL */
    size_t room = cap < ((size_t)1 << 16) ? cap + 1 : (size_t)1 << 16;
    char *buf = malloc(room + 1);
    if (!buf) return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory reading %zu bytes", name, room);
    size_t n = 0;
    for (;;) {
        if (n == room) {
            if (n > cap) break;
            size_t grown;
            if (!lpx_mul_size(room, 2, &grown) || grown > cap + 1) grown = cap + 1;
            char *p = realloc(buf, grown + 1);
            if (!p) {
                free(buf);
                return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory reading %zu bytes", name,
                                  grown);
            }
            buf = p;
            room = grown;
        }
        size_t want = room - n, got = fread(buf + n, 1, want, f);
        n += got;
        if (got < want) break; /* end of stream or an error, told apart below */
    }
    if (ferror(f)) {
        int e = errno;
        free(buf);
        return lpx_errorf(LPX_ERR_IO, "%s: read failed: %s", name, strerror(e));
    }
    if (n > cap) {
        free(buf);
        return lpx_errorf(LPX_ERR_FORMAT, "%s: larger than the limit of %zu bytes", name, cap);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return LPX_OK;
}

lpx_status lpx_read_file(const char *path, size_t cap, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return lpx_errorf(LPX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    lpx_status s = lpx_read_stream(f, path, cap, out, len);
    fclose(f);
    return s;
}
