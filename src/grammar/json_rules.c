/* The rules of JSON text: whitespace, string characters, numbers, any value. */
#include "grammar/grammar_int.h"

#include <string.h>

static int32_t range_class(lpx_grammar *g, const char *ranges) {
    uint8_t set[32] = {0};
    for (const unsigned char *p = (const unsigned char *)ranges; p[0]; p += 2)
        for (unsigned b = p[0]; b <= p[1]; b++)
            g_set_bit(set, b);
    return g_class(g, set);
}

/* Nothing, one space, or a newline and up to LPX_GRAMMAR_MAX_INDENT spaces or tabs:
 * bounded, so that a model cannot loop on whitespace (llama.cpp's choice). */
int32_t gj_ws(gjson *j) {
    if (j->ws) return j->ws - 1;
    lpx_grammar *g = j->g;
    gseq one = {0};
    seq_cls(&one, range_class(g, "  \t\t"));
    int32_t ind = g_rule_of(g, &one, 1);
    gseq alts[3] = {{0}, {0}, {0}};
    seq_byte(&alts[1], ' ');
    seq_byte(&alts[2], '\n');
    seq_repeat(g, &alts[2], ind, 0, LPX_GRAMMAR_MAX_INDENT, NULL);
    j->ws = g_rule_of(g, alts, 3) + 1;
    return j->ws - 1;
}

/* One character of a JSON string: printable ASCII but " and \, an escape (\u without
 * the surrogates D800-DFFF), or a well-formed UTF-8 sequence. */
int32_t gj_char(gjson *j) {
    if (j->chr) return j->chr - 1;
    lpx_grammar *g = j->g;
    const int32_t c80 = range_class(g, "\x80\xbf"), hex = range_class(g, "09afAF");
    gseq a[13] = {{0}};
    int n = 0;
    seq_cls(&a[n++], range_class(g, " !#[]\x7f"));
    seq_byte(&a[n], '\\');
    seq_cls(&a[n++], range_class(g, "\"\"\\\\//bbffnnrrtt"));
    seq_lit(&a[n], "\\u", 2);
    seq_cls(&a[n], range_class(g, "09acACefEF"));
    for (int k = 0; k < 3; k++)
        seq_cls(&a[n], hex);
    n++;
    seq_lit(&a[n], "\\u", 2);
    seq_cls(&a[n], range_class(g, "ddDD"));
    seq_cls(&a[n], range_class(g, "07"));
    seq_cls(&a[n], hex);
    seq_cls(&a[n++], hex);
    static const struct {
        const char *lead, *second;
        int more;
    } utf8[] = {{"\xc2\xdf", "\x80\xbf", 0}, {"\xe0\xe0", "\xa0\xbf", 1},
                {"\xe1\xec", "\x80\xbf", 1}, {"\xed\xed", "\x80\x9f", 1},
                {"\xee\xef", "\x80\xbf", 1}, {"\xf0\xf0", "\x90\xbf", 2},
                {"\xf1\xf3", "\x80\xbf", 2}, {"\xf4\xf4", "\x80\x8f", 2}};
    for (size_t u = 0; u < sizeof utf8 / sizeof *utf8; u++, n++) {
        seq_cls(&a[n], range_class(g, utf8[u].lead));
        seq_cls(&a[n], range_class(g, utf8[u].second));
        for (int k = 0; k < utf8[u].more; k++)
            seq_cls(&a[n], c80);
    }
    j->chr = g_rule_of(g, a, (size_t)n) + 1;
    return j->chr - 1;
}

int32_t gj_string(gjson *j) {
    if (j->str) return j->str - 1;
    int32_t ch = gj_char(j);
    gseq s = {0};
    seq_byte(&s, '"');
    seq_repeat(j->g, &s, ch, 0, -1, NULL);
    seq_byte(&s, '"');
    j->str = g_rule_of(j->g, &s, 1) + 1;
    return j->str - 1;
}

/* -?(0|[1-9][0-9]{0,15}): at most 16 digits, so that a number ends. */
static int32_t int_part(gjson *j, int32_t digit) {
    lpx_grammar *g = j->g;
    gseq a[2] = {{0}, {0}};
    seq_byte(&a[0], '0');
    seq_cls(&a[1], range_class(g, "19"));
    seq_repeat(g, &a[1], digit, 0, 15, NULL);
    int32_t uint = g_rule_of(g, a, 2);
    gseq sign[2] = {{0}, {0}};
    seq_byte(&sign[1], '-');
    gseq s = {0};
    seq_ref(&s, g_rule_of(g, sign, 2));
    seq_ref(&s, uint);
    return g_rule_of(g, &s, 1);
}

