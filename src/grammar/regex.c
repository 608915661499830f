/* String patterns (a regex subset: docs/structured-outputs.md) into rules over the
 * JSON text of a string's contents. The whole string matches the pattern (as if it
 * were ^...$), which also satisfies JSON Schema's unanchored search. */
#include "grammar/grammar_int.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct rx {
    gjson *j;
    const char *p, *end;
    char *err;
    size_t cap;
    bool failed;
} rx;

static int32_t rx_fail(rx *r, const char *what) {
    if (!r->failed) snprintf(r->err, r->cap, "%s", what);
    r->failed = true;
    return -1;
}

/* A character of set (ASCII, bits 0..127) as JSON string text: printable ones as
 * themselves, " and \ and the control characters \t \n \r \f as their escapes. */
static int32_t char_rule(rx *r, const uint8_t set[32]) {
    lpx_grammar *g = r->j->g;
    uint8_t plain[32] = {0};
    bool any_plain = false;
    for (unsigned b = 0x20; b < 0x80; b++)
        if (g_has_bit(set, b) && b != '"' && b != '\\') g_set_bit(plain, b), any_plain = true;
    gseq alts[7] = {{0}};
    size_t n = 0;
    if (any_plain) seq_cls(&alts[n++], g_class(g, plain));
    static const char esc[][2] = {{'"', '"'},  {'\\', '\\'}, {'\n', 'n'},
                                  {'\t', 't'}, {'\r', 'r'},  {'\f', 'f'}};
    for (size_t i = 0; i < sizeof esc / sizeof *esc; i++)
        if (g_has_bit(set, (unsigned char)esc[i][0])) {
            seq_byte(&alts[n], '\\');
            seq_byte(&alts[n++], (uint8_t)esc[i][1]);
        }
    if (n == 0) return rx_fail(r, "a character class that matches no character");
    return g_rule_of(g, alts, n);
}

static void set_range(uint8_t set[32], unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++)
        g_set_bit(set, b);
}

/* \d \w \s and their negations (within printable ASCII) into set; false: not one. */
static bool class_escape(char c, uint8_t set[32]) {
    uint8_t s[32] = {0};
    char lower = (char)(c | 0x20);
    if (lower == 'd')
        set_range(s, '0', '9');
    else if (lower == 'w')
        set_range(s, '0', '9'), set_range(s, 'a', 'z'), set_range(s, 'A', 'Z'), g_set_bit(s, '_');
    else if (lower == 's')
        g_set_bit(s, ' '), g_set_bit(s, '\t'), g_set_bit(s, '\n'), g_set_bit(s, '\r'),
            g_set_bit(s, '\f');
    else
        return false;
    bool neg = c != lower;
    for (unsigned b = 0; b < 128; b++)
        if (neg ? (b >= 0x20 && b < 0x7f && !g_has_bit(s, b)) : g_has_bit(s, b)) g_set_bit(set, b);
    return true;
}

/* The character of a simple escape \c (a punctuation mark, or n t r f), -1: none. */
static int escape_char(char c) {
    switch (c) {
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    }
    if (c > 0x20 && c < 0x7f && !((c | 0x20) >= 'a' && (c | 0x20) <= 'z') &&
        !(c >= '0' && c <= '9'))
        return c;
    return -1;
}

static int32_t class_rule(rx *r) {
    uint8_t set[32] = {0};
    bool neg = r->p < r->end && *r->p == '^';
    if (neg) r->p++;
    bool first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        int lo;
        if (*r->p == '\\') {
            if (r->p + 1 >= r->end) return rx_fail(r, "a pattern ends in a backslash");
            char e = r->p[1];
            r->p += 2;
            if ((e | 0x20) == 'd' || (e | 0x20) == 'w' || (e | 0x20) == 's') {
                if (e >= 'A' && e <= 'Z')
                    return rx_fail(r, "\\D \\W \\S inside a class are not supported");
                class_escape(e, set);
                continue;
            }
            if ((lo = escape_char(e)) < 0)
                return rx_fail(r, "an escape in a class is not supported");
        } else {
            lo = (unsigned char)*r->p++;
        }
        if (lo >= 0x80) return rx_fail(r, "non-ASCII characters in a class are not supported");
        int hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                if (r->p + 1 >= r->end || (hi = escape_char(r->p[1])) < 0)
                    return rx_fail(r, "a class range ends in an unsupported escape");
                r->p += 2;
            } else {
                hi = (unsigned char)*r->p++;
            }
            if (hi >= 0x80) return rx_fail(r, "non-ASCII characters in a class are not supported");
            if (hi < lo) return rx_fail(r, "a class range is reversed");
        }
        set_range(set, (unsigned)lo, (unsigned)hi);
    }
    if (r->p >= r->end) return rx_fail(r, "a '[' class is not closed");
    r->p++;
    if (neg) {
        uint8_t n[32] = {0};
        for (unsigned b = 0x20; b < 0x7f; b++)
            if (!g_has_bit(set, b)) g_set_bit(n, b);
        memcpy(set, n, 32);
    }
    return char_rule(r, set);
}

static int32_t rx_alt(rx *r);

