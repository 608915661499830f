/* base/utf8: sequences checked as RFC 3629 says, invalid bytes replaced in every string
 * of a cJSON tree (keys too), log text escaped, prefixes cut on characters. */
#include "base/utf8.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static size_t seq(const char *s) {
    return lpx_utf8_seq((const unsigned char *)s, strlen(s));
}

int main(void) {
    CHECK(seq("a") == 1 && seq("\xc3\xa9") == 2 && seq("\xe2\x82\xac") == 3);
    CHECK(seq("\xf0\x9f\x98\x80") == 4);
    CHECK(seq("\xc0\xaf") == 0);         /* overlong '/' */
    CHECK(seq("\xe0\x80\xaf") == 0);     /* overlong, 3 bytes */
    CHECK(seq("\xed\xa0\x80") == 0);     /* a UTF-16 surrogate */
    CHECK(seq("\xf4\x90\x80\x80") == 0); /* past U+10FFFF */
    CHECK(seq("\xc3") == 0 && seq("\xe2\x82") == 0 && seq("\x80") == 0 && seq("\xff") == 0);
    CHECK(lpx_utf8_invalid_at("ab\xc3\xa9z", 6) == 6);
    CHECK(lpx_utf8_invalid_at("ab\xc3(z", 5) == 2);
    CHECK(lpx_utf8_invalid_at("ab\xc3", 3) == 2); /* cut at the end */

    /* "%.*s" with lpx_utf8_prefix never ends in half a character */
    CHECK(lpx_utf8_prefix("\xc3\xa9\xc3\xa9", 3) == 2);
    CHECK(lpx_utf8_prefix("abc", 10) == 3 && lpx_utf8_prefix("a\xffz", 2) == 2);

    cJSON *o = cJSON_Parse(
        "{\"id\":\"x\xff\",\"k\xc3(\":[\"ok\xc3\xa9\",{\"deep\":\"\xe2\x82\"}],\"n\":1}");
    CHECK(o != NULL);
    CHECK(lpx_utf8_fix_json(o));
    char *t = cJSON_PrintUnformatted(o);
    CHECK(t && !strcmp(t, "{\"id\":\"x\xef\xbf\xbd\",\"k\xef\xbf\xbd(\":[\"ok\xc3\xa9\",{\"deep\":"
                          "\"\xef\xbf\xbd\xef\xbf\xbd\"}],\"n\":1}"));
    CHECK(t && lpx_utf8_invalid_at(t, strlen(t)) == strlen(t));
    free(t);
    cJSON_Delete(o);

    char out[64];
    lpx_utf8_log_escape("GET /a\nfake line\x1b[31m\\ \xc3\xa9\xff", out, sizeof out);
    CHECK(!strcmp(out, "GET /a\\x0Afake line\\x1B[31m\\x5C \xc3\xa9\\xFF"));
    lpx_utf8_log_escape("abcdefghij", out, 8); /* cut to what fits */
    CHECK(strlen(out) < 8 && !strncmp(out, "abc", 3));
    TEST_DONE();
}
