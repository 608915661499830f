/* The work queue (workq.h): a ring of pending tasks under one mutex. */
#include "server/workq.h"

#include "base/error.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct task {
    lpx_workq_fn fn;
    void *arg;
} task;

struct lpx_workq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task *ring; /* [cap] */
    size_t cap, head, n;
    bool closing;
    int n_threads;
    pthread_t threads[];
};

static void *worker(void *arg) {
    lpx_workq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->n && !q->closing)
            pthread_cond_wait(&q->cv, &q->mu);
        if (!q->n) break; /* closing and drained */
        task t = q->ring[q->head];
        q->head = (q->head + 1) % q->cap;
        q->n--;
        pthread_mutex_unlock(&q->mu);
        t.fn(t.arg);
        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

lpx_status lpx_workq_create(int n_threads, size_t max_pending, lpx_workq **out) {
    *out = NULL;
    if (n_threads < 1 || max_pending < 1)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "workq: %d threads, %zu pending", n_threads,
                          max_pending);
    lpx_workq *q = calloc(1, sizeof *q + (size_t)n_threads * sizeof(pthread_t));
    if (!q || !(q->ring = calloc(max_pending, sizeof *q->ring))) {
        free(q);
        return lpx_errorf(LPX_ERR_NOMEM, "workq: out of memory");
    }
    q->cap = max_pending;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    for (; q->n_threads < n_threads; q->n_threads++)
        if (pthread_create(&q->threads[q->n_threads], NULL, worker, q) != 0) {
            lpx_workq_destroy(q);
            return lpx_errorf(LPX_ERR_IO, "workq: cannot start a thread");
        }
    *out = q;
    return LPX_OK;
}

bool lpx_workq_push(lpx_workq *q, lpx_workq_fn fn, void *arg) {
    pthread_mutex_lock(&q->mu);
    bool ok = !q->closing && q->n < q->cap;
    if (ok) {
        q->ring[(q->head + q->n) % q->cap] = (task){fn, arg};
        q->n++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

void lpx_workq_destroy(lpx_workq *q) {
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->closing = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->n_threads; i++)
        pthread_join(q->threads[i], NULL);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q->ring);
    free(q);
}
