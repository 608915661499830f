/* Tool calls (OpenAI's tools, tool_choice and parallel_tool_calls on chat requests),
 * shared by serve and batch so that a body means the same in either:
 *   - the request's tools checked (a bad one names its field), and the chat messages
 *     normalised for the chat template (tool_calls' arguments as objects, as the
 *     templates expect);
 *   - the call format of a model family, read from its chat template;
 *   - the grammar text that forces a call (tool_choice "required" or a named function);
 *   - the parser that splits generated text into content and calls, byte by byte, so
 *     that a stream and a whole response split the same text the same way.
 * docs/server.md "Tool calls" says what is taken and how each format is parsed. */
#ifndef LPX_GRAMMAR_TOOL_CALLS_H
#define LPX_GRAMMAR_TOOL_CALLS_H

#include "lpx.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define LPX_TOOLS_MAX 128 /* functions in one request */

typedef enum lpx_tool_format {
    LPX_TOOLS_NONE = 0,     /* the template renders no tools */
    LPX_TOOLS_HERMES = 1,   /* <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call> (Qwen) */
    LPX_TOOLS_LLAMA3 = 2,   /* {"name": N, "parameters": {...}} at the start (Llama 3.1-3.3) */
    LPX_TOOLS_PYTHONIC = 3, /* [f(a=1, b="x"), g()] at the start (vLLM's Llama 3.2 template) */
    LPX_TOOLS_MISTRAL = 4,  /* [TOOL_CALLS] [{"name": N, "arguments": {...}}] (Mistral v0.3) */
} lpx_tool_format;

/* The format a chat template asks its model for (NULL: none). */
lpx_tool_format lpx_tool_format_of(const char *chat_template);
/* "hermes", "llama3", "pythonic", "mistral", "none" */
const char *lpx_tool_format_name(lpx_tool_format f);
/* The id of call i of a response whose calls' ids begin with prefix (unique within a
 * run: the caller's): prefix and i in hex; for Mistral, whose template takes only ids
 * of 9 letters and digits, 9 of them derived from the two. */
void lpx_tool_call_id(lpx_tool_format f, const char *prefix, size_t i, char *out, size_t cap);

typedef enum lpx_tool_choice {
    LPX_TOOL_CHOICE_NONE = 0,     /* tools shown to the model, its output left as content */
    LPX_TOOL_CHOICE_AUTO = 1,     /* free generation, calls parsed out of it */
    LPX_TOOL_CHOICE_REQUIRED = 2, /* forced: one call (or more with parallel_tool_calls) */
    LPX_TOOL_CHOICE_NAMED = 3,    /* forced: one call of the named function */
} lpx_tool_choice;

typedef struct lpx_tools {
    char *tools_json; /* the "tools" list (compact JSON), NULL when none were given */
    int n_tools;
    lpx_tool_choice choice;
    int named;     /* LPX_TOOL_CHOICE_NAMED: its index in tools */
    bool parallel; /* parallel_tool_calls (default true) */
} lpx_tools;

/* Reads tools, tool_choice and parallel_tool_calls of a chat body. False with the
 * message in msg and the field to blame in *param ("tools", "tool_choice", ...): a
 * tool that is not {"type": "function", "function": {"name", "description",
 * "parameters", "strict"}}, a name outside [A-Za-z0-9_-]{1,64} or given twice,
 * parameters outside the JSON Schema subset (its path named), a tool_choice naming no
 * tool, "required" or a name without tools. t is then freed. */
bool lpx_tools_parse(const cJSON *body, lpx_tools *t, char *msg, size_t cap, const char **param);
void lpx_tools_free(lpx_tools *t);
/* Whether the tools of t can be served in format f: false with the message (the 400 of
 * param "tools" or "tool_choice", *param says which) for tools with a template that has
 * no format, and for a forced call (tool_choice "required" or a named function) in the
 * pythonic format, which has no forcing grammar. */
bool lpx_tools_check_format(const lpx_tools *t, lpx_tool_format f, char *msg, size_t cap,
                            const char **param);
/* Whether the output is parsed for calls (tools given and tool_choice not "none"). */
bool lpx_tools_parsed(const lpx_tools *t);
/* {"tools": [...]} for the chat template (malloc'd), NULL when no tools or out of memory. */
char *lpx_tools_template_vars(const lpx_tools *t);
/* The text of the grammar that forces the calls of tool_choice "required" or a named
 * function in format f (malloc'd; lpx_request.json_schema of LPX_OUTPUT_TOOL_CALLS), NULL
 * for the other choices or out of memory. */
