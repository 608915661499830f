/* lpx chat: interactive chat with the model's template and the whole history
 * re-rendered each turn. Ctrl-C stops the answer being written; Ctrl-C at the
 * prompt, or twice within a second, exits; so does EOF. */
#include "cli/commands.h"
#include "cli/gen_args.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t n_sigint;
static void on_sigint(int sig) {
    (void)sig;
    n_sigint++;
}

typedef struct turn {
    char *text;
    size_t n, cap;
    bool done, oom;
    lpx_finish_reason finish;
    char error[512];
} turn;

static void on_event(const lpx_event *ev, void *user) {
    turn *t = user;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        if (t->n + ev->text_len + 1 > t->cap) {
            size_t cap = 2 * (t->n + ev->text_len + 1);
            char *p = realloc(t->text, cap);
            if (!p)
                t->oom = true;
            else
                t->text = p, t->cap = cap;
        }
        if (!t->oom) {
            memcpy(t->text + t->n, ev->text, ev->text_len);
            t->n += ev->text_len;
            t->text[t->n] = '\0';
        }
    }
    if (ev->finish) {
        t->done = true;
        t->finish = ev->finish;
        if (ev->error) snprintf(t->error, sizeof t->error, "%s", ev->error);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct history {
    lpx_chat_message *m;
    char **owned; /* [n] the strings this history allocated (NULL for argv's) */
    size_t n, cap;
} history;

static bool history_add(history *h, const char *role, char *content, bool owned) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 16;
        lpx_chat_message *m = realloc(h->m, cap * sizeof *m);
        if (m) h->m = m;
        char **o = realloc(h->owned, cap * sizeof *o);
        if (o) h->owned = o;
        if (!m || !o) return false;
        h->cap = cap;
    }
    h->m[h->n] = (lpx_chat_message){role, content};
    h->owned[h->n++] = owned ? content : NULL;
    return true;
}

static void history_truncate(history *h, size_t n) {
    while (h->n > n)
        free(h->owned[--h->n]);
}

static void help(FILE *f) {
    fprintf(f,
            "usage: lpx chat -m MODEL [--system TEXT] [options]\n\n"
            "Interactive chat with the model's chat template; the history is kept.\n"
            "Ctrl-C stops the current answer; Ctrl-C at the prompt (or twice within a\n"
            "second) or EOF (Ctrl-D) exits. /reset clears the history.\n\n"
            "%s%s",
            lpx_engine_args_help, lpx_gen_args_help);
}

int cmd_chat(int argc, char **argv) {
    lpx_gen_args g;
    lpx_gen_args_init(&g);
    g.req.max_tokens = -1;
    lpx_opts a = {.cmd = "chat", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a))
        if (!lpx_gen_args_opt(&a, &g)) lpx_opts_unknown(&a);
    if (a.help || a.bad) return lpx_opts_exit(&a, help);
    if (!lpx_engine_args_check(&g.e, "chat")) return 2;
    lpx_model *m;
    lpx_engine *e;
    int rc = lpx_gen_args_open(&g, "chat", &m, &e);
    if (rc) return rc;
    lpx_model_info info;
    if (lpx_model_info_get(m, &info) == LPX_OK && !info.has_chat_template) {
        fprintf(stderr, "lpx chat: %s has no chat template\n", g.e.model);
        lpx_engine_destroy(e);
        lpx_model_close(m);
        return 1;
    }
    history h = {0};
    size_t base = 0;
    if (g.system) {
        history_add(&h, "system", (char *)g.system, false);
        base = 1;
    }
    /* No SA_RESTART: Ctrl-C at the prompt interrupts the read. */
    struct sigaction sa = {.sa_handler = on_sigint};
    sigaction(SIGINT, &sa, NULL);
    char *line = NULL;
    size_t line_cap = 0;
    double last_sigint = -10;
    bool interactive = isatty(0);
    for (;;) {
        if (interactive) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        if (n_sigint) break; /* Ctrl-C at the prompt */
        errno = 0;
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) {
            if (errno != EINTR) fputc('\n', stdout); /* EOF */
            break;                                   /* Ctrl-C at the prompt exits too */
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            history_truncate(&h, base);
            continue;
        }
        char *user = strdup(line);
        if (!user || !history_add(&h, "user", user, true)) {
            free(user);
            fprintf(stderr, "lpx chat: out of memory\n");
            rc = 1;
            break;
        }
        g.req.messages = h.m;
        g.req.n_messages = h.n;
        turn t = {0};
        uint64_t id;
        lpx_status st = lpx_engine_submit(e, &g.req, on_event, &t, &id);
        if (st != LPX_OK) {
            /* Too long, usually: this turn is dropped, the chat goes on. */
            fprintf(stderr, "lpx chat: %s\n", lpx_last_error());
            history_truncate(&h, h.n - 1);
            continue;
        }
        bool busy = true, quit = false;
        int seen = n_sigint = 0;
        while (!t.done && busy) {
            if (n_sigint != seen) {
                double now = now_s();
                if (now - last_sigint < 1.0) quit = true;
                last_sigint = now;
                seen = n_sigint;
                lpx_engine_cancel(e, id);
            }
            if (lpx_engine_step(e, &busy) != LPX_OK && !t.done) break;
        }
        fputc('\n', stdout);
        fflush(stdout);
        n_sigint = 0; /* the Ctrl-C that stopped the answer does not also exit */
        if (t.finish == LPX_FINISH_ERROR || t.oom || !t.done) {
            fprintf(stderr, "lpx chat: %s\n", t.error[0] ? t.error : "generation failed");
            free(t.text);
            history_truncate(&h, h.n - 1);
            if (quit) break;
            continue;
        }
        if (t.finish == LPX_FINISH_CANCELLED) fputs("[stopped]\n", stderr);
        char *answer = t.text ? t.text : strdup("");
        if (!answer || !history_add(&h, "assistant", answer, true)) {
            free(answer);
            fprintf(stderr, "lpx chat: out of memory\n");
            rc = 1;
            break;
        }
        if (quit) break;
    }
    signal(SIGINT, SIG_DFL);
    free(line);
    history_truncate(&h, 0);
    free(h.m);
    free(h.owned);
    lpx_engine_destroy(e);
    lpx_model_close(m);
    return rc;
}
