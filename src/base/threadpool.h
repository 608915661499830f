/* A persistent pool of worker threads running parallel-for loops.
 *
 * Workers are created once and wait between jobs (briefly spinning, then on a
 * condition variable), so a forward pass can issue hundreds of small parallel
 * loops per token without thread start-up costs. The calling thread takes part
 * in every loop and waits only for chunks that a worker has claimed, never for
 * a worker that has not started on the loop (one the OS has not scheduled). One job runs at a time;
 * lpx_parallel_for is not reentrant and must be called from one thread at a time. */
#ifndef LPX_BASE_THREADPOOL_H
#define LPX_BASE_THREADPOOL_H

#include "lpx.h"

#include <stdint.h>

typedef struct lpx_threadpool lpx_threadpool;

/* Runs items [begin, end) on worker `thread` (0 .. lpx_threadpool_size()-1,
 * 0 being the caller), so the callee can use per-thread scratch memory. */
typedef void (*lpx_parallel_fn)(void *ctx, int64_t begin, int64_t end, int thread);

/* n_threads <= 0: one per online CPU. */
lpx_status lpx_threadpool_create(int n_threads, lpx_threadpool **out);
void lpx_threadpool_destroy(lpx_threadpool *p);
int lpx_threadpool_size(const lpx_threadpool *p);

/* Calls fn over [0, n) split into chunks of `grain` items (the last may be
 * shorter), handed out dynamically; returns when every chunk is done. Which
 * thread runs a chunk varies from call to call, so fn must not let the thread
 * index change its results. */
void lpx_parallel_for(lpx_threadpool *p, int64_t n, int64_t grain, lpx_parallel_fn fn, void *ctx);

#endif