char *lpx_tools_grammar_text(const lpx_tools *t, lpx_tool_format f);

/* The chat messages (a checked "messages" list) as the chat template takes them
 * (malloc'd JSON): roles as lpx_chat_role names them, content text (text parts joined;
 * null when absent), an assistant's tool_calls with each function's fields in the order
 * sent and its arguments as an object (the JSON string OpenAI sends, parsed, as
 * transformers users pass it), and tool_call_id / name as sent. False with the message
 * in msg for a bad tool_calls. */
bool lpx_chat_messages_json(const cJSON *messages, char **out, char *msg, size_t cap);

/* ---- the parser --------------------------------------------------------------- */

/* What a parse of free output (tool_choice "auto") keeps, as vLLM's parsers do in their
 * formats, plus two checks of the request: a call whose name is not one of the tools is
 * no call (its text stays content: vLLM passes it on as a call, which a client cannot
 * dispatch), and with parallel_tool_calls false only the first call is kept (later
 * ones are dropped, neither calls nor content). */
typedef struct lpx_tool_rules {
    lpx_tool_format f; /* LPX_TOOLS_NONE: the output is not parsed */
    char *names;       /* each tool's name and its '\0', then one more '\0'; NULL: any name */
    bool single;       /* parallel_tool_calls false */
} lpx_tool_rules;

/* The rules of t for output in format f (f NONE when t's output is not parsed: no tools,
 * or tool_choice "none"). False when out of memory. */
bool lpx_tool_rules_of(const lpx_tools *t, lpx_tool_format f, lpx_tool_rules *out);
void lpx_tool_rules_free(lpx_tool_rules *r);
/* Rules that take any name and any number of calls (the format alone). */
static inline lpx_tool_rules lpx_tool_rules_any(lpx_tool_format f) {
    lpx_tool_rules r = {.f = f};
    return r;
}

typedef struct lpx_tool_buf {
    char *p;
    size_t n, cap;
} lpx_tool_buf;

typedef struct lpx_tool_call {
    char *name;        /* the function's name (decoded JSON string) */
    lpx_tool_buf args; /* the arguments' JSON text as generated */
} lpx_tool_call;

/* Feed it the output text in any pieces; what it has decided is in content (text
 * outside calls) and calls, which only grow, so a stream sends what is new since its
 * last look. Whitespace next to calls: where calls stand between two pieces of content,
 * the whitespace before them (else the one after) joins the pieces; at the start or end
 * of the content it is dropped. */
typedef struct lpx_tool_parser {
    lpx_tool_format f;
    const lpx_tool_rules *rules; /* NULL: any name, any number of calls */
    lpx_tool_buf content;
    lpx_tool_call *calls; /* [n_calls] */
    size_t n_calls, cap_calls;
    /* internal state */
    int state, head, tag_at;
    lpx_tool_buf hold;  /* bytes not yet known to be content or markup */
    lpx_tool_buf ws;    /* whitespace held back: content, unless a call is next to it */
    lpx_tool_buf gap;   /* the whitespace before the calls since the last content */
    lpx_tool_buf token; /* the header's string being read */
    char *name;         /* the header's name, once read */
    lpx_tool_call late; /* a call read before its name ("arguments" first), or dropped */
    lpx_tool_buf *args; /* where the arguments being read go */
    int depth;
    char quote; /* pythonic: the quote of the string being read, 0 outside strings */
    bool in_str, esc, prim, after_call, args_first, oom;
} lpx_tool_parser;

/* rules (may be NULL) must outlive the parser. */
void lpx_tool_parser_init(lpx_tool_parser *p, const lpx_tool_rules *rules);
void lpx_tool_parser_free(lpx_tool_parser *p);
/* False when memory ran out (the parser stops taking text). */
bool lpx_tool_parser_feed(lpx_tool_parser *p, const char *s, size_t n);
/* The end of the output: held text becomes content, a call cut short keeps what it has. */
bool lpx_tool_parser_finish(lpx_tool_parser *p);

/* The assistant message of output text[0..n) parsed by rules: {"role": "assistant",
 * "content": text outside calls or null, "tool_calls": [{"id": lpx_tool_call_id of
 * id_prefix and the call's index, "type": "function", "function": {"name",
 * "arguments"}}]} (no tool_calls when none); *n_calls how many. NULL when memory ran
 * out. */
cJSON *lpx_tool_message(const lpx_tool_rules *rules, const char *text, size_t n,
                        const char *id_prefix, size_t *n_calls);

#endif
