/* lpx perplexity -m MODEL -f TEXT: the job is ppl_run (src/bench/perplexity.c); this
 * prints its running and final figures. */
#include "bench/perplexity.h"
#include "cli/cli_dev_env.h"
#include "cli/commands.h"
#include "cli/opts.h"
#include "lpx.h"

#include <stdio.h>

static void usage(FILE *f) {
    fprintf(f, "usage: lpx perplexity -m MODEL -f TEXT [--ctx N] [--batch N]\n"
               "                      [--save-logits BASE.logits | --kl-base BASE.logits]\n\n"
               "Perplexity of MODEL over the text in windows of --ctx tokens, scoring the second\n"
               "half of each window (as llama-perplexity does): PPL +/- its standard error.\n"
               "--save-logits keeps the scored log-probs; --kl-base compares with a file saved so\n"
               "(same text and tokenizer): mean and 99th-percentile KL divergence, and how often\n"
               "the most likely token is the same (docs/quantize.md).\n\n"
               "  -m, --model MODEL        model directory or .gguf file\n"
               "  -f, --file TEXT          the text (UTF-8)\n"
               "  -c, --ctx N              window tokens (default 512)\n"
               "  -b, --batch N            tokens per step (default: the window)\n"
               "  --save-logits FILE       write the log-probs of the scored positions\n"
               "  --kl-base FILE           compare against log-probs saved by --save-logits\n"
               "  --device DEV             cpu (default), cuda, cuda:N\n"
               "  -t, --threads N          CPU threads (default: all cores)\n");
}

static void progress(void *ctx, int64_t w, int64_t n, double ppl, double err) {
    (void)ctx;
    fprintf(stderr, "[%lld/%lld] PPL %.4f +/- %.4f\n", (long long)w, (long long)n, ppl, err);
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o = {.device = "cpu", .progress = progress};
    lpx_opts a = {.cmd = "perplexity", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (!lpx_opts_str(&a, LPX_OPT_MODEL, &o.model) &&
            !lpx_opts_str(&a, "-f|--file", &o.text_file) &&
            !lpx_opts_i32(&a, "-c|--ctx", 4, 1 << 20, &o.ctx) &&
            !lpx_opts_i32(&a, "-b|--batch", 1, 1 << 20, &o.batch) &&
            !lpx_opts_str(&a, "--save-logits", &o.save_logits) &&
            !lpx_opts_str(&a, "--kl-base", &o.kl_base) &&
            !lpx_opts_str(&a, "--device", &o.device) &&
            !lpx_opts_i32(&a, LPX_OPT_THREADS, 1, 4096, &o.n_threads))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (!o.model || !o.text_file || (o.save_logits && o.kl_base)) {
        fprintf(stderr, "lpx perplexity: need -m MODEL and -f TEXT, and at most one of "
                        "--save-logits and --kl-base\n");
        return 2;
    }
    lpx_cli_dev_env(o.device, &o.tune, &o.trace);
    ppl_result r;
    if (ppl_run(&o, &r) != LPX_OK) {
        fprintf(stderr, "lpx perplexity: %s\n", lpx_last_error());
        return 1;
    }
    printf("tokens %lld, windows %lld of %d, scored %lld\n", (long long)r.n_tokens,
           (long long)r.n_windows, o.ctx ? o.ctx : 512, (long long)r.n_scored);
    printf("PPL %.4f +/- %.4f\n", r.ppl, r.ppl_err);
    if (r.have_kl) {
        printf("base PPL %.4f +/- %.4f\n", r.base_ppl, r.base_ppl_err);
        printf("KL mean %.6f +/- %.6f, p99 %.6f, max %.6f\n", r.kl_mean, r.kl_err, r.kl_p99,
               r.kl_max);
        printf("same top %.3f %% (%lld of %lld)\n", 100.0 * (double)r.same_top / (double)r.n_scored,
               (long long)r.same_top, (long long)r.n_scored);
    }
    return 0;
}
