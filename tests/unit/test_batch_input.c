/* Batch input checks: numeric ranges (an out-of-range double must not reach
 * an int cast), too many stop strings, an over-long line rejected without
 * losing the lines after it; a rejected line's long id cut on a UTF-8
 * character boundary; a file with no valid line (found by
 * fuzz/fuzz_batch_input.c: the duplicate check passed NULL to qsort, which
 * the asan build's UBSan reports). */
#include "batch/input.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[] = "/tmp/lpx-batch-input-XXXXXX";

static const lpx_batch_reject *reject_on(const lpx_batch_input *in, int64_t line) {
    for (size_t i = 0; i < in->n_rejects; i++)
        if (in->rejects[i].line == line) return &in->rejects[i];
    return NULL;
}

int main(void) {
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    static const char *const lines[] = {
        "{\"id\":\"ok\",\"prompt\":\"hi\",\"max_tokens\":5,\"seed\":7,\"top_k\":0}",
        "{\"id\":\"big\",\"prompt\":\"hi\",\"max_tokens\":1e12}",
        "{\"id\":\"neg\",\"prompt\":\"hi\",\"max_tokens\":-3}",
        "{\"id\":\"frac\",\"prompt\":\"hi\",\"max_tokens\":2.5}",
        "{\"id\":\"k\",\"prompt\":\"hi\",\"top_k\":-1}",
        "{\"id\":\"s\",\"prompt\":\"hi\",\"seed\":1e300}",
        "{\"id\":\"t\",\"prompt\":\"hi\",\"temperature\":-0.5,\"top_p\":0.9}",
        "{\"id\":\"st\",\"prompt\":\"hi\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\","
        "\"8\","
        "\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
        "{\"id\":\"st16\",\"prompt\":\"hi\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\","
        "\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\"]}",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        fprintf(f, "%s\n", lines[i]);
    /* line 10: one byte over the limit; line 11 must still be read */
    fputs("{\"id\":\"long\",\"prompt\":\"", f);
    for (size_t i = 0; i < LPX_BATCH_MAX_LINE + 1 - 25; i++)
        fputc('x', f);
    fputs("\"}\n", f);
    fputs("{\"id\":\"after\",\"prompt\":\"hi\"}\n", f);
    fclose(f);

    lpx_batch_input in;
    CHECK(lpx_batch_input_read(path, &in) == LPX_OK);
    CHECK(in.n_lines == 11);
    /* the ranges and words of lpx serve (sample/request_body.h): top_k -1 is "off" */
    const char *ok_ids[] = {"ok", "k", "st16", "after"};
    CHECK(in.n_tasks == 4);
    for (size_t i = 0; i < in.n_tasks && i < 4; i++)
        CHECK(!strcmp(in.tasks[i].id, ok_ids[i]));
    const lpx_batch_reject *r;
    CHECK(
        (r = reject_on(&in, 2)) && !strcmp(r->id, "big") &&
        strstr(r->reason, "'max_tokens' is 1000000000000: expected an integer in [1, 2147483647]"));
    CHECK((r = reject_on(&in, 3)) && strstr(r->reason, "'max_tokens' is -3: expected an integer"));
    CHECK((r = reject_on(&in, 4)) && strstr(r->reason, "'max_tokens' must be an integer"));
    CHECK((r = reject_on(&in, 6)) && strstr(r->reason, "'seed' must be an integer"));
    CHECK((r = reject_on(&in, 7)) &&
          strstr(r->reason, "'temperature' is -0.5: expected a value in [0, 2]"));
    CHECK((r = reject_on(&in, 8)) && strstr(r->reason, "stop takes at most 16 strings"));
    CHECK((r = reject_on(&in, 10)) && r->id == NULL && strstr(r->reason, "longer than 67108864"));
    CHECK(in.n_rejects == 7);
    lpx_batch_input_free(&in);

    /* no valid line: blank lines, a bad line, no newline at the end */
    static const char only_bad[] = "\n  \r\n{\"id\": \"\"x\"}\n\t\n[1]";
    f = fmemopen((void *)only_bad, sizeof only_bad - 1, "rb");
    CHECK(f);
    CHECK(lpx_batch_input_read_stream(f, "only_bad", &in) == LPX_OK);
    fclose(f);
    CHECK(in.n_tasks == 0 && in.n_lines == 2 && in.n_rejects == 2);
    CHECK((r = reject_on(&in, 3)) && r->id == NULL && !strcmp(r->reason, "not valid JSON"));
    CHECK((r = reject_on(&in, 5)) && !strcmp(r->reason, "not a JSON object"));
    lpx_batch_input_free(&in);

    /* A rejected line's id is cut to 511 bytes, never inside a UTF-8 character:
     * {k ASCII bytes, a character, more ASCII} and the cut's length. */
    static const struct {
        int k;
        const char *ch;
        size_t want;
    } cuts[] = {
        {510, "\xc3\xa9", 510},         /* e-acute: byte 511 is its second byte */
        {509, "\xe2\x82\xac", 509},     /* euro sign: bytes 509..511 */
        {510, "\xe2\x82\xac", 510},     /* euro sign: bytes 510..512 */
        {508, "\xf0\x9f\x98\x80", 508}, /* an emoji: bytes 508..511 */
        {509, "\xc3\xa9", 511},         /* e-acute ends at byte 510: no cut inside */
    };
    enum { N_CUTS = sizeof cuts / sizeof cuts[0] };
    static char text[N_CUTS * 700], ids[N_CUTS][600];
    size_t len = 0;
    for (int i = 0; i < N_CUTS; i++) {
        memset(ids[i], 'a', (size_t)cuts[i].k);
        snprintf(ids[i] + cuts[i].k, sizeof ids[i] - (size_t)cuts[i].k, "%szzzz", cuts[i].ch);
        len += (size_t)snprintf(text + len, sizeof text - len, "{\"id\":\"%s\",\"prompt\":\"\"}\n",
                                ids[i]);
    }
    f = fmemopen(text, len, "rb");
    CHECK(f);
    CHECK(lpx_batch_input_read_stream(f, "cuts", &in) == LPX_OK);
    fclose(f);
    CHECK(in.n_tasks == 0 && in.n_rejects == N_CUTS);
    for (int i = 0; i < N_CUTS; i++) {
        r = reject_on(&in, i + 1);
        CHECK(r && r->id && !strcmp(r->reason, "prompt is empty"));
        CHECK(r && r->id && strlen(r->id) == cuts[i].want && !memcmp(r->id, ids[i], cuts[i].want));
    }
    lpx_batch_input_free(&in);

    /* roles as lpx serve takes them; a NUL escape (cJSON cut the string there) and
     * text after the object (cJSON ignored it) are errors of the line, with its id */
    static const char lenient[] =
        "{\"id\":\"fn\",\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}\n"
        "{\"id\":\"dev\",\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}]}\n"
        "{\"id\":\"nul\",\"prompt\":\"a\\u0000b\"}\n"
        "{\"id\":\"esc\",\"prompt\":\"a\\\\u0000b\"}\n"
        "{\"id\":\"tail\",\"prompt\":\"a\"}x\n"
        "{\"id\":\"sp\",\"prompt\":\"a\"} \r\n";
    f = fmemopen((void *)lenient, sizeof lenient - 1, "rb");
    CHECK(f);
    CHECK(lpx_batch_input_read_stream(f, "lenient", &in) == LPX_OK);
    fclose(f);
    CHECK(in.n_tasks == 3 && in.n_rejects == 3);
    CHECK((r = reject_on(&in, 1)) && r->id && !strcmp(r->id, "fn") &&
          !strcmp(r->reason, "messages[0] must be an object with a role of system, user, "
                             "assistant, tool or developer"));
    CHECK((r = reject_on(&in, 3)) && r->id && !strcmp(r->id, "nul") &&
          !strcmp(r->reason, "a string holds \\u0000 (a NUL character): not supported"));
    CHECK((r = reject_on(&in, 5)) && r->id && !strcmp(r->id, "tail") &&
          !strcmp(r->reason, "text after the JSON object (at byte 26)"));
    lpx_batch_input_free(&in);
    unlink(path);
    TEST_DONE();
}
