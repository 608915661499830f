/* The host's memory read bandwidth, measured: the CPU backend's floor (a decode step
 * reads every weight once), for lpx bench and lpx plan without a GPU. */
#ifndef LPX_BASE_HOST_BW_H
#define LPX_BASE_HOST_BW_H

/* Bytes/s of one pass over 256 MiB of words, best of 3 (about 0.1 s); 1e10 when the
 * buffer cannot be had. */
double lpx_host_read_bandwidth(void);

#endif
