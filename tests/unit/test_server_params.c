/* The server's request parser (defaults, ranges, types, every field) and the
 * Prometheus rendering of its histograms. */
#include "server/metrics.h"
#include "server/openai.h"
#include "server/params.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse(lpx_srv_kind k, const char *body, const lpx_gen_defaults *gen, lpx_srv_params *p,
                  lpx_srv_error *e) {
    return lpx_srv_parse(k, body, strlen(body), gen, p, e);
}

/* Parses a body that must be refused; returns the param it blamed. */
static const char *refused(lpx_srv_kind k, const char *body, int status) {
    static lpx_srv_error e;
    lpx_srv_params p;
    bool ok = parse(k, body, NULL, &p, &e);
    CHECK(!ok);
    if (ok) lpx_srv_params_free(&p);
    CHECK(e.status == status);
    CHECK(e.message[0] != '\0');
    return e.param;
}

static void test_defaults(void) {
    lpx_srv_params p;
    lpx_srv_error e;
    lpx_gen_defaults gen = {
        .temperature = 0.6f, .top_p = 0.9f, .top_k = 50, .repetition_penalty = 1.05f, .bos_id = -1};
    CHECK(parse(LPX_SRV_COMPLETION, "{\"prompt\": \"hi\"}", &gen, &p, &e));
    CHECK(p.n_prompts == 1 && !strcmp(p.prompts[0].text, "hi") && p.n == 1 && !p.stream &&
          !p.logprobs);
    CHECK(p.req.max_tokens == 16); /* OpenAI's completions default */
    CHECK(fabsf(p.req.sampling.temperature - 0.6f) < 1e-6f && p.req.sampling.top_k == 50);
    CHECK(fabsf(p.req.sampling.top_p - 0.9f) < 1e-6f);
    CHECK(fabsf(p.req.sampling.repetition_penalty - 1.05f) < 1e-6f);
    CHECK(p.req.sampling.seed < 0 && !p.seed_given && p.req.skip_special);
    lpx_srv_params_free(&p);

    /* Without model defaults: OpenAI's (temperature 1); chat: up to the context. */
    CHECK(parse(LPX_SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL,
                &p, &e));
    CHECK(p.req.sampling.temperature == 1.0f && p.req.sampling.top_p == 1.0f);
    CHECK(p.req.max_tokens == -1 && p.n_messages == 1);
    lpx_srv_params_free(&p);

    CHECK(parse(LPX_SRV_GENERATE, "{\"prompt\": \"x\", \"temperature\": null}", &gen, &p, &e));
    CHECK(p.req.max_tokens == 128 && fabsf(p.req.sampling.temperature - 0.6f) < 1e-6f);
    lpx_srv_params_free(&p);
}

