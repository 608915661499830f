/* A bounded FIFO of tasks run by a few threads of their own: the server's parse and
 * tokenize work, off libmicrohttpd's threads (which must never block) and bounded in
 * how many run at once, so that the memory they need is bounded too. */
#ifndef LPX_SERVER_WORKQ_H
#define LPX_SERVER_WORKQ_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>

typedef void (*lpx_workq_fn)(void *arg);
typedef struct lpx_workq lpx_workq;

/* n_threads workers; at most max_pending tasks waiting. */
lpx_status lpx_workq_create(int n_threads, size_t max_pending, lpx_workq **out);
/* Queues fn(arg); false when max_pending tasks wait already or the queue is closing. */
bool lpx_workq_push(lpx_workq *q, lpx_workq_fn fn, void *arg);
/* Runs every task still queued, then joins the workers and frees q (NULL: nothing). */
void lpx_workq_destroy(lpx_workq *q);

#endif
