#include "cli/cli_dev_env.h"

#include "engine/engine.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *nonempty(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

void lpx_cli_dev_env(const char *device, const char **tune, const char **trace) {
    /* no --device: the backend the engine will pick (a GPU if one answers), so that
     * LPX_CPU_TUNE never reaches the CUDA backend */
    if (!device || !device[0]) device = lpx_engine_default_device();
    bool cuda = !strncmp(device, "cuda", 4);
    *tune = nonempty(cuda ? "LPX_CUDA_TUNE" : "LPX_CPU_TUNE");
    *trace = cuda ? nonempty("LPX_CUDA_TRACE") : NULL;
}
