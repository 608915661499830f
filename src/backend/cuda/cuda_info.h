/* CUDA facts the benchmark reports next to its figures (C interface; only built
 * with LPX_HAVE_CUDA). */
#ifndef LPX_BACKEND_CUDA_INFO_H
#define LPX_BACKEND_CUDA_INFO_H

#include "lpx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lpx_cuda_device_info {
    char name[256];
    int cc_major, cc_minor;
    int n_sms;
    int driver_version;  /* e.g. 13000 */
    int runtime_version;
    size_t total_mem, free_mem;
    char archs[64];      /* LPX_CUDA_ARCHS the binary carries code for */
} lpx_cuda_device_info;

lpx_status lpx_cuda_device_info_get(int device, lpx_cuda_device_info *out);

/* Read bandwidth (bytes/s) of device memory: a read-only reduction over a
 * buffer of `bytes` (several times the L2), median of `reps` timed passes. */
lpx_status lpx_cuda_read_bandwidth(int device, size_t bytes, int reps, double *bytes_per_s);

#ifdef __cplusplus
}
#endif

#endif
