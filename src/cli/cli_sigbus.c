/* SIGBUS on a mapped model file (cli_sigbus.h). The library installs nothing: the
 * signal disposition is the program's. */
#include "cli/cli_sigbus.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char sigbus_msg[4608]; /* written once, before the handler is installed */
static size_t sigbus_len;

static void on_sigbus(int sig) {
    (void)sig;
    /* only async-signal-safe calls: write, _exit */
    if (write(STDERR_FILENO, sigbus_msg, sigbus_len) < 0) _exit(1);
    _exit(1);
}

void lpx_cli_sigbus_model(const char *path) {
    if (!path) return;
    int n = snprintf(sigbus_msg, sizeof sigbus_msg,
                     "\nlpx: SIGBUS reading the model %s: the file was truncated or rewritten "
                     "in place while in use (replace a model file by writing a new one and "
                     "renaming it over the old: docs/models.md); exiting\n",
                     path);
    sigbus_len = n < 0 ? 0 : (size_t)n < sizeof sigbus_msg ? (size_t)n : sizeof sigbus_msg - 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}
