/* JSON text as bytes (json_text.h). */
#include "base/json_text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

size_t lpx_json_nul_escape(const char *s, size_t n, size_t from) {
    /* a backslash occurs only in strings, and each escape is skipped whole */
    for (size_t i = from; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && n - i >= 6 && !memcmp(s + i + 2, "0000", 4)) return i;
        i++;
    }
    return n;
}

void lpx_json_put_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20 || c == 0x7F)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

long lpx_json_parse_string(const char *s, size_t n, char *out) {
    size_t i = 0, o = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    if (i >= n || s[i++] != '"') return -1;
    while (i < n && s[i] != '"') {
        unsigned char c = (unsigned char)s[i++];
        if (c < 0x20) return -1;
        if (c != '\\') {
            out[o++] = (char)c;
            continue;
        }
        if (i >= n) return -1;
        char e = s[i++];
        if (e != 'u') {
            char c2;
            switch (e) {
            case '"':
                c2 = '"';
                break;
            case '\\':
                c2 = '\\';
                break;
            case '/':
                c2 = '/';
                break;
            case 'b':
                c2 = '\b';
                break;
            case 'f':
                c2 = '\f';
                break;
            case 'n':
                c2 = '\n';
                break;
            case 'r':
                c2 = '\r';
                break;
            case 't':
                c2 = '\t';
                break;
            default:
                return -1;
            }
            out[o++] = c2;
            continue;
        }
        uint32_t cp = 0;
        for (int k = 0; k < 4; k++) {
            int h = i < n ? hexval(s[i++]) : -1;
            if (h < 0) return -1;
            cp = cp << 4 | (uint32_t)h;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u') {
            uint32_t lo = 0;
            int ok = 1;
            for (int k = 0; k < 4; k++) {
                int h = hexval(s[i + 2 + k]);
                ok &= h >= 0;
                lo = lo << 4 | (uint32_t)(h < 0 ? 0 : h);
            }
            if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
        }
        if (cp < 0x80)
            out[o++] = (char)cp;
        else if (cp < 0x800) {
            out[o++] = (char)(0xC0 | cp >> 6);
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[o++] = (char)(0xE0 | cp >> 12);
            out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[o++] = (char)(0xF0 | cp >> 18);
            out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    if (i >= n) return -1;
    return (long)o;
}
