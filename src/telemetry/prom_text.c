#include "telemetry/prom_text.h"

#include <stdlib.h>
#include <string.h>

/* Label values may hold '}' and escaped quotes. Returns the end of the labels (or of
 * the name), NULL when they do not close before the end of the line. */
static const char *skip_labels(const char *p, const char *end) {
    if (p == end || *p != '{') return p;
    bool quoted = false;
    for (p++; p < end; p++) {
        if (quoted && *p == '\\')
            p++;
        else if (*p == '"')
            quoted = !quoted;
        else if (!quoted && *p == '}')
            return p + 1;
    }
    return NULL;
}

bool lpx_prom_line(const char *line, const char *eol, lpx_prom_sample *out) {
    if (line == eol || *line == '#') return false;
    size_t name_len = strcspn(line, "{ \t\n");
    if (name_len > (size_t)(eol - line)) name_len = (size_t)(eol - line);
    const char *p = skip_labels(line + name_len, eol);
    if (!p) return false;
    char *num_end;
    double v = strtod(p, &num_end);
    *out = (lpx_prom_sample){.name_len = name_len,
                             .series_len = (size_t)(p - line),
                             .has_value = num_end != p && num_end <= eol,
                             .value = v};
    return true;
}
