/* Appending formatted text to a fixed buffer (reports, check messages). */
#ifndef LPX_BASE_APPENDF_H
#define LPX_BASE_APPENDF_H

#include "base/error.h"

#include <stddef.h>

/* printf fmt onto the end of the NUL-terminated text in buf (cap bytes in all): cut at
 * the buffer's end, always terminated; a full buffer is left as it is. */
void lpx_appendf(char *buf, size_t cap, const char *fmt, ...) LPX_PRINTF(3, 4);

#endif
