/* lpx slice -m IN.gguf --layers N -o OUT.gguf: a GGUF of the first N layers, real
 * weights and metadata (block_count changed), e.g. to carry a real model in a small
 * file to the GPU machine. */
#include "cli/commands.h"
#include "cli/opts.h"
#include "lpx.h"
#include "format/gguf_write.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: lpx slice -m IN.gguf --layers N -o OUT.gguf\n\n"
               "Writes OUT.gguf with the first N transformer blocks of IN.gguf (tensors copied\n"
               "byte for byte), its embeddings, output norm and head, and all its metadata\n"
               "with <arch>.block_count set to N.\n\n"
               "  -m, --model IN.gguf  the model to slice\n"
               "  --layers N           blocks to keep (1..block_count)\n"
               "  -o, --output FILE    the file to write\n"
               "  -h, --help           this help\n");
}

int cmd_slice(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int32_t layers = 0;
    lpx_opts a = {.cmd = "slice", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (!lpx_opts_str(&a, LPX_OPT_MODEL, &in) && !lpx_opts_str(&a, "-o|--output", &out) &&
            !lpx_opts_i32(&a, "--layers", 1, 100000, &layers))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (!in || !out || layers < 1) {
        fprintf(stderr, "lpx slice: need -m IN.gguf, --layers N (N >= 1) and -o OUT.gguf\n");
        return 2;
    }
    if (lpx_gguf_write_slice(in, layers, out) != LPX_OK) {
        fprintf(stderr, "lpx slice: %s\n", lpx_last_error());
        return 1;
    }
    return 0;
}
