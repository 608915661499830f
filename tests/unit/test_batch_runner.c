/* The batch runner's library API (batch/batch.h) without a model: an existing OUTDIR is
 * refused without resume; a job against a server that is not there ends with every line
 * failed (a status, not an exit), progress reported and the summary written; merge notes
 * a duplicated result through its callback. */
#include "base/http_client.h"
#include "batch/batch.h"
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct seen {
    int progress, finals, notes;
    lpx_batch_progress last;
    char note[512];
} seen;

static void on_progress(void *user, const lpx_batch_progress *p, bool final) {
    seen *s = user;
    s->progress++;
    s->finals += final;
    s->last = *p;
}

static void on_note(void *user, const char *msg) {
    seen *s = user;
    s->notes++;
    snprintf(s->note, sizeof s->note, "%s", msg);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* A port nothing listens on. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);
    return ntohs(a.sin_port);
}

int main(void) {
    char root[] = "/tmp/lpx-batch-runner-XXXXXX", in[256], out[256], url[64], p[512];
    CHECK(mkdtemp(root) != NULL);
    snprintf(in, sizeof in, "%s/in.jsonl", root);
    snprintf(out, sizeof out, "%s/out", root);
    write_file(in, "{\"id\":\"a\",\"prompt\":\"hi\"}\n{\"id\":\"b\",\"prompt\":\"ho\"}\n");
    snprintf(url, sizeof url, "http://127.0.0.1:%d", free_port());
    CHECK(lpx_http_global_init() == LPX_OK);

    seen s = {0};
    lpx_batch_opts o;
    lpx_batch_opts_init(&o);
    o.input = in;
    o.outdir = out;
    o.server = url;
    o.model = "m";
    o.retries = 0;
    o.progress = on_progress;
    o.note = on_note;
    o.user = &s;
    lpx_batch_result r;
    CHECK(lpx_batch_run(&o, &r) == LPX_OK);
    CHECK(r.total == 2 && r.succeeded == 0 && r.failed == 2 && r.remaining == 0);
    CHECK(!r.complete && !r.interrupted);
    CHECK(s.finals == 1 && s.progress >= 1 && s.last.total == 2 && s.last.failed == 2);
    snprintf(p, sizeof p, "%s/summary.json", out);
    struct stat sb;
    CHECK(stat(p, &sb) == 0);

    /* the same OUTDIR again, without resume */
    CHECK(lpx_batch_run(&o, &r) == LPX_ERR_INVALID_ARG);
    CHECK(strstr(lpx_last_error(), "exists (add --resume"));

    /* merge: the id with a result in both DIRs keeps the first, and note says so */
    char d1[256], d2[256], merged[256];
    snprintf(d1, sizeof d1, "%s/d1", root);
    snprintf(d2, sizeof d2, "%s/d2", root);
    snprintf(merged, sizeof merged, "%s/merged", root);
    const char *rec = "{\"custom_id\":\"a\",\"response\":{\"status_code\":200,\"body\":{}}}\n";
    const char *dirs[] = {d1, d2};
    for (int i = 0; i < 2; i++) {
        CHECK(mkdir(dirs[i], 0755) == 0);
        snprintf(p, sizeof p, "%s/results.jsonl", dirs[i]);
        write_file(p, rec);
    }
    CHECK(lpx_batch_merge(dirs, 2, merged, on_note, &s, &r) == LPX_OK);
    CHECK(r.succeeded == 1 && r.failed == 0 && r.complete);
    CHECK(s.notes == 1 && strstr(s.note, "more than one result"));
    CHECK(lpx_batch_merge(dirs, 2, merged, on_note, &s, &r) == LPX_ERR_INVALID_ARG);
    lpx_http_global_cleanup();
    snprintf(p, sizeof p, "rm -rf '%s'", root);
    CHECK(system(p) == 0);
    TEST_DONE();
}