static int32_t atom(rx *r) {
    char c = *r->p;
    uint8_t set[32] = {0};
    if (c == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':')
                r->p += 2;
            else
                return rx_fail(r, "lookarounds and named groups are not supported");
        }
        int32_t g = rx_alt(r);
        if (g < 0) return -1;
        if (r->p >= r->end || *r->p != ')') return rx_fail(r, "a '(' group is not closed");
        r->p++;
        return g;
    }
    if (c == '[') {
        r->p++;
        return class_rule(r);
    }
    if (c == '.') {
        r->p++;
        set_range(set, 0x20, 0x7e);
        g_set_bit(set, '\t');
        return char_rule(r, set);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return rx_fail(r, "a quantifier has nothing to repeat");
    if (c == '^' || c == '$')
        return rx_fail(r, "anchors are supported only at the start (^) and the end ($)");
    if (c == '\\') {
        if (r->p + 1 >= r->end) return rx_fail(r, "a pattern ends in a backslash");
        char e = r->p[1];
        r->p += 2;
        if (class_escape(e, set)) return char_rule(r, set);
        int ch = escape_char(e);
        if (ch < 0)
            return rx_fail(r, "an escape is not supported (\\d \\w \\s \\D \\W \\S, \\n \\t \\r "
                              "\\f and escaped punctuation are)");
        g_set_bit(set, (unsigned)ch);
        return char_rule(r, set);
    }
    unsigned char b = (unsigned char)c;
    if (b < 0x80) {
        if (b < 0x20 && b != '\n' && b != '\t' && b != '\r' && b != '\f')
            return rx_fail(r, "a control character in a pattern is not supported");
        r->p++;
        g_set_bit(set, b);
        return char_rule(r, set);
    }
    /* A UTF-8 character: its bytes, which are its JSON text. */
    int len = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;
    if (len == 0 || r->p + len > r->end) return rx_fail(r, "a pattern is not valid UTF-8");
    gseq s = {0};
    seq_lit(&s, r->p, (size_t)len);
    r->p += len;
    return g_rule_of(r->j->g, &s, 1);
}

/* A decimal number of a {m,n} quantifier; -1 when there is none. */
static int64_t number(rx *r) {
    int64_t v = -1;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (*r->p++ - '0');
        if (v > 1000000) v = 1000000;
    }
    return v;
}

static bool quantifier(rx *r, int64_t *min, int64_t *max) {
    char c = *r->p;
    if (c == '?' || c == '*' || c == '+') {
        r->p++;
        *min = c == '+';
        *max = c == '?' ? 1 : -1;
    } else if (c == '{') {
        r->p++;
        *min = number(r);
        *max = *min;
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            *max = number(r);
        }
        if (*min < 0 || r->p >= r->end || *r->p != '}')
            return rx_fail(r, "'{' must begin a {m}, {m,} or {m,n} quantifier (escape a brace "
                              "as \\{)"),
                   false;
        r->p++;
        if (*max >= 0 && *max < *min) return rx_fail(r, "a {m,n} quantifier has n < m"), false;
        if (*min > LPX_GRAMMAR_MAX_REPEAT || *max > LPX_GRAMMAR_MAX_REPEAT)
            return rx_fail(r, "a {m,n} quantifier above 4096 is not supported"), false;
    } else {
        return false;
    }
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: the same strings */
    if (r->p < r->end && (*r->p == '+' || *r->p == '*' || *r->p == '{'))
        return rx_fail(r, "a quantifier after a quantifier is not supported"), false;
    return true;
}

static int32_t rx_alt(rx *r) {
    gseq alts[64] = {{0}};
    size_t n = 1;
    while (!r->failed && r->p < r->end && *r->p != ')') {
        if (*r->p == '|') {
            r->p++;
            if (n == 64) rx_fail(r, "more than 64 alternatives in a group are not supported");
            n++;
            continue;
        }
        int32_t a = atom(r);
        if (a < 0) break;
        int64_t min, max;
        if (r->p < r->end && quantifier(r, &min, &max))
            seq_repeat(r->j->g, &alts[n - 1], a, min, max, NULL);
        else if (!r->failed)
            seq_ref(&alts[n - 1], a);
    }
    if (r->failed) {
        for (size_t i = 0; i < n; i++)
            seq_free(&alts[i]);
        return -1;
    }
    return g_rule_of(r->j->g, alts, n);
}

int32_t g_regex(gjson *j, const char *pattern, char *err, size_t cap) {
    rx r = {.j = j, .p = pattern, .end = pattern + strlen(pattern), .err = err, .cap = cap};
    if (r.p < r.end && *r.p == '^') r.p++;
    if (r.end > r.p && r.end[-1] == '$') {
        size_t bs = 0; /* backslashes before the $: an odd run escapes it */
        while (r.end - 1 - bs > r.p && r.end[-2 - (ptrdiff_t)bs] == '\\')
            bs++;
        if (bs % 2 == 0) r.end--;
    }
    int32_t g = rx_alt(&r);
    if (g >= 0 && r.p < r.end) return rx_fail(&r, "a ')' has no '('");
    return g;
}
