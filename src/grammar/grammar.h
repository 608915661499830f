/* Structured outputs: a JSON Schema (the subset of docs/structured-outputs.md), or
 * "any JSON object", compiled into a grammar over bytes, and a matcher that follows
 * generated text byte by byte.
 *
 * The grammar is a set of rules, each a list of alternatives, each a sequence of
 * byte classes and references to rules (llama.cpp's GBNF model). A matcher state is
 * the set of stacks of positions that the text so far can be in (a pushdown automaton
 * run on all alternatives at once): the top of each stack is the byte class that comes
 * next, the entries below are where each enclosing rule goes on. Bounds keep a state
 * small and generation finite: at most LPX_GRAMMAR_MAX_DEPTH open JSON containers,
 * LPX_GRAMMAR_MAX_STACK entries a stack and LPX_GRAMMAR_MAX_STACKS stacks a state; a
 * path past a bound is dropped, so what the matcher accepts is always in the grammar.
 *
 * A compiled grammar is immutable and may be shared by threads; a matcher belongs to
 * one thread. Only base (and cJSON) below: token bytes come in as arrays (mask.h). */
#ifndef LPX_GRAMMAR_GRAMMAR_H
#define LPX_GRAMMAR_GRAMMAR_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LPX_GRAMMAR_MAX_DEPTH 32        /* open objects and arrays (non-empty ones) */
#define LPX_GRAMMAR_MAX_STACK 256       /* entries of one stack */
#define LPX_GRAMMAR_MAX_STACKS 64       /* stacks of one state (alternatives alive at once) */
#define LPX_GRAMMAR_MAX_INDENT 20       /* whitespace: none, one space, or a newline + this many */
#define LPX_GRAMMAR_MAX_REPEAT 4096     /* minLength/maxLength/minItems/maxItems, {m,n} bounds */
#define LPX_GRAMMAR_MAX_ELEMS (1 << 22) /* grammar size (elements of all alternatives) */

typedef struct lpx_grammar lpx_grammar;

/* Compiles the JSON Schema text json[0..len). path names the schema in messages
 * ("response_format.json_schema.schema"): an unsupported keyword or a bad value is
 * LPX_ERR_INVALID_ARG with "PATH.properties.age: keyword 'multipleOf' is not
 * supported" (the keyword's JSON path, then what is wrong). */
lpx_status lpx_grammar_from_schema(const char *json, size_t len, const char *path,
                                   lpx_grammar **out);
/* Tool calls in a model family's format (tool_calls.h, lpx_tools_grammar_text):
 * json[0..len) is {"format": "hermes" | "llama3", "functions": [{"name", "parameters":
 * a schema}, ...], "parallel": bool}. hermes: <tool_call>\n{"name": N, "arguments": A}
 * \n</tool_call>, one or (parallel) more joined by "\n"; llama3: {"name": N,
 * "parameters": A}, more joined by "; ". */
lpx_status lpx_grammar_tool_calls(const char *json, size_t len, lpx_grammar **out);
/* Any JSON object (response_format json_object). */
lpx_status lpx_grammar_json_object(lpx_grammar **out);
void lpx_grammar_free(lpx_grammar *g);
/* Rules and elements, for the benchmark's and tests' reports. */
void lpx_grammar_size(const lpx_grammar *g, size_t *n_rules, size_t *n_elems);

/* A matcher: where the text fed so far is in the grammar. */
typedef struct lpx_gmatch {
    const lpx_grammar *g;
    int32_t *cur; /* [n_cur] the state: stacks as (length, entries...) */
    size_t n_cur, cap_cur;
    int32_t *tmp; /* scratch of the same form */
    size_t cap_tmp;
} lpx_gmatch;

lpx_status lpx_gmatch_init(lpx_gmatch *m, const lpx_grammar *g);
void lpx_gmatch_free(lpx_gmatch *m);
/* Feeds p[0..n): true when the grammar allows those bytes here (the state moves on);
 * false leaves the state as it was. */
bool lpx_gmatch_feed(lpx_gmatch *m, const void *p, size_t n);
/* Whether the text so far is a whole document (the output may end). */
bool lpx_gmatch_can_end(const lpx_gmatch *m);
/* Whether no byte can follow (then the output can only end, or it is a dead end: the
 * bounds cut every path; can_end tells which). */
bool lpx_gmatch_no_next(const lpx_gmatch *m);
/* The bytes that may come next, as a 256-bit set. */
void lpx_gmatch_next_bytes(const lpx_gmatch *m, uint8_t set[32]);
/* The fewest bytes that complete the document from here (0 when it may end;
 * INT32_MAX when no path within the bounds is known). */
int32_t lpx_gmatch_min_remaining(const lpx_gmatch *m);

/* ---- internals shared by the files of src/grammar/ --------------------------- */

/* The state buffer of m (its stacks) and its length, for the mask cache's keys. */
static inline const int32_t *lpx_gmatch_state(const lpx_gmatch *m, size_t *n) {
    *n = m->n_cur;
    return m->cur;
}
/* Advances the state in[0..n_in) by byte b into *out (grown as needed); returns the
 * new length, 0 when b is not allowed (an empty state: no stack), -1 out of memory. */
int64_t lpx_grammar_step(const lpx_grammar *g, const int32_t *in, size_t n_in, uint8_t b,
                         int32_t **out, size_t *cap);
/* Whether any stack of the state can take b, without building the next state. */
bool lpx_grammar_state_takes(const lpx_grammar *g, const int32_t *st, size_t n, uint8_t b);
bool lpx_grammar_state_accepts(const int32_t *st, size_t n);

#endif
