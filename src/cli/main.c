/* lpx: one program, every front end a subcommand. */
#include "cli/commands.h"
#include "lpx.h"

#include <stdio.h>
#include <string.h>

static const lpx_command commands[] = {
    {"run", "one generation, streamed, then stats", cmd_run, false, NULL},
    {"chat", "interactive chat with the model's template", cmd_chat, false, NULL},
    {"serve", "OpenAI-compatible HTTP server with streaming, metrics and a web UI", cmd_serve,
     false, NULL},
    {"batch", "resumable batch jobs over a JSONL file (in-process or --server)", cmd_batch, false,
     "merge"},
    {"bench", "benchmark a backend: prefill, decode, batched decode vs the bandwidth floor",
     cmd_bench, false, "serve"},
    {"doctor", "diagnose driver, CUDA, GPUs, container and memory; print fixes", cmd_doctor, false,
     NULL},
    {"plan", "bandwidth floor and memory plan of a model on a GPU", cmd_plan, false, NULL},
    {"monitor", "live GPU telemetry and alerts", cmd_monitor, false, NULL},
    {"quantize", "write a model as a quantized GGUF (q8_0, q4_k_m, ...)", cmd_quantize, false,
     NULL},
    {"perplexity", "perplexity of a text; KL divergence against a base model", cmd_perplexity,
     false, NULL},
    {"inspect", "model summary: architecture, sizes, dtypes, bytes per token", cmd_inspect, true,
     NULL},
    {"tokenize", "tokenize text with a model's tokenizer (or decode ids)", cmd_tokenize, true,
     NULL},
    {"template", "render a chat template over a JSON conversation, as transformers does",
     cmd_template, true, NULL},
    {"logits", "run a backend on token ids, write logits", cmd_logits, true, NULL},
    {"slice", "write a GGUF with the first N layers of a model (real weights)", cmd_slice, true,
     NULL},
};
#define N_COMMANDS (sizeof commands / sizeof *commands)

static void usage(FILE *f) {
    fprintf(f,
            "lpx %s: fast, dependable inference for small language models\n\n"
            "usage: lpx <command> [options]   (lpx <command> --help = lpx help <command>)\n\n"
            "commands:\n",
            lpx_version());
    for (int dev = 0; dev < 2; dev++) {
        if (dev) fprintf(f, "\ndeveloper tools:\n");
        for (size_t i = 0; i < N_COMMANDS; i++)
            if (commands[i].dev == dev)
                fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    }
    fprintf(f, "\nShell completion: source <(lpx completion bash). lpx <command> --list-options\n"
               "prints the options it takes, a line each (\"NAME ARG\" when it takes a value).\n");
}

/* lpx help COMMAND [SUB]: what lpx COMMAND [SUB] --help prints. */
static int help(int argc, char **argv) {
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        const lpx_command *c = &commands[i];
        if (strcmp(argv[1], c->name)) continue;
        const bool sub = argc > 2 && c->sub && !strcmp(argv[2], c->sub);
        char *args[] = {(char *)c->name, sub ? (char *)c->sub : "--help", "--help", NULL};
        return c->main(sub ? 3 : 2, args);
    }
    fprintf(stderr, "lpx help: unknown command '%s' (lpx --help lists them)\n", argv[1]);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "help")) return help(argc - 1, argv + 1);
    if (!strcmp(argv[1], "completion"))
        return lpx_cli_completion(argc - 1, argv + 1, commands, N_COMMANDS);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("lpx %s\n", lpx_version());
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "lpx: unknown command '%s' (lpx --help lists them)\n", argv[1]);
    return 2;
}
