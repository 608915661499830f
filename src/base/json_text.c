/* \u0000 escapes in JSON text (json_text.h). */
#include "base/json_text.h"

#include <string.h>

size_t lpx_json_nul_escape(const char *s, size_t n, size_t from) {
    /* a backslash occurs only in strings, and each escape is skipped whole */
    for (size_t i = from; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && n - i >= 6 && !memcmp(s + i + 2, "0000", 4)) return i;
        i++;
    }
    return n;
}
