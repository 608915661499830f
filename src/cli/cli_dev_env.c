#include "cli/cli_dev_env.h"

#include <stdlib.h>

static const char *nonempty(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

void lpx_cli_dev_env(const char **tune, const char **trace) {
    *tune = nonempty("LPX_CUDA_TUNE");
    *trace = nonempty("LPX_CUDA_TRACE");
}