static void test_every_field(void) {
    lpx_srv_params p;
    lpx_srv_error e;
    const char *body =
        "{\"model\": \"m\", \"messages\": [{\"role\": \"developer\", \"content\": \"be brief\"},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
        " {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\"}],"
        " \"max_completion_tokens\": 7, \"temperature\": 0, \"top_p\": 0.5, \"top_k\": 3,"
        " \"min_p\": 0.1, \"presence_penalty\": -2, \"frequency_penalty\": 2,"
        " \"repetition_penalty\": 1.2, \"stop\": [\"x\", \"yz\"], \"seed\": 42, \"n\": 3,"
        " \"logprobs\": true, \"top_logprobs\": 4, \"ignore_eos\": true, \"stream\": true,"
        " \"stream_options\": {\"include_usage\": true}, \"skip_special_tokens\": false,"
        " \"user\": \"ignored\"}";
    CHECK(parse(LPX_SRV_CHAT, body, NULL, &p, &e));
    CHECK(!strcmp(p.model, "m") && p.n_messages == 3);
    CHECK(!strcmp(p.messages[0].role, "system") && !strcmp(p.messages[0].content, "be brief"));
    CHECK(!strcmp(p.messages[1].content, "ab") && !strcmp(p.messages[2].content, ""));
    CHECK(p.req.max_tokens == 7 && p.req.sampling.temperature == 0);
    CHECK(p.req.sampling.top_p == 0.5f && p.req.sampling.top_k == 3);
    CHECK(fabsf(p.req.sampling.min_p - 0.1f) < 1e-6f);
    CHECK(p.req.sampling.presence_penalty == -2 && p.req.sampling.frequency_penalty == 2);
    CHECK(fabsf(p.req.sampling.repetition_penalty - 1.2f) < 1e-6f);
    CHECK(p.req.n_stop == 2 && !strcmp(p.req.stop[1], "yz"));
    CHECK(p.seed_given && p.req.sampling.seed == 42 && p.n == 3);
    CHECK(p.logprobs && p.top_n == 4 && p.req.sampling.logprobs == 4);
    CHECK(p.req.ignore_eos && p.stream && p.include_usage && !p.req.skip_special);
    lpx_srv_params_free(&p);

    /* Completions: logprobs 0 still asks the engine for logprobs (one alternative). */
    CHECK(parse(LPX_SRV_COMPLETION, "{\"prompt\": [1, 2, 3], \"logprobs\": 0, \"stop\": \"s\"}",
                NULL, &p, &e));
    CHECK(p.prompts[0].n_ids == 3 && p.prompts[0].ids[2] == 3 && !p.prompts[0].text);
    CHECK(p.logprobs && p.top_n == 0 && p.req.sampling.logprobs == 1);
    CHECK(p.req.n_stop == 1 && !strcmp(p.req.stop[0], "s"));
    lpx_srv_params_free(&p);

    CHECK(parse(LPX_SRV_TOKENIZE, "{\"prompt\": [\"one\"], \"add_special_tokens\": false}", NULL,
                &p, &e));
    CHECK(!strcmp(p.prompts[0].text, "one") && !p.add_special && p.add_generation_prompt);
    lpx_srv_params_free(&p);
    CHECK(parse(LPX_SRV_DETOKENIZE, "{\"tokens\": [0, 5]}", NULL, &p, &e));
    CHECK(p.prompts[0].n_ids == 2 && p.prompts[0].ids[1] == 5);
    lpx_srv_params_free(&p);

    /* A batch of prompts, logit_bias, echo, the accepted-and-ignored fields. */
    CHECK(parse(LPX_SRV_COMPLETION,
                "{\"prompt\": [\"a\", \"b c\"], \"n\": 2, \"best_of\": 2, \"echo\": true,"
                " \"logit_bias\": {\"7\": -100, \"12\": 2.5}, \"suffix\": \"\", \"user\": \"u\","
                " \"stream\": true, \"stream_options\": {\"continuous_usage_stats\": true}}",
                NULL, &p, &e));
    CHECK(p.n_prompts == 2 && !strcmp(p.prompts[1].text, "b c") && p.n == 2 && p.echo);
    CHECK(p.req.sampling.n_logit_bias == 2 && p.req.sampling.logit_bias[0].id == 7 &&
          p.req.sampling.logit_bias[0].bias == -100 && p.req.sampling.logit_bias[1].bias == 2.5f);
    CHECK(p.continuous_usage && !p.include_usage);
    CHECK(lpx_srv_check_vocab(&p, 13, &e) && !lpx_srv_check_vocab(&p, 12, &e) &&
          !strcmp(e.param, "logit_bias"));
    lpx_srv_params_free(&p);
    CHECK(parse(LPX_SRV_COMPLETION, "{\"prompt\": [[1, 2], [3]]}", NULL, &p, &e));
    CHECK(p.n_prompts == 2 && p.prompts[1].n_ids == 1 && p.prompts[1].ids[0] == 3);
    lpx_srv_params_free(&p);
    CHECK(parse(
        LPX_SRV_CHAT,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\":"
        " {\"type\": \"text\"}, \"tools\": [], \"tool_choice\": \"none\", \"store\": false,"
        " \"metadata\": {\"k\": \"v\"}, \"service_tier\": \"auto\", \"parallel_tool_calls\": true}",
        NULL, &p, &e));
    lpx_srv_params_free(&p);
    CHECK(parse(LPX_SRV_COMPLETION,
                "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", "
                "\"json_schema\": {\"name\": \"n\", \"strict\": true, \"schema\": "
                "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}}",
                NULL, &p, &e));
    CHECK(p.req.output_format == LPX_OUTPUT_JSON_SCHEMA && p.req.json_schema &&
          strstr(p.req.json_schema, "\"properties\""));
    lpx_srv_params_free(&p);
    CHECK(parse(LPX_SRV_CHAT,
                "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                "\"response_format\": {\"type\": \"json_object\"}}",
                NULL, &p, &e));
    CHECK(p.req.output_format == LPX_OUTPUT_JSON_OBJECT && !p.req.json_schema);
    lpx_srv_params_free(&p);
}