static int32_t digit_rule(gjson *j) {
    gseq d = {0};
    seq_cls(&d, range_class(j->g, "09"));
    return g_rule_of(j->g, &d, 1);
}

int32_t gj_integer(gjson *j) {
    if (!j->integer) j->integer = int_part(j, digit_rule(j)) + 1;
    return j->integer - 1;
}

/* An integer part, then an optional fraction of 1..16 digits and an optional exponent
 * of 1..3 digits. */
int32_t gj_number(gjson *j) {
    if (j->num) return j->num - 1;
    lpx_grammar *g = j->g;
    int32_t digit = digit_rule(j);
    gseq frac[2] = {{0}, {0}};
    seq_byte(&frac[1], '.');
    seq_repeat(g, &frac[1], digit, 1, 16, NULL);
    gseq sg[3] = {{0}, {0}, {0}};
    seq_byte(&sg[1], '+');
    seq_byte(&sg[2], '-');
    int32_t sign = g_rule_of(g, sg, 3);
    gseq ex[2] = {{0}, {0}};
    seq_cls(&ex[1], range_class(g, "eeEE"));
    seq_ref(&ex[1], sign);
    seq_repeat(g, &ex[1], digit, 1, 3, NULL);
    gseq s = {0};
    seq_ref(&s, gj_integer(j));
    seq_ref(&s, g_rule_of(g, frac, 2));
    seq_ref(&s, g_rule_of(g, ex, 2));
    j->num = g_rule_of(g, &s, 1) + 1;
    return j->num - 1;
}

/* open ws close | open ws LIST close, LIST entered as a nesting frame. */
static void container(gjson *j, int32_t r, char open, char close, int32_t list) {
    gseq a[2] = {{0}, {0}};
    for (int k = 0; k < 2; k++) {
        seq_byte(&a[k], (uint8_t)open);
        seq_ref(&a[k], gj_ws(j));
    }
    seq_push(&a[1], GE_REF, list, true);
    seq_byte(&a[0], (uint8_t)close);
    seq_byte(&a[1], (uint8_t)close);
    g_set(j->g, r, a, 2);
}

static void make_any(gjson *j) {
    lpx_grammar *g = j->g;
    int32_t val = g_rule(g), obj = g_rule(g), arr = g_rule(g);
    j->any = val + 1;
    j->obj_any = obj + 1;
    j->arr_any = arr + 1;
    int32_t ws = gj_ws(j), str = gj_string(j);
    gseq m = {0}; /* "key" ws : ws value ws */
    seq_ref(&m, str);
    seq_ref(&m, ws);
    seq_byte(&m, ':');
    seq_ref(&m, ws);
    seq_ref(&m, val);
    seq_ref(&m, ws);
    int32_t member = g_rule_of(g, &m, 1);
    gseq sep = {0};
    seq_byte(&sep, ',');
    seq_ref(&sep, ws);
    gseq members = {0};
    seq_repeat(g, &members, member, 1, -1, &sep);
    container(j, obj, '{', '}', g_rule_of(g, &members, 1));
    gseq it = {0};
    seq_ref(&it, val);
    seq_ref(&it, ws);
    int32_t item = g_rule_of(g, &it, 1);
    gseq items = {0};
    seq_repeat(g, &items, item, 1, -1, &sep);
    container(j, arr, '[', ']', g_rule_of(g, &items, 1));
    seq_free(&sep);
    gseq v[7] = {{0}};
    seq_ref(&v[0], obj);
    seq_ref(&v[1], arr);
    seq_ref(&v[2], str);
    seq_ref(&v[3], gj_number(j));
    seq_lit(&v[4], "true", 4);
    seq_lit(&v[5], "false", 5);
    seq_lit(&v[6], "null", 4);
    g_set(g, val, v, 7);
}

int32_t gj_any(gjson *j) {
    if (!j->any) make_any(j);
    return j->any - 1;
}

int32_t gj_object_any(gjson *j) {
    if (!j->any) make_any(j);
    return j->obj_any - 1;
}

int32_t gj_array_any(gjson *j) {
    if (!j->any) make_any(j);
    return j->arr_any - 1;
}
