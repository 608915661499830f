#include "base/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t lpx_utf8_seq(const unsigned char *p, size_t n) {
    if (!n) return 0;
    if (p[0] < 0x80) return 1;
    size_t len = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
                 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
                 : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                                : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    /* Overlong 3/4-byte forms, UTF-16 surrogates, past U+10FFFF. */
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
        return 0;
    return len;
}

size_t lpx_utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] < 0x80 ? 1 : lpx_utf8_seq(p + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

int lpx_utf8_prefix(const char *s, size_t max) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strnlen(s, max + 4), i = 0;
    while (i < n && i < max) {
        size_t k = lpx_utf8_seq(p + i, n - i);
        if (!k) k = 1; /* an invalid byte is one "character" (replaced or escaped where written) */
        if (i + k > max) break;
        i += k;
    }
    return (int)i;
}

/* *s made valid (a new cJSON allocation when it was not); false when out of memory. */
static bool fix_string(char **s) {
    size_t n = strlen(*s), at = lpx_utf8_invalid_at(*s, n);
    if (at == n) return true;
    char *out = cJSON_malloc(3 * n + 1), *o = out; /* each bad byte: 3 bytes */
    if (!out) return false;
    const unsigned char *p = (const unsigned char *)*s;
    for (size_t i = 0; i < n;) {
        size_t k = lpx_utf8_seq(p + i, n - i);
        memcpy(o, k ? (const char *)p + i : "\xEF\xBF\xBD", k ? k : 3);
        o += k ? k : 3;
        i += k ? k : 1;
    }
    *o = '\0';
    cJSON_free(*s);
    *s = out;
    return true;
}

bool lpx_utf8_fix_json(cJSON *item) {
    for (; item; item = item->next) {
        /* a key cJSON holds as a constant (cJSON_AddItemToObjectCS) is ours, valid */
        if (item->string && !(item->type & cJSON_StringIsConst) && !fix_string(&item->string))
            return false;
        if (cJSON_IsString(item) && item->valuestring && !fix_string(&item->valuestring))
            return false;
        if (item->child && !lpx_utf8_fix_json(item->child)) return false;
    }
    return true;
}

void lpx_utf8_log_escape(const char *s, char *out, size_t cap) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), o = 0;
    for (size_t i = 0; i < n && o + 5 < cap;) {
        size_t k = p[i] >= 0x80 ? lpx_utf8_seq(p + i, n - i) : 0;
        if (k && o + k < cap) {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        } else if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') {
            out[o++] = (char)p[i++];
        } else {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02X", p[i++]);
        }
    }
    out[o < cap ? o : cap - 1] = '\0';
}