static void test_refusals(void) {
    const lpx_srv_kind C = LPX_SRV_COMPLETION, H = LPX_SRV_CHAT;
    CHECK(!strcmp(refused(C, "{\"prompt\": ", 400), ""));
    CHECK(!strcmp(refused(C, "[]", 400), ""));
    CHECK(!strcmp(refused(C, "{}", 400), "prompt"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"\"}", 400), "prompt"));
    CHECK(!strcmp(refused(C, "{\"prompt\": [\"a\", [1]]}", 400), "prompt"));
    CHECK(!strcmp(refused(LPX_SRV_GENERATE, "{\"prompt\": [\"a\", \"b\"]}", 400), "prompt"));
    CHECK(!strcmp(refused(C,
                          "{\"prompt\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
                          "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
                          400),
                  "prompt"));
    CHECK(!strcmp(refused(C, "{\"prompt\": [\"a\", \"b\", \"c\", \"d\", \"e\"], \"n\": 16}", 400),
                  "n"));
    /* Nothing lpx does not do is accepted: unknown and unsupported fields name themselves. */
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"frobnicate\": 1}", 400), "frobnicate"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"suffix\": \"end\"}", 400), "suffix"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"best_of\": 3}", 400), "best_of"));
    /* echo with logprobs asks the engine for the prompt's (at least 1 computed). */
    for (int k = 0; k <= 3; k += 3) {
        char body[96];
        lpx_srv_params p;
        lpx_srv_error e;
        snprintf(body, sizeof body, "{\"prompt\": \"x\", \"echo\": true, \"logprobs\": %d}", k);
        CHECK(parse(C, body, NULL, &p, &e));
        CHECK(p.echo && p.logprobs && p.top_n == k && p.req.prompt_logprobs == (k ? k : 1));
        lpx_srv_params_free(&p);
        snprintf(body, sizeof body, "{\"prompt\": \"x\", \"logprobs\": %d}", k);
        CHECK(parse(C, body, NULL, &p, &e));
        CHECK(p.req.prompt_logprobs == 0);
        lpx_srv_params_free(&p);
    }
    /* vLLM's prompt_logprobs: the engine computes the larger count (at least 1), the
     * client's is kept; both endpoints, never with stream. */
    static const struct {
        lpx_srv_kind kind;
        const char *body;
        int32_t asked, engine;
    } plp[] = {
        {C, "{\"prompt\": \"x\", \"prompt_logprobs\": 0}", 0, 1},
        {C, "{\"prompt\": \"x\", \"prompt_logprobs\": 20}", 20, 20},
        {C, "{\"prompt\": \"x\", \"echo\": true, \"logprobs\": 5, \"prompt_logprobs\": 2}", 2, 5},
        {C, "{\"prompt\": \"x\", \"echo\": true, \"logprobs\": 0, \"prompt_logprobs\": 3}", 3, 3},
        {LPX_SRV_CHAT,
         "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
         "\"prompt_logprobs\": 4}",
         4, 4},
        {C, "{\"prompt\": \"x\", \"prompt_logprobs\": null}", -1, 0},
    };
    for (size_t i = 0; i < sizeof plp / sizeof *plp; i++) {
        lpx_srv_params p;
        lpx_srv_error e;
        CHECK(parse(plp[i].kind, plp[i].body, NULL, &p, &e));
        CHECK(p.prompt_logprobs == plp[i].asked && p.req.prompt_logprobs == plp[i].engine);
        lpx_srv_params_free(&p);
    }
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"prompt_logprobs\": 21}", 400),
                  "prompt_logprobs"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"prompt_logprobs\": -1}", 400),
                  "prompt_logprobs"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"prompt_logprobs\": true}", 400),
                  "prompt_logprobs"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"stream\": true, \"prompt_logprobs\": 0}", 400),
                  "prompt_logprobs"));
    CHECK(!strcmp(refused(LPX_SRV_GENERATE, "{\"prompt\": \"x\", \"prompt_logprobs\": 1}", 400),
                  "prompt_logprobs"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"echo\": 1}", 400), "echo"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"yaml\"}}", 400),
                  "response_format"));
    CHECK(
        !strcmp(refused(C,
                        "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", "
                        "\"json_schema\": {\"schema\": {\"type\": \"integer\", \"minimum\": 0}}}}",
                        400),
                "response_format"));
    CHECK(
        !strcmp(refused(C, "{\"prompt\": \"x\", \"logit_bias\": {\"a\": 1}}", 400), "logit_bias"));
    CHECK(
        !strcmp(refused(C, "{\"prompt\": \"x\", \"logit_bias\": {\"-1\": 1}}", 400), "logit_bias"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"logit_bias\": {\"1\": 101}}", 400),
                  "logit_bias"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"logit_bias\": {\"1\": \"5\"}}", 400),
                  "logit_bias"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"logit_bias\": [1]}", 400), "logit_bias"));
    CHECK(!strcmp(
        refused(C, "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": {\"x\": 1}}", 400),
        "stream_options"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"user\": 5}", 400), "user"));
    CHECK(!strcmp(refused(LPX_SRV_GENERATE, "{\"prompt\": \"x\", \"logprobs\": 1}", 400),
                  "logprobs"));
    CHECK(!strcmp(refused(LPX_SRV_GENERATE, "{\"prompt\": \"x\", \"echo\": true}", 400), "echo"));
    static const char *const chat_refused[][2] = {
        {"\"response_format\": {\"type\": \"json_object\", \"schema\": {}}", "response_format"},
        {"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {}}",
         "response_format"},
        {"\"tools\": [{\"type\": \"retrieval\"}]", "tools"},
        {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"type\": "
         "\"function\", \"function\": {\"name\": \"f\"}}]",
         "tools"},
        {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
         "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}",
         "tool_choice"},
        {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
         "\"tool_choice\": \"required\", \"response_format\": {\"type\": \"json_object\"}",
         "tool_choice"},
        {"\"tool_choice\": \"required\"", "tool_choice"},
        {"\"functions\": [{\"name\": \"f\"}]", "functions"},
        {"\"function_call\": {\"name\": \"f\"}", "function_call"},
        {"\"echo\": 1", "echo"},
        {"\"reasoning_effort\": \"low\"", "reasoning_effort"},
    };
    for (size_t i = 0; i < sizeof chat_refused / sizeof *chat_refused; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], %s}",
                 chat_refused[i][0]);
        CHECK(!strcmp(refused(H, body, 400), chat_refused[i][1]));
    }
    /* chat echo (vLLM's): the last message's content when the assistant's, parts joined
     * with newlines; nothing after another role's */
    static const struct {
        const char *msgs, *want;
    } echo[] = {
        {"[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": "
         "\"The\"}]",
         "The"},
        {"[{\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
         "{\"type\": \"text\", \"text\": \"b\"}]}]",
         "a\nb"},
        {"[{\"role\": \"assistant\", \"content\": \"x\"}, {\"role\": \"user\", \"content\": "
         "\"q\"}]",
         NULL},
        {"[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\"}]", NULL},
    };
    for (size_t i = 0; i < sizeof echo / sizeof *echo; i++) {
        char body[512];
        lpx_srv_params p;
        lpx_srv_error e;
        snprintf(body, sizeof body, "{\"messages\": %s, \"echo\": true, \"logprobs\": true}",
                 echo[i].msgs);
        CHECK(parse(H, body, NULL, &p, &e));
        CHECK(echo[i].want ? p.chat_echo && !strcmp(p.chat_echo, echo[i].want) : !p.chat_echo);
        CHECK(p.req.prompt_logprobs == 0); /* chat echo computes no prompt logprobs */
        lpx_srv_params_free(&p);
    }
    CHECK(!strcmp(refused(C, "{\"prompt\": [1, -2]}", 400), "prompt"));
    CHECK(!strcmp(refused(C, "{\"prompt\": [1, 2.5]}", 400), "prompt"));
    CHECK(!strcmp(refused(C, "{\"prompt\": []}", 400), "prompt"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"model\": 3}", 400), "model"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"temperature\": 2.01}", 400), "temperature"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"temperature\": 1e999}", 400), "temperature"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"top_p\": 0}", 400), "top_p"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"top_k\": -2}", 400), "top_k"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"min_p\": 1.5}", 400), "min_p"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"presence_penalty\": 3}", 400),
                  "presence_penalty"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"repetition_penalty\": 0}", 400),
                  "repetition_penalty"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"max_tokens\": 0}", 400), "max_tokens"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"max_tokens\": \"8\"}", 400), "max_tokens"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"n\": 17}", 400), "n"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"seed\": 1.5}", 400), "seed"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"logprobs\": true}", 400), "logprobs"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"stop\": [\"\"]}", 400), "stop"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"stop\": {}}", 400), "stop"));
    CHECK(!strcmp(refused(C,
                          "{\"prompt\": \"x\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\","
                          "\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\","
                          "\"17\"]}",
                          400),
                  "stop"));
    CHECK(!strcmp(refused(C, "{\"prompt\": \"x\", \"stream\": 1}", 400), "stream"));
    CHECK(
        !strcmp(refused(C, "{\"prompt\": \"x\", \"stream_options\": {}}", 400), "stream_options"));
    CHECK(!strcmp(refused(H, "{\"messages\": []}", 400), "messages"));
    CHECK(!strcmp(refused(H, "{\"messages\": {}}", 400), "messages"));
    CHECK(!strcmp(refused(H, "{\"messages\": [{\"role\": \"user\"}]}", 400), "messages"));
    CHECK(!strcmp(refused(H, "{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}", 400),
                  "messages"));
    CHECK(!strcmp(refused(H,
                          "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                          "\"image_url\"}]}]}",
                          400),
                  "messages"));
    CHECK(!strcmp(refused(H,
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                          "\"top_logprobs\": 2}",
                          400),
                  "top_logprobs"));
    CHECK(!strcmp(refused(H,
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                          "\"top_logprobs\": 21, \"logprobs\": true}",
                          400),
                  "top_logprobs"));
    CHECK(!strcmp(refused(LPX_SRV_GENERATE, "{\"prompt\": \"x\", \"n\": 2}", 400), "n"));
    CHECK(!strcmp(refused(LPX_SRV_DETOKENIZE, "{\"tokens\": \"1\"}", 400), "tokens"));

    /* The error object carries all four fields. */
    lpx_srv_error e;
    lpx_srv_fail(&e, 400, "invalid_request_error", NULL, "n", "bad \"n\"");
    char *s = lpx_oa_error(&e);
    CHECK(s && !strcmp(s, "{\"error\":{\"message\":\"bad \\\"n\\\"\",\"type\":"
                          "\"invalid_request_error\",\"param\":\"n\",\"code\":null}}"));
    free(s);
}

