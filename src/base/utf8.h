/* UTF-8 checks for text from outside (request bodies, batch lines, URLs) before it is
 * written where strict readers decode it: JSON (RFC 8259 text is UTF-8) and logs. */
#ifndef LPX_BASE_UTF8_H
#define LPX_BASE_UTF8_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* The length of the valid UTF-8 sequence at p (n bytes left), 0 when the bytes there
 * are not one (overlong, surrogate, past U+10FFFF, cut short). */
size_t lpx_utf8_seq(const unsigned char *p, size_t n);
/* The offset of the first byte of s[0..n) that starts no valid sequence, n if none. */
size_t lpx_utf8_invalid_at(const char *s, size_t n);
/* The longest prefix of s of at most max bytes that does not cut a character:
 * for "%.*s" where "%.200s" could end in half a character. */
int lpx_utf8_prefix(const char *s, size_t max);
/* Every string of item (values and object keys, nested) made valid UTF-8, each
 * invalid byte replaced by U+FFFD. False only when out of memory. */
bool lpx_utf8_fix_json(cJSON *item);
/* s as log text: control bytes, backslashes and invalid UTF-8 as \xHH, so that text
 * from a client can forge no log line and send no terminal escape. out has cap bytes
 * (cap >= 1); what does not fit is dropped. */
void lpx_utf8_log_escape(const char *s, char *out, size_t cap);

#endif
