#include "cli/cli_dev_env.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *nonempty(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

void lpx_cli_dev_env(const char *device, const char **tune, const char **trace) {
    bool cuda = device && !strncmp(device, "cuda", 4);
    *tune = nonempty(cuda ? "LPX_CUDA_TUNE" : "LPX_CPU_TUNE");
    *trace = cuda ? nonempty("LPX_CUDA_TRACE") : NULL;
}