static void test_metrics_text(void) {
    lpx_metrics m;
    lpx_metrics_init(&m);
    lpx_histogram_observe(&m.ttft, 0.003); /* bucket le=0.005 */
    lpx_histogram_observe(&m.ttft, 0.05);  /* le=0.06 */
    lpx_histogram_observe(&m.ttft, 1e6);   /* +Inf only */
    lpx_metrics_finish(&m, LPX_FINISH_LENGTH, 1.5, -1);
    lpx_engine_stats st;
    memset(&st, 0, sizeof st);
    st.n_running = 2;
    st.kv_blocks_total = 8;
    st.kv_blocks_used = 2;
    st.generated_tokens = 77;
    char *t = lpx_metrics_render(&m, &st, 1, "m", NULL, 0);
    CHECK(t != NULL);
    CHECK(strstr(t, "lpx:num_requests_running{model_name=\"m\"} 2\n") != NULL);
    CHECK(strstr(t, "lpx:kv_cache_usage_perc{model_name=\"m\"} 0.25\n") != NULL);
    CHECK(strstr(t, "# TYPE lpx:generation_tokens_total counter\n"
                    "lpx:generation_tokens_total{model_name=\"m\"} 77\n") != NULL);
    CHECK(strstr(t, "lpx:time_to_first_token_seconds_bucket{le=\"0.001\",model_name=\"m\"} 0\n"));
    CHECK(strstr(t, "lpx:time_to_first_token_seconds_bucket{le=\"0.005\",model_name=\"m\"} 1\n"));
    CHECK(strstr(t, "lpx:time_to_first_token_seconds_bucket{le=\"0.06\",model_name=\"m\"} 2\n"));
    CHECK(strstr(t, "lpx:time_to_first_token_seconds_bucket{le=\"2560\",model_name=\"m\"} 2\n"));
    CHECK(strstr(t, "lpx:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 3\n"));
    CHECK(strstr(t, "lpx:time_to_first_token_seconds_count{model_name=\"m\"} 3\n"));
    CHECK(strstr(t, "lpx:request_success_total{finished_reason=\"length\",model_name=\"m\"} 1\n"));
    CHECK(strstr(t, "lpx:e2e_request_latency_seconds_sum{model_name=\"m\"} 1.5\n"));
    CHECK(!strstr(t, "lpx:gpu_"));
    free(t);

    lpx_gpu_sample g[2];
    memset(g, 0, sizeof g);
    for (int i = 0; i < 2; i++) {
        g[i].util_gpu = 50 + i;
        g[i].mem_used = 1 << 20;
        g[i].mem_total = 2 << 20;
        g[i].temp_c = 40;
        g[i].power_mw = 250500;
        g[i].sm_clock_mhz = 1980;
        g[i].mem_clock_mhz = LPX_TEL_NA;
    }
    /* a served name with the text format's special characters stays one label value */
    t = lpx_metrics_render(&m, &st, 1, "a\"b\\c\nd", NULL, 0);
    CHECK(t != NULL);
    CHECK(strstr(t, "lpx:num_requests_running{model_name=\"a\\\"b\\\\c\\nd\"} 2\n") != NULL);
    free(t);

    t = lpx_metrics_render(&m, &st, 1, "m", g, 2);
    CHECK(strstr(t, "lpx:gpu_utilization_perc{gpu=\"1\",model_name=\"m\"} 51\n") != NULL);
    CHECK(strstr(t, "lpx:gpu_power_watts{gpu=\"0\",model_name=\"m\"} 250.5") != NULL);
    CHECK(strstr(t, "lpx:gpu_memory_clock_mhz") == NULL);
    free(t);
    lpx_metrics_destroy(&m);
}

int main(void) {
    test_defaults();
    test_every_field();
    test_refusals();
    test_metrics_text();
    TEST_DONE();
}
