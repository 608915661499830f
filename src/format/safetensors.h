/* safetensors reader: validates the JSON header and every tensor's byte range
 * against the buffer before returning. */
#ifndef LPX_FORMAT_SAFETENSORS_H
#define LPX_FORMAT_SAFETENSORS_H

#include "format/dtype.h"
#include "lpx.h"

#include <stdint.h>

/* Parses a safetensors image held in memory: *out gets a malloc'd array of
 * tensors whose data points into the image. */
lpx_status lpx_safetensors_parse(const void *data, size_t size, const char *name, lpx_tensor **out,
                                 int64_t *n);

#endif
