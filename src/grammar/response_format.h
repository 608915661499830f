/* OpenAI's response_format object, as serve and batch take it:
 *   {"type": "text"} | {"type": "json_object"} |
 *   {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}
 * One parser for both, so that a body means the same in either. */
#ifndef LPX_GRAMMAR_RESPONSE_FORMAT_H
#define LPX_GRAMMAR_RESPONSE_FORMAT_H

#include "lpx.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* Checks v (the value of "response_format") and compiles its schema (the compiled
 * grammar is dropped: the engine compiles it again for the request). Sets *format and
 * *schema (malloc'd compact schema text for json_schema, else NULL). False with the
 * message in msg, which names the keyword's path ("response_format.json_schema.schema
 * .properties.age: keyword 'multipleOf' is not supported"). */
bool lpx_response_format_parse(const cJSON *v, lpx_output_format *format, char **schema, char *msg,
                               size_t cap);

#endif
