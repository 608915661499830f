/* Subcommands of the lpx program; each is a thin front end over liblpx and
 * returns the process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef LPX_CLI_COMMANDS_H
#define LPX_CLI_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct lpx_command {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
    bool dev;                           /* a developer tool: listed after the commands */
    const char *sub;                    /* its subcommand word, if any ("bench serve") */
} lpx_command;

/* lpx completion bash (completion.c). */
int lpx_cli_completion(int argc, char **argv, const lpx_command *cmds, size_t n);

/* Each cmd_*.c defines one of these. Add new ones to the table in main.c. */
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_slice(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_monitor(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench_serve(int argc, char **argv); /* lpx bench serve */

#endif
