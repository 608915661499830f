/* The server's work queue (every task runs once, in order per worker, even those
 * queued at destroy; a full queue refuses) and a stream's buffer, which keeps only
 * what the client has not taken yet. */
#include "server/job.h"
#include "server/workq.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

typedef struct counter {
    atomic_int runs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold; /* tasks wait while set: fills the queue */
} counter;

static void task(void *arg) {
    counter *c = arg;
    pthread_mutex_lock(&c->mu);
    while (c->hold)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_add(&c->runs, 1);
}

static void test_workq(void) {
    counter c = {.hold = true};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    lpx_workq *q = NULL;
    CHECK(lpx_workq_create(0, 4, &q) == LPX_ERR_INVALID_ARG && !q);
    CHECK(lpx_workq_create(2, 4, &q) == LPX_OK && q);
    /* two running (held), four waiting, then the queue is full */
    int pushed = 0;
    for (int i = 0; i < 6; i++) {
        pushed += lpx_workq_push(q, task, &c);
        usleep(20000);
    }
    CHECK(pushed == 6);
    CHECK(!lpx_workq_push(q, task, &c));
    pthread_mutex_lock(&c.mu);
    c.hold = false;
    pthread_cond_broadcast(&c.cv);
    pthread_mutex_unlock(&c.mu);
    lpx_workq_destroy(q); /* runs what is queued before it returns */
    CHECK(atomic_load(&c.runs) == 6);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
}

/* 64 MB through a job's stream buffer, taken in 16 KiB reads (libmicrohttpd's) as it
 * comes: the buffer never holds more than what was not taken. */
static void test_stream_buffer(void) {
    lpx_job j = {0};
    char chunk[1000], buf[16384];
    memset(chunk, 'x', sizeof chunk);
    size_t sent = 0, got = 0, most = 0;
    bool end = false;
    while (sent < (64u << 20)) {
        for (int k = 0; k < 20; k++) /* a step of several choices' chunks */
            CHECK(lpx_strbuf_add(&j.out, chunk, sizeof chunk));
        sent += 20 * sizeof chunk;
        got += lpx_job_take(&j, buf, sizeof buf, &end);
        if (j.out.cap > most) most = j.out.cap;
    }
    j.finished = true;
    size_t n;
    while ((n = lpx_job_take(&j, buf, sizeof buf, &end)) > 0)
        got += n;
    CHECK(end && got == sent);
    CHECK(j.out.n == 0 && j.out_pos == 0);
    /* 20 KB come per step and 16 KiB go: a backlog of ~12 MB at the end, which the
     * buffer holds (up to twice, before it moves it down), not all 64 MB sent */
    size_t backlog = sent - (sent / 20000) * sizeof buf;
    CHECK(most <= 4 * backlog + 65536 && most < sent / 2);
    free(j.out.p);
}

/* Taken as fast as it comes, the buffer stays at one step's bytes. */
static void test_stream_buffer_drained(void) {
    lpx_job j = {0};
    char chunk[1000], buf[16384];
    memset(chunk, 'y', sizeof chunk);
    size_t most = 0;
    bool end = false;
    for (int step = 0; step < 50000; step++) {
        for (int k = 0; k < 12; k++)
            CHECK(lpx_strbuf_add(&j.out, chunk, sizeof chunk));
        while (lpx_job_take(&j, buf, sizeof buf, &end) > 0) {
        }
        if (j.out.cap > most) most = j.out.cap;
    }
    CHECK(most <= 16384); /* 600 MB went through */
    free(j.out.p);
}

int main(void) {
    test_workq();
    test_stream_buffer();
    test_stream_buffer_drained();
    TEST_DONE();
}
