/* lpx completion bash: a bash completion script whose option lists are each command's
 * own matchers (lpx CMD --list-options, opts.h), so it names what the parser takes. */
#include "cli/commands.h"
#include "lpx.h"

#include <stdio.h>
#include <string.h>

static const char script[] =
    "_lpx() {\n"
    "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
    "    local cmd=${COMP_WORDS[1]} subs= list name kind opts= args=' '\n"
    "    COMPREPLY=()\n"
    "    if ((COMP_CWORD == 1)); then\n"
    "        COMPREPLY=($(compgen -W \"$_lpx_commands help completion --help --version\" -- "
    "\"$cur\"))\n"
    "        return\n"
    "    fi\n"
    "    case $cmd in\n"
    "    help) ((COMP_CWORD == 2)) && COMPREPLY=($(compgen -W \"$_lpx_commands\" -- \"$cur\"))\n"
    "        return ;;\n"
    "    completion) ((COMP_CWORD == 2)) && COMPREPLY=($(compgen -W bash -- \"$cur\"))\n"
    "        return ;;\n"
    "    esac\n"
    "    subs=$(_lpx_list \"$cmd:\")\n"
    "    if [[ -n $subs && ${COMP_WORDS[2]} == \"$subs\" ]] && ((COMP_CWORD > 2)); then\n"
    "        cmd=\"$cmd $subs\" subs=\n"
    "    fi\n"
    "    ((COMP_CWORD == 2)) || subs=\n"
    "    list=$(_lpx_list \"$cmd\")\n"
    "    while read -r name kind; do\n"
    "        opts+=\" $name\"\n"
    "        [[ -n $kind ]] && args+=\"$name \"\n"
    "    done <<<\"$list\"\n"
    "    if [[ $args == *\" $prev \"* ]]; then\n"
    "        COMPREPLY=($(compgen -f -- \"$cur\"))\n"
    "    elif [[ $cur == -* ]]; then\n"
    "        COMPREPLY=($(compgen -W \"$opts --help\" -- \"$cur\"))\n"
    "    else\n"
    "        COMPREPLY=($(compgen -f -W \"$subs\" -- \"$cur\"))\n"
    "    fi\n"
    "}\n"
    "complete -o filenames -F _lpx lpx\n";

/* Prints one case of _lpx_list: the lines of `lpx NAME [SUB] --list-options`. */
static void list_case(const lpx_command *c, const char *sub) {
    char *argv[] = {(char *)c->name, (char *)sub, "--list-options", NULL};
    if (!sub) argv[1] = argv[2], argv[2] = NULL;
    printf("    '%s%s%s') printf '%%s\\n' '", c->name, sub ? " " : "", sub ? sub : "");
    fflush(stdout);
    c->main(sub ? 3 : 2, argv);
    printf("' ;;\n");
}

int lpx_cli_completion(int argc, char **argv, const lpx_command *cmds, size_t n) {
    if (argc != 2 || strcmp(argv[1], "bash")) {
        fprintf(stderr, "usage: lpx completion bash   (a bash completion script on stdout:\n"
                        "       source <(lpx completion bash), or save it in\n"
                        "       /etc/bash_completion.d/lpx)\n");
        return 2;
    }
    printf("# bash completion for lpx %s: source <(lpx completion bash)\n_lpx_commands='",
           lpx_version());
    for (size_t i = 0; i < n; i++)
        printf("%s%s", i ? " " : "", cmds[i].name);
    printf("'\n_lpx_list() {\n    case $1 in\n");
    for (size_t i = 0; i < n; i++) {
        list_case(&cmds[i], NULL);
        if (cmds[i].sub) {
            printf("    '%s:') echo %s ;;\n", cmds[i].name, cmds[i].sub);
            list_case(&cmds[i], cmds[i].sub);
        }
    }
    printf("    esac\n}\n%s", script);
    return 0;
}
