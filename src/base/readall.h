/* Reading a whole file or stream into memory, with a size cap.
 * One implementation for every "read it all" in lpx (prompt files, templates,
 * JSON configs, batch outputs), so growth is overflow-checked and an oversized
 * or unreadable input gets the same clear error naming where it came from. */
#ifndef LPX_BASE_READALL_H
#define LPX_BASE_READALL_H

#include "lpx.h"

#include <stddef.h>
#include <stdio.h>

/* Reads f to its end into a NUL-terminated buffer (*out, free() it; *len bytes
 * before the NUL). name is the source in messages ("prompt.txt", "standard
 * input"). LPX_ERR_IO on a read error, LPX_ERR_FORMAT when there are more than
 * cap bytes, LPX_ERR_NOMEM; *out is NULL on any error. f stays open. */
lpx_status lpx_read_stream(FILE *f, const char *name, size_t cap, char **out, size_t *len);

/* The same for the file at path (opened and closed here); LPX_ERR_IO when it
 * cannot be opened. */
lpx_status lpx_read_file(const char *path, size_t cap, char **out, size_t *len);

#endif
