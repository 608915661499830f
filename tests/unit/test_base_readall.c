/* base/readall: whole-file reads, growth past the first chunk, the size cap
 * (exactly cap bytes pass, one more fails naming the source), errors. */
#include "base/readall.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/lpx-readall-XXXXXX";

static const char *write_tmp(const char *name, const char *data, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    fclose(f);
    return path;
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL);
    char *out;
    size_t len;

    /* an empty file: an empty string, not an error */
    const char *p = write_tmp("empty", "", 0);
    CHECK(lpx_read_file(p, 0, &out, &len) == LPX_OK && len == 0 && out[0] == '\0');
    free(out);

    /* 300000 bytes with NULs inside: several doublings past the 64 KiB first chunk */
    size_t big = 300000;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i * 7 % 251);
    p = write_tmp("big", data, big);
    CHECK(lpx_read_file(p, SIZE_MAX, &out, &len) == LPX_OK && len == big);
    CHECK(!memcmp(out, data, big) && out[big] == '\0');
    free(out);

    /* the cap: exactly cap bytes pass, cap - 1 fails, naming the file and the limit */
    CHECK(lpx_read_file(p, big, &out, &len) == LPX_OK && len == big);
    free(out);
    CHECK(lpx_read_file(p, big - 1, &out, &len) == LPX_ERR_FORMAT && out == NULL);
    CHECK(strstr(lpx_last_error(), p) && strstr(lpx_last_error(), "299999 bytes"));
    /* a small cap below the first chunk */
    p = write_tmp("small", "hello", 5);
    CHECK(lpx_read_file(p, 4, &out, &len) == LPX_ERR_FORMAT && out == NULL);
    CHECK(lpx_read_file(p, 5, &out, &len) == LPX_OK && len == 5 && !strcmp(out, "hello"));
    free(out);

    /* a stream: the caller's name in messages, the stream left open */
    FILE *f = fmemopen(data, big, "rb");
    CHECK(lpx_read_stream(f, "standard input", 1000, &out, &len) == LPX_ERR_FORMAT);
    CHECK(strstr(lpx_last_error(), "standard input") != NULL);
    rewind(f);
    CHECK(lpx_read_stream(f, "standard input", big, &out, &len) == LPX_OK && len == big);
    CHECK(!memcmp(out, data, big));
    free(out);
    fclose(f);

    /* a missing file and a directory: I/O errors naming the path */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    CHECK(lpx_read_file(missing, 100, &out, &len) == LPX_ERR_IO && out == NULL);
    CHECK(strstr(lpx_last_error(), missing) && strstr(lpx_last_error(), "cannot open"));
    CHECK(lpx_read_file(dir, 100, &out, &len) == LPX_ERR_IO && out == NULL);
    CHECK(strstr(lpx_last_error(), dir) != NULL);

    const char *names[] = {"empty", "big", "small"};
    for (size_t i = 0; i < 3; i++) {
        char path[300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    free(data);
    TEST_DONE();
}
