/* lpx chat: interactive chat with the model's template and the whole history
 * re-rendered each turn. Ctrl-C stops the answer being written (nothing of it is
 * printed after the ^C); Ctrl-C at the prompt, or twice within a second, exits; so
 * does EOF. On a terminal, lines are read with libedit (editing, history) when lpx
 * was built with it. */
#define _GNU_SOURCE /* ppoll */
#include "cli/commands.h"
#include "cli/gen_args.h"
#include "model/prompt.h"

#ifdef LPX_HAVE_LIBEDIT
#include <editline/readline.h>
#include <poll.h>
#endif
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
    lpx_event fin; /* the finish event (pointers not kept) */
    char error[512];
} turn;

static void on_event(const lpx_event *ev, void *user) {
    turn *t = user;
    if (ev->text_len && !n_sigint) { /* after a ^C, nothing more of the answer */
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
        t->fin = *ev;
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

static const char slash_help[] = "/help     these commands\n"
                                 "/reset    forget the conversation (the --system text stays)\n"
                                 "/exit     quit (also /quit, Ctrl-D, Ctrl-C at the prompt)\n";

static void help(FILE *f) {
    fprintf(f,
            "usage: lpx chat -m MODEL [--system TEXT] [--verbose] [options]\n\n"
            "Interactive chat with the model's chat template; the history is kept. On a\n"
            "terminal, lines can be edited and earlier ones recalled (libedit).\n"
            "Ctrl-C stops the current answer; Ctrl-C at the prompt (or twice within a\n"
            "second) or EOF (Ctrl-D) exits. Commands:\n%s\n"
            "  --verbose               after each answer, its stats on stderr (tokens,\n"
            "                          time to first token, decode tok/s)\n"
            "%s%s",
            slash_help, lpx_engine_args_help, lpx_gen_args_help);
}

#ifdef LPX_HAVE_LIBEDIT
/* libedit's reads: a ^C at the prompt ends the line whenever it comes. read_line blocks
 * SIGINT but inside ppoll, so one that comes between the check and the wait wakes it. */
static int getc_or_sigint(FILE *f) {
    sigset_t waiting;
    sigprocmask(SIG_SETMASK, NULL, &waiting);
    sigdelset(&waiting, SIGINT);
    struct pollfd p = {.fd = fileno(f), .events = POLLIN};
    unsigned char c;
    while (!n_sigint) {
        if (ppoll(&p, 1, NULL, &waiting) < 0 && errno == EINTR) continue;
        ssize_t r = read(p.fd, &c, 1);
        if (r == 1) return c;
        if (r == 0 || errno != EINTR) break;
    }
    return EOF;
}
#endif

/* The next line without its newline, in *line (malloc'd); false at EOF or Ctrl-C. */
static bool read_line(bool tty, char **line) {
#ifdef LPX_HAVE_LIBEDIT
    if (tty) {
        free(*line);
        sigset_t intr, was;
        sigemptyset(&intr);
        sigaddset(&intr, SIGINT);
        sigprocmask(SIG_BLOCK, &intr, &was);
        rl_catch_signals = 0;
        rl_getc_function = getc_or_sigint;
        *line = readline("> ");
        sigprocmask(SIG_SETMASK, &was, NULL);
        if (!*line || n_sigint) fputc('\n', stdout); /* EOF or Ctrl-C: the shell's line */
        if (*line && **line) add_history(*line);
        return *line && !n_sigint;
    }
#endif
    size_t cap = 0;
    if (tty) fputs("> ", stdout);
    fflush(stdout);
    errno = 0;
    free(*line);
    *line = NULL;
    ssize_t n = n_sigint ? -1 : getline(line, &cap, stdin);
    if (n < 0 && errno != EINTR && !n_sigint) fputc('\n', stdout); /* EOF */
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
        (*line)[--n] = '\0';
    return n >= 0;
}

int cmd_chat(int argc, char **argv) {
    lpx_gen_args g;
    lpx_gen_args_init(&g);
    g.req.max_tokens = -1;
    bool verbose = false;
    lpx_opts a = {.cmd = "chat", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a))
        if (lpx_opts_flag(&a, "--verbose"))
            verbose = true;
        else if (!lpx_gen_args_opt(&a, &g))
            lpx_opts_unknown(&a);
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
    lpx_engine_stats es;
    lpx_engine_get_stats(e, &es);
    fprintf(stderr,
            "lpx chat: %s on %s, context %d tokens. /help lists the commands; Ctrl-D or "
            "/exit quits, Ctrl-C stops an answer.\n",
            g.e.model, es.device, es.max_model_len);
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
    double last_sigint = -10;
    const bool tty = isatty(0);
    while (read_line(tty, &line)) {
        if (!line[0]) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            history_truncate(&h, base);
            continue;
        }
        if (!strcmp(line, "/help") || (line[0] == '/' && !strchr(line, ' '))) {
            fputs(strcmp(line, "/help") ? "unknown command; the commands:\n" : "", stderr);
            fputs(slash_help, stderr);
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
        char msg[512];
        /* -n past the context: said, in `lpx run`'s words, rather than cut short. */
        if (g.given_max && !lpx_request_fits(m, &g.req, es.max_model_len, msg, sizeof msg)) {
            fprintf(stderr, "lpx chat: -n %d: %s (/reset starts over)\n", g.req.max_tokens, msg);
            history_truncate(&h, h.n - 1);
            continue;
        }
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
        if (t.fin.finish == LPX_FINISH_ERROR || t.oom || !t.done) {
            fprintf(stderr, "lpx chat: %s\n", t.error[0] ? t.error : "generation failed");
            free(t.text);
            history_truncate(&h, h.n - 1);
            if (quit) break;
            continue;
        }
        if (t.fin.finish == LPX_FINISH_CANCELLED) fputs("[stopped]\n", stderr);
        if (verbose)
            fprintf(stderr,
                    "[prompt %d tokens | output %d tokens | TTFT %.1f ms | decode %.1f tok/s | "
                    "total %.2f s | finish: %s]\n",
                    t.fin.n_prompt_tokens, t.fin.n_output_tokens, t.fin.ttft_ms, t.fin.decode_tok_s,
                    t.fin.total_ms / 1e3, lpx_finish_reason_name(t.fin.finish));
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
