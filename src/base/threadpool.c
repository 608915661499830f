#include "base/threadpool.h"

#include "base/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

/* Spin iterations before a waiting thread sleeps. Between the matrix products
 * of one token the gap is microseconds, which a condition variable wake-up
 * would exceed; a short spin bounds the CPU wasted when the pool is idle. */
#define SPIN_ITERS 20000

struct lpx_threadpool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;             /* workers: a new job (or shutdown) */
    pthread_cond_t done;             /* caller: the last chunk finished */
    atomic_uint_fast64_t generation; /* bumped once per job */
    bool shutdown;

    /* The current job. The caller writes these before it publishes `left`;
     * a worker reads them only after claiming a chunk, and a claimed chunk
     * keeps the job (and so these fields) from ending. */
    lpx_parallel_fn fn;
    void *ctx;
    int64_t n, grain, chunks;
    /* Chunks not yet claimed. Claimed by a decrement that never goes below
     * zero, so a worker still looking at an earlier job either claims a chunk
     * of the current one (and does it with the current fields) or nothing. */
    atomic_int_fast64_t left;
    atomic_int_fast64_t finished; /* chunks done */
};

typedef struct worker_arg {
    lpx_threadpool *p;
    int index;
} worker_arg;

/* Claims and runs chunks until none is left. The caller waits for the chunks,
 * not for the workers: a worker that the OS has not scheduled yet (a loaded
 * machine, more threads than free cores) holds no chunk and so holds up
 * nothing; the caller or a running worker takes its share. */
static void run_chunks(lpx_threadpool *p, int thread) {
    int_fast64_t v = atomic_load_explicit(&p->left, memory_order_relaxed);
    for (;;) {
        if (v <= 0) return;
        if (!atomic_compare_exchange_weak_explicit(&p->left, &v, v - 1, memory_order_acquire,
                                                   memory_order_relaxed))
            continue;
        const int64_t chunks = p->chunks, b = (chunks - v) * p->grain;
        p->fn(p->ctx, b, p->n - b > p->grain ? b + p->grain : p->n, thread);
        if (atomic_fetch_add_explicit(&p->finished, 1, memory_order_acq_rel) + 1 == chunks) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
        v = atomic_load_explicit(&p->left, memory_order_relaxed);
    }
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    lpx_threadpool *p = wa->p;
    int index = wa->index;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = 0;
        for (int i = 0; i < SPIN_ITERS; i++) {
            g = atomic_load_explicit(&p->generation, memory_order_acquire);
            if (g != seen) break;
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->generation)) == seen && !p->shutdown)
                pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (g == seen) return NULL; /* shutdown */
        seen = g;
        run_chunks(p, index);
    }
}

lpx_status lpx_threadpool_create(int n_threads, lpx_threadpool **out) {
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)(n < 256 ? n : 256) : 1;
    }
    lpx_threadpool *p = calloc(1, sizeof *p);
    if (!p) return lpx_errorf(LPX_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            lpx_threadpool_destroy(p);
            return lpx_errorf(LPX_ERR_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        int rc = -1;
        if (wa) {
            wa->p = p;
            wa->index = i;
            rc = pthread_create(&p->threads[i - 1], NULL, worker_main, wa);
            if (rc) free(wa);
        }
        if (rc) {
            p->n_threads = i; /* destroy joins only the threads that exist */
            lpx_threadpool_destroy(p);
            return lpx_errorf(LPX_ERR_NOMEM, "thread pool: cannot start thread %d of %d", i,
                              n_threads);
        }
    }
    *out = p;
    return LPX_OK;
}

void lpx_threadpool_destroy(lpx_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->shutdown = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int lpx_threadpool_size(const lpx_threadpool *p) {
    return p->n_threads;
}

void lpx_parallel_for(lpx_threadpool *p, int64_t n, int64_t grain, lpx_parallel_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (p->n_threads == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    /* chunk c starts at c * grain < n, so no product overflows */
    const int64_t chunks = n / grain + (n % grain != 0);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    p->chunks = chunks;
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    atomic_store_explicit(&p->left, chunks, memory_order_release);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, 0);
    for (int i = 0; i < SPIN_ITERS; i++)
        if (atomic_load_explicit(&p->finished, memory_order_acquire) == chunks) return;
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->finished) != chunks)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
