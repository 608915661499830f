/* libFuzzer target: the server's request parser (src/server/params.c) on
 * arbitrary bodies for every endpoint, then the error object of a refusal.
 * The first byte picks the endpoint. Built by scripts/fuzz.sh. */
#include "server/openai.h"
#include "server/params.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    lpx_srv_kind kind = (lpx_srv_kind)(data[0] % 5);
    lpx_gen_defaults gen = {
        .temperature = 0.2f, .top_p = 0.9f, .top_k = -1, .repetition_penalty = -1, .bos_id = -1};
    lpx_srv_params p;
    lpx_srv_error e;
    if (lpx_srv_parse(kind, (const char *)data + 1, size - 1, data[0] & 8 ? &gen : NULL, &p, &e)) {
        volatile size_t sink = p.n_prompts + p.n_messages + (size_t)p.n;
        for (size_t i = 0; i < p.n_messages; i++)
            sink += strlen(p.messages[i].role) + strlen(p.messages[i].content);
        for (size_t i = 0; i < p.req.n_stop; i++)
            sink += strlen(p.req.stop[i]);
        for (size_t i = 0; i < p.n_prompts; i++)
            sink += p.prompts[i].text ? strlen(p.prompts[i].text) : p.prompts[i].n_ids;
        (void)sink;
        lpx_srv_params_free(&p);
    } else {
        char *s = lpx_oa_error(&e);
        if (!s || e.status < 400 || e.status > 599) abort();
        free(s);
    }
    return 0;
}
