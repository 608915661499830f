/* base/http_client against a real local HTTP server (a thread of this test, one
 * connection at a time): GET and POST, the bearer header, a streamed body, an HTTP error
 * status, a body over max_body, a timeout, a refused connection, and the multi interface. */
#include "base/http_client.h"
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int listen_fd;

static void reply(int fd, int status, const char *body) {
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
                     strlen(body));
    if (write(fd, head, (size_t)n) < 0 || write(fd, body, strlen(body)) < 0) return;
}

/* The request's header value of name ("" when absent). */
static void header(const char *req, const char *name, char *out, size_t cap) {
    const char *p = strstr(req, name);
    out[0] = '\0';
    if (!p) return;
    p += strlen(name);
    size_t n = strcspn(p, "\r\n");
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
}

static void serve_one(int fd) {
    char req[8192];
    size_t n = 0;
    ssize_t r;
    char *end = NULL;
    while (n < sizeof req - 1 && (r = read(fd, req + n, sizeof req - 1 - n)) > 0) {
        n += (size_t)r;
        req[n] = '\0';
        if ((end = strstr(req, "\r\n\r\n"))) {
            char len[32];
            header(req, "Content-Length: ", len, sizeof len);
            if (n >= (size_t)(end + 4 - req) + (size_t)atoi(len)) break;
        }
    }
    if (!end) return;
    char auth[256], out[1024];
    header(req, "Authorization: ", auth, sizeof auth);
    if (!strncmp(req, "GET /hello ", 11)) {
        reply(fd, 200, "hello");
    } else if (!strncmp(req, "POST /echo ", 11)) {
        snprintf(out, sizeof out, "auth=%s;body=%s", auth, end + 4);
        reply(fd, 200, out);
    } else if (!strncmp(req, "GET /sse ", 9)) {
        const char *h = "HTTP/1.1 200 X\r\nContent-Type: text/event-stream\r\nConnection: "
                        "close\r\n\r\ndata: a\n\n";
        if (write(fd, h, strlen(h)) < 0) return;
        usleep(50000); /* a second piece */
        if (write(fd, "data: b\n\n", 9) < 0) return;
    } else if (!strncmp(req, "GET /slow ", 10)) {
        usleep(800000);
        reply(fd, 200, "late");
    } else if (!strncmp(req, "GET /big ", 9)) {
        reply(fd, 200, "0123456789abcdefghij");
    } else {
        reply(fd, 404, "no such path");
    }
}

static void *server(void *arg) {
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) continue;
        serve_one(fd);
        close(fd);
    }
    return NULL;
}

typedef struct stream {
    char text[256];
    size_t n;
    int pieces;
} stream;

