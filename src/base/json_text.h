/* JSON text as bytes, before a parser sees it: where a \u0000 escape is. cJSON turns
 * one into the end of its C string, silently cutting the string, so the places that
 * must not lose text (batch lines, chat templates) look for it first. */
#ifndef LPX_BASE_JSON_TEXT_H
#define LPX_BASE_JSON_TEXT_H

#include <stddef.h>

/* The offset of the first \u0000 escape of s[0..n) at or after from (at its backslash),
 * or n when none. An escaped backslash before "u0000" is text, not an escape. */
size_t lpx_json_nul_escape(const char *s, size_t n, size_t from);

#endif
