/* JSON text as bytes, where cJSON would lose some: where a \u0000 escape is (cJSON turns
 * one into the end of its C string, silently cutting the string, so the places that
 * must not lose text, batch lines and chat templates, look for it first), and one JSON
 * string read or written with NUL bytes in it (lpx tokenize --jsonl). */
#ifndef LPX_BASE_JSON_TEXT_H
#define LPX_BASE_JSON_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* The offset of the first \u0000 escape of s[0..n) at or after from (at its backslash),
 * or n when none. An escaped backslash before "u0000" is text, not an escape. */
size_t lpx_json_nul_escape(const char *s, size_t n, size_t from);

/* Writes s[0..n) as a JSON string; s is valid UTF-8 (decoder output). */
void lpx_json_put_string(FILE *f, const char *s, size_t n);

/* Parses text holding one JSON string (leading blanks allowed) into out, which has room
 * for n bytes (NUL bytes allowed). A lone surrogate escape is written as its 3-byte
 * form, which a UTF-8 check then rejects. Returns the length, or -1 when s is not one
 * JSON string. */
long lpx_json_parse_string(const char *s, size_t n, char *out);

#endif