static bool on_data(void *user, const char *d, size_t n) {
    stream *s = user;
    if (s->n + n >= sizeof s->text) return false;
    memcpy(s->text + s->n, d, n);
    s->n += n;
    s->text[s->n] = '\0';
    s->pieces++;
    return true;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK(bind(listen_fd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(listen_fd, 16) == 0);
    CHECK(getsockname(listen_fd, (struct sockaddr *)&a, &al) == 0);
    pthread_t th;
    pthread_create(&th, NULL, server, NULL);
    pthread_detach(th);
    char base[64], url[128];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/", ntohs(a.sin_port));
    CHECK(lpx_http_global_init() == LPX_OK);
    lpx_http_response rs;

    /* GET, the URL joined without a double slash */
    CHECK(lpx_http_url(url, sizeof url, base, "/hello"));
    CHECK(strstr(url, "//hello") == NULL);
    CHECK(lpx_http_fetch(&(lpx_http_request){.url = url, .timeout_s = 10}, &rs) == LPX_OK);
    CHECK(rs.status == 200 && rs.len == 5 && !strcmp(rs.body, "hello") && !rs.error[0]);
    lpx_http_response_free(&rs);

    /* POST with a bearer token, twice on one handle */
    lpx_http *h;
    CHECK(lpx_http_create(&h) == LPX_OK);
    lpx_http_url(url, sizeof url, base, "/echo");
    for (int i = 0; i < 2; i++) {
        CHECK(lpx_http_do(h, &(lpx_http_request){.url = url, .body = "{\"x\":1}", .api_key = "k1"},
                          &rs) == LPX_OK);
        CHECK(rs.status == 200 && !strcmp(rs.body, "auth=Bearer k1;body={\"x\":1}"));
        lpx_http_response_free(&rs);
    }
    /* no key, no header */
    CHECK(lpx_http_do(h, &(lpx_http_request){.url = url, .body = "b", .api_key = ""}, &rs) ==
          LPX_OK);
    CHECK(!strcmp(rs.body, "auth=;body=b"));
    lpx_http_response_free(&rs);

    /* an HTTP error is a response */
    lpx_http_url(url, sizeof url, base, "/nope");
    CHECK(lpx_http_do(h, &(lpx_http_request){.url = url}, &rs) == LPX_OK);
    CHECK(rs.status == 404 && !strcmp(rs.body, "no such path"));
    lpx_http_response_free(&rs);

    /* a streamed body: the callback sees all of it, the response holds none */
    stream s = {0};
    lpx_http_url(url, sizeof url, base, "/sse");
    CHECK(lpx_http_do(h,
                      &(lpx_http_request){.url = url, .sse = true, .on_data = on_data, .user = &s},
                      &rs) == LPX_OK);
    CHECK(rs.status == 200 && !rs.body && !strcmp(s.text, "data: a\n\ndata: b\n\n"));
    CHECK(s.pieces >= 1);

    /* a body over max_body */
    lpx_http_url(url, sizeof url, base, "/big");
    CHECK(lpx_http_do(h, &(lpx_http_request){.url = url, .max_body = 10}, &rs) == LPX_ERR_IO);
    CHECK(rs.too_big && strstr(rs.error, url) && strstr(lpx_last_error(), url));
    lpx_http_response_free(&rs);

    /* a timeout names the URL */
    lpx_http_url(url, sizeof url, base, "/slow");
    CHECK(lpx_http_do(h, &(lpx_http_request){.url = url, .timeout_s = 0.3}, &rs) == LPX_ERR_IO);
    CHECK(rs.timed_out && rs.status == 0 && !strncmp(rs.error, url, strlen(url)));
    lpx_http_response_free(&rs);
    lpx_http_destroy(h);

    /* a refused connection: no server on the port any more */
    int tmp = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in b = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t bl = sizeof b;
    bind(tmp, (struct sockaddr *)&b, sizeof b);
    getsockname(tmp, (struct sockaddr *)&b, &bl);
    close(tmp);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/x", ntohs(b.sin_port));
    CHECK(lpx_http_fetch(&(lpx_http_request){.url = url, .connect_timeout_s = 5}, &rs) ==
          LPX_ERR_IO);
    CHECK(!rs.timed_out && rs.status == 0 && strstr(lpx_last_error(), url));
    lpx_http_response_free(&rs);

    /* two exchanges in flight on one multi handle */
    lpx_http_multi *m;
    lpx_http *hs[2];
    lpx_http_response rss[2];
    lpx_http_request rq;
    char hello[128];
    lpx_http_url(hello, sizeof hello, base, "/hello");
    rq = (lpx_http_request){.url = hello, .timeout_s = 10};
    CHECK(lpx_http_multi_create(&m) == LPX_OK);
    for (int i = 0; i < 2; i++) {
        CHECK(lpx_http_create(&hs[i]) == LPX_OK);
        CHECK(lpx_http_multi_add(m, hs[i], &rq, &rss[i]) == LPX_OK);
    }
    int done = 0;
    for (int turns = 0; done < 2 && turns < 1000; turns++) {
        CHECK(lpx_http_multi_wait(m, 0.05) == LPX_OK);
        lpx_status st;
        lpx_http *d;
        while ((d = lpx_http_multi_done(m, &st))) {
            CHECK(st == LPX_OK && (d == hs[0] || d == hs[1]));
            done++;
        }
    }
    CHECK(done == 2);
    for (int i = 0; i < 2; i++) {
        CHECK(rss[i].status == 200 && !strcmp(rss[i].body, "hello"));
        lpx_http_response_free(&rss[i]);
        lpx_http_destroy(hs[i]);
    }
    lpx_http_multi_destroy(m);
    lpx_http_global_cleanup();
    TEST_DONE();
}
