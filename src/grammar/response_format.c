#include "grammar/response_format.h"

#include "base/error.h"
#include "grammar/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool bad(char *msg, size_t cap, const char *what) {
    snprintf(msg, cap, "%s", what);
    return false;
}

bool lpx_response_format_parse(const cJSON *v, lpx_output_format *format, char **schema, char *msg,
                               size_t cap) {
    *format = LPX_OUTPUT_TEXT;
    *schema = NULL;
    const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
    if (!cJSON_IsString(t))
        return bad(msg, cap,
                   "response_format: expected an object with \"type\": \"text\", \"json_object\" "
                   "or \"json_schema\"");
    const char *type = t->valuestring;
    bool is_schema = !strcmp(type, "json_schema");
    for (const cJSON *x = v->child; x; x = x->next)
        if (strcmp(x->string, "type") && !(is_schema && !strcmp(x->string, "json_schema"))) {
            snprintf(msg, cap, "response_format: field '%.40s' is not supported here", x->string);
            return false;
        }
    if (!strcmp(type, "text")) return true;
    if (!strcmp(type, "json_object")) {
        *format = LPX_OUTPUT_JSON_OBJECT;
        return true;
    }
    if (!is_schema) {
        snprintf(msg, cap,
                 "response_format.type: '%.40s' is not one of \"text\", \"json_object\", "
                 "\"json_schema\"",
                 type);
        return false;
    }
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
    if (!cJSON_IsObject(js))
        return bad(msg, cap, "response_format.json_schema: expected an object with a \"schema\"");
    for (const cJSON *x = js->child; x; x = x->next) {
        const char *k = x->string;
        bool str = !strcmp(k, "name") || !strcmp(k, "description");
        if (str && !cJSON_IsString(x)) {
            snprintf(msg, cap, "response_format.json_schema.%s: expected a string", k);
            return false;
        }
        if (!strcmp(k, "strict") && !cJSON_IsBool(x))
            return bad(msg, cap, "response_format.json_schema.strict: expected a boolean");
        if (!str && strcmp(k, "strict") && strcmp(k, "schema")) {
            snprintf(msg, cap, "response_format.json_schema: field '%.40s' is not supported", k);
            return false;
        }
    }
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!s) return bad(msg, cap, "response_format.json_schema.schema: missing (the JSON Schema)");
    char *text = cJSON_PrintUnformatted(s);
    if (!text) return bad(msg, cap, "response_format: out of memory");
    lpx_grammar *g = NULL;
    if (lpx_grammar_from_schema(text, strlen(text), "response_format.json_schema.schema", &g) !=
        LPX_OK) {
        snprintf(msg, cap, "%s", lpx_last_error());
        free(text);
        return false;
    }
    lpx_grammar_free(g);
    *format = LPX_OUTPUT_JSON_SCHEMA;
    *schema = text;
    return true;
}
