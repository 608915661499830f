/* lpx: one program, every front end a subcommand. */
#include "cli/commands.h"
#include "lpx.h"

#include <stdio.h>
#include <string.h>

static const lpx_command commands[] = {
    {"inspect", "model summary: architecture, sizes, dtypes, bytes per token", cmd_inspect},
    {"doctor", "diagnose driver, CUDA, GPUs, container and memory; print fixes", cmd_doctor},
    {"monitor", "live GPU telemetry and alerts", cmd_monitor},
    {"plan", "bandwidth floor and memory plan of a model on a GPU", cmd_plan},
    {"template", "render a chat template over a JSON conversation, as transformers does",
     cmd_template},
    {"logits", "developer tool: run a backend on token ids, write logits", cmd_logits},
    {"bench", "benchmark a backend: prefill, decode, batched decode vs the bandwidth floor",
     cmd_bench},
    {"slice", "write a GGUF with the first N layers of a model (real weights)", cmd_slice},
    {"tokenize", "tokenize text with a model's tokenizer (or decode ids)", cmd_tokenize},
    {"run", "one generation, streamed, then stats", cmd_run},
    {"batch", "resumable batch jobs over a JSONL file (in-process or --server)", cmd_batch},
    {"chat", "interactive chat with the model's template", cmd_chat},
    {"serve", "OpenAI-compatible HTTP server with streaming, metrics and a web UI", cmd_serve},
    {NULL, NULL, NULL},
};

static void usage(FILE *f) {
    fprintf(f, "lpx %s: fast, dependable inference for small language models\n\n"
               "usage: lpx <command> [options]   (lpx <command> --help for its options)\n\n"
               "commands:\n",
            lpx_version());
    for (const lpx_command *c = commands; c->name; c++)
        fprintf(f, "  %-10s %s\n", c->name, c->summary);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("lpx %s\n", lpx_version());
        return 0;
    }
    for (const lpx_command *c = commands; c->name; c++)
        if (!strcmp(argv[1], c->name)) return c->main(argc - 1, argv + 1);
    fprintf(stderr, "lpx: unknown command '%s' (lpx --help lists them)\n", argv[1]);
    return 2;
}
