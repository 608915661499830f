/* The grammar's representation and its builder, shared by grammar.c (rules and the
 * matcher), schema.c (JSON Schema to rules) and regex.c (patterns to rules). */
#ifndef LPX_GRAMMAR_GRAMMAR_INT_H
#define LPX_GRAMMAR_GRAMMAR_INT_H

#include "grammar/grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { GE_END = 0, GE_CLASS = 1, GE_REF = 2 };

/* One element of an alternative. A REF with nest set enters a JSON container: the
 * matcher counts those frames against LPX_GRAMMAR_MAX_DEPTH. */
typedef struct gelem {
    uint8_t kind;
    uint8_t nest;
    int32_t arg; /* CLASS: class index; REF: rule id */
} gelem;

typedef struct grule {
    int32_t alt0, n_alt; /* its alternatives' start positions: alts[alt0 .. +n_alt) */
} grule;

struct lpx_grammar {
    gelem *el; /* [n_el] every alternative's elements, each ended by GE_END */
    size_t n_el, cap_el;
    uint8_t (*cls)[32]; /* [n_cls] byte sets; class b < 256 is the byte b alone */
    size_t n_cls, cap_cls;
    grule *rule; /* [n_rule] */
    size_t n_rule, cap_rule;
    int32_t *alts; /* [n_alts] */
    size_t n_alts, cap_alts;
    int32_t root;  /* the document's rule */
    int32_t start; /* position of the start element (a REF to root, then END) */
    int32_t *rest; /* [n_el] fewest bytes from this position to the end of its alternative */
    bool oom;      /* the builder ran out of memory or past LPX_GRAMMAR_MAX_ELEMS */
};

/* An alternative being built. */
typedef struct gseq {
    gelem *v;
    size_t n, cap;
    bool oom;
} gseq;

lpx_grammar *g_new(void);
/* A rule with no alternatives yet (so that rules can refer to it before it is set). */
int32_t g_rule(lpx_grammar *g);
/* Sets rule r's alternatives (each alternative's seq is consumed and freed). */
void g_set(lpx_grammar *g, int32_t r, gseq *alts, size_t n);
/* A new rule with these alternatives. */
int32_t g_rule_of(lpx_grammar *g, gseq *alts, size_t n);
/* Finishes: minimal lengths for lpx_gmatch_min_remaining; false when out of memory. */
bool g_finish(lpx_grammar *g);

int32_t g_class(lpx_grammar *g, const uint8_t set[32]);
static inline void g_set_bit(uint8_t set[32], unsigned b) {
    set[b >> 3] |= (uint8_t)(1u << (b & 7));
}
static inline bool g_has_bit(const uint8_t set[32], unsigned b) {
    return set[b >> 3] >> (b & 7) & 1;
}

void seq_push(gseq *s, uint8_t kind, int32_t arg, bool nest);
static inline void seq_byte(gseq *s, uint8_t b) {
    seq_push(s, GE_CLASS, b, false);
}
static inline void seq_cls(gseq *s, int32_t c) {
    seq_push(s, GE_CLASS, c, false);
}
static inline void seq_ref(gseq *s, int32_t r) {
    seq_push(s, GE_REF, r, false);
}
void seq_lit(gseq *s, const char *text, size_t n);
void seq_free(gseq *s);
/* Appends item repeated min..max times (max < 0: no bound), sep (may be NULL) between
 * two items; the helper rules are made in g. */
void seq_repeat(lpx_grammar *g, gseq *s, int32_t item, int64_t min, int64_t max, const gseq *sep);

/* Rules of JSON text shared by schema.c and regex.c, made on first use. */
typedef struct gjson {
    lpx_grammar *g;
    int32_t ws, chr, str, num, integer, any, obj_any, arr_any;
} gjson;

int32_t gj_ws(gjson *j);
int32_t gj_char(gjson *j); /* one character of a JSON string (raw UTF-8 or an escape) */
int32_t gj_string(gjson *j);
int32_t gj_number(gjson *j);
int32_t gj_integer(gjson *j);
int32_t gj_any(gjson *j); /* any JSON value */
int32_t gj_object_any(gjson *j);
int32_t gj_array_any(gjson *j);

/* Compiles pattern (a regex of the documented subset) into a rule matching the JSON
 * text of the strings' contents (without the quotes) that the whole pattern matches
 * and that have min..max characters (max -1: no bound). Returns the rule, or -1 with
 * a message in err. */
int32_t g_regex(gjson *j, const char *pattern, int64_t min, int64_t max, char *err, size_t cap);

#endif
