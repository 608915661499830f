#include "sample/request_body.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool fail(lpx_body_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail(lpx_body_error *e, const char *param, const char *fmt, ...) {
    snprintf(e->param, sizeof e->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

/* A field that is absent or JSON null counts as not given (as OpenAI's API). */
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

bool lpx_body_num(const cJSON *o, const char *name, double lo, double hi, bool lo_open, double *out,
                  bool *given, lpx_body_error *e) {
    const cJSON *v = field(o, name);
    if (given) *given = v != NULL;
    if (!v) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return fail(e, name, "'%s' must be a number", name);
    double x = v->valuedouble;
    if (x < lo || x > hi || (lo_open && x == lo))
        return fail(e, name, "'%s' is %g: expected a value in %c%g, %g]", name, x,
                    lo_open ? '(' : '[', lo, hi);
    *out = x;
    return true;
}

bool lpx_body_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out,
                  bool *given, lpx_body_error *e) {
    const cJSON *v = field(o, name);
    if (given) *given = v != NULL;
    if (!v) return true;
    /* 2^63 bounds the double range an int64 takes exactly enough for limits. */
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) >= 9.2e18)
        return fail(e, name, "'%s' must be an integer", name);
    double x = v->valuedouble;
    if (x < (double)lo || x > (double)hi)
        return fail(e, name, "'%s' is %.0f: expected an integer in [%lld, %lld]", name, x,
                    (long long)lo, (long long)hi);
    *out = (int64_t)x;
    return true;
}

bool lpx_body_bool(const cJSON *o, const char *name, bool *out, lpx_body_error *e) {
    const cJSON *v = field(o, name);
    if (!v) return true;
    if (!cJSON_IsBool(v)) return fail(e, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return true;
}

bool lpx_body_sampling(const cJSON *o, lpx_sampling_params *s, bool *seed_given,
                       lpx_body_error *e) {
    double x;
    bool given;
    int64_t k;
    if (!lpx_body_num(o, "temperature", 0, 2, false, &x, &given, e)) return false;
    if (given) s->temperature = (float)x;
    if (!lpx_body_num(o, "top_p", 0, 1, true, &x, &given, e)) return false;
    if (given) s->top_p = (float)x;
    if (!lpx_body_num(o, "min_p", 0, 1, false, &x, &given, e)) return false;
    if (given) s->min_p = (float)x;
    if (!lpx_body_int(o, "top_k", -1, 1 << 30, &k, &given, e)) return false;
    if (given) s->top_k = (int32_t)k;
    if (!lpx_body_num(o, "presence_penalty", -2, 2, false, &x, &given, e)) return false;
    if (given) s->presence_penalty = (float)x;
    if (!lpx_body_num(o, "frequency_penalty", -2, 2, false, &x, &given, e)) return false;
    if (given) s->frequency_penalty = (float)x;
    if (!lpx_body_num(o, "repetition_penalty", 0, 10, true, &x, &given, e)) return false;
    if (given) s->repetition_penalty = (float)x;
    if (!lpx_body_int(o, "seed", 0, INT64_MAX / 2, &k, seed_given, e)) return false;
    if (*seed_given) s->seed = k;
    return true;
}

bool lpx_body_logprobs(const cJSON *o, bool chat, bool *on, int32_t *top_n, lpx_body_error *e) {
    int64_t k = 0;
    bool given;
    *on = false;
    if (chat) {
        if (!lpx_body_bool(o, "logprobs", on, e)) return false;
        if (!lpx_body_int(o, "top_logprobs", 0, 20, &k, &given, e)) return false;
        if (given && k > 0 && !*on)
            return fail(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    } else {
        /* Completions: logprobs is the number of top alternatives (0 = chosen only). */
        if (!lpx_body_int(o, "logprobs", 0, 20, &k, &given, e)) return false;
        *on = given;
    }
    *top_n = *on ? (int32_t)k : 0;
    return true;
}

bool lpx_body_prompt_logprobs(const cJSON *o, int32_t *n, lpx_body_error *e) {
    int64_t k = -1;
    bool given, stream = false;
    if (!lpx_body_int(o, "prompt_logprobs", 0, 20, &k, &given, e) ||
        !lpx_body_bool(o, "stream", &stream, e))
        return false;
    /* A stream has no place for them (vLLM refuses them too): never accepted unsent. */
    if (given && stream)
        return fail(e, "prompt_logprobs", "'prompt_logprobs' is not available with 'stream': true");
    *n = given ? (int32_t)k : -1;
    return true;
}

bool lpx_body_max_tokens(const cJSON *o, bool chat, const char *name, int32_t *out, bool *given,
                         lpx_body_error *e) {
    if (!name)
        name = chat && field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    int64_t k;
    if (!lpx_body_int(o, name, 1, INT32_MAX, &k, given, e)) return false;
    if (*given) *out = (int32_t)k;
    return true;
}

bool lpx_body_n(const cJSON *o, int32_t *n, lpx_body_error *e) {
    int64_t k;
    bool given;
    if (!lpx_body_int(o, "n", 1, LPX_BODY_MAX_N, &k, &given, e)) return false;
    *n = given ? (int32_t)k : 1;
    return true;
}
