/* lpx quantize -m MODEL -o OUT.gguf --type T: the job is lpx_quantize_model
 * (src/model/quantize_model.c); this prints its progress. */
#include "cli/commands.h"
#include "cli/opts.h"
#include "lpx.h"
#include "model/quantize_model.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: lpx quantize -m MODEL -o OUT.gguf --type TYPE [--force] [-t N]\n\n"
            "Writes MODEL (a .gguf or a Hugging Face directory) as a GGUF of TYPE that\n"
            "llama.cpp also loads: %s.\n"
            "1-D tensors stay F32; the output head gets Q6_K (but under q8_0); q4_k_m gives\n"
            "Q6_K to part of attn_v and ffn_down; a row that a type's block does not divide\n"
            "falls back to a type that fits (docs/quantize.md). Progress goes to stderr.\n\n"
            "  -m, --model MODEL   the model to quantize\n"
            "  -o, --output FILE   the GGUF to write (written beside it, then renamed)\n"
            "  --type TYPE         the quantization type\n"
            "  --force             replace FILE when it exists\n"
            "  -t, --threads N     threads (default: all cores)\n",
            LPX_QUANT_TYPES);
}

static void progress(void *ctx, const lpx_quant_event *e) {
    (void)ctx;
    if (e->warning)
        fprintf(stderr, "lpx quantize: warning: %s\n", e->warning);
    else
        fprintf(stderr, "[%4lld/%lld] %-28s %-5s -> %-5s%s%s\n", (long long)e->i, (long long)e->n,
                e->name, e->from, e->to, *e->note ? "  " : "", e->note);
}

int cmd_quantize(int argc, char **argv) {
    lpx_quantize_opts o = {.progress = progress, .cancel = &stop};
    const char *in = NULL, *out = NULL;
    lpx_opts a = {.cmd = "quantize", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_flag(&a, "--force"))
            o.overwrite = true;
        else if (!lpx_opts_str(&a, LPX_OPT_MODEL, &in) && !lpx_opts_str(&a, "-o|--output", &out) &&
                 !lpx_opts_str(&a, "--type", &o.type) &&
                 !lpx_opts_i32(&a, LPX_OPT_THREADS, 1, 4096, &o.n_threads))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (!in || !out || !o.type) {
        fprintf(stderr, "lpx quantize: need -m MODEL, -o OUT.gguf and --type (see --help)\n");
        return 2;
    }
    /* The job stops between tensors and removes its temporary file (a closed stderr too). */
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        signal(sigs[i], on_signal);
    lpx_quantize_result r;
    lpx_status s = lpx_quantize_model(in, out, &o, &r);
    if (s != LPX_OK) {
        fprintf(stderr, "lpx quantize: %s\n", lpx_last_error());
        return s == LPX_ERR_INVALID_ARG ? 2 : 1;
    }
    fprintf(stderr, "lpx quantize: %lld tensors, %.2f MiB -> %.2f MiB (%s)\n",
            (long long)r.n_tensors, (double)r.bytes_in / 1048576, (double)r.bytes_out / 1048576,
            out);
    return 0;
}
