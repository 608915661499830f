/* Quality flags: each fires on crafted text and stays quiet on clean text. */
#include "batch/input.h"
#include "batch/quality.h"
#include "test.h"

#include <string.h>

static uint32_t check(const char *s, bool length) {
    lpx_bq_opts o;
    lpx_bq_opts_init(&o);
    return lpx_bq_check(&o, s, strlen(s), length);
}

int main(void) {
    const char *clean = "The capital of France is Paris. It has (about) 2.1 million people, "
                        "and \"the city of light\" is its nickname [citation].";
    CHECK(check(clean, false) == 0);
    CHECK(check(clean, true) == LPX_BQ_TRUNCATED);
    /* empty: nothing, or white space only (an ideographic space too) */
    CHECK(check("", false) == LPX_BQ_EMPTY && check("", true) == (LPX_BQ_EMPTY | LPX_BQ_TRUNCATED));
    CHECK(check(" \n\t\xe3\x80\x80", false) == LPX_BQ_EMPTY);
    CHECK(check(" .", false) == 0 && check("\xc3\xa9", false) == 0);

    /* repetition: a loop of the same phrase */
    CHECK(check("I am a bot. I am a bot. I am a bot. I am a bot. I am a bot. I am a bot.", false) ==
          LPX_BQ_REPETITIVE);
    /* CJK: one unit per character, no spaces needed */
    CHECK(check("我喜欢你我喜欢你我喜欢你我喜欢你我喜欢你", false) == LPX_BQ_REPETITIVE);
    CHECK(check("今天天气很好，我们去公园散步吧，然后吃午饭。", false) == 0);
    /* short text never counts as repetitive (fewer than min_ngrams n-grams) */
    CHECK(check("yes yes yes", false) == 0);
    int64_t n;
    CHECK(lpx_bq_repeat_ratio("a b c a b c", 11, 3, &n) == 0.25 && n == 4);
    /* threshold configurable */
    lpx_bq_opts o;
    lpx_bq_opts_init(&o);
    const char *half = "one two three four five six seven eight one two three four";
    CHECK(lpx_bq_check(&o, half, strlen(half), false) == 0);
    o.repeat_ratio = 0.1;
    CHECK(lpx_bq_check(&o, half, strlen(half), false) == LPX_BQ_REPETITIVE);

    /* leaked special tokens */
    CHECK(check("Sure, here it is.<|im_end|>", false) == LPX_BQ_LEAKED);
    CHECK(check("<|endoftext|>", false) == LPX_BQ_LEAKED);
    CHECK(check("Use im_end and endoftext as words", false) == 0);
    const char *custom[] = {"<end_of_turn>"};
    o.specials = custom;
    o.n_specials = 1;
    CHECK(lpx_bq_check(&o, "hi<end_of_turn>", 15, false) == LPX_BQ_LEAKED);
    CHECK(lpx_bq_check(&o, "hi<|im_end|>", 12, false) == 0);

    /* brackets and quotes, ASCII and CJK */
    CHECK(check("f(x) = [a, {b}]", false) == 0);
    CHECK(check("f(x = [a, b]", false) == LPX_BQ_UNBALANCED);
    CHECK(check("a) b", false) == LPX_BQ_UNBALANCED);
    CHECK(check("(a]", false) == LPX_BQ_UNBALANCED);
    CHECK(check("he said \"hi", false) == LPX_BQ_UNBALANCED);
    CHECK(check("「こんにちは」『本』“quote”（注）《书》【注】", false) == 0);
    CHECK(check("「こんにちは", false) == LPX_BQ_UNBALANCED);
    CHECK(check("『本」", false) == LPX_BQ_UNBALANCED);
    CHECK(check("《书》【注", false) == LPX_BQ_UNBALANCED);
    CHECK(check("“open", false) == LPX_BQ_UNBALANCED);
    CHECK(check("（注", false) == LPX_BQ_UNBALANCED);
    /* a right single quote is also the apostrophe */
    CHECK(check("don’t", false) == 0);

    /* several flags at once */
    CHECK(check("(<|im_end|>", true) == (LPX_BQ_TRUNCATED | LPX_BQ_LEAKED | LPX_BQ_UNBALANCED));

    /* shards: stable values (FNV-1a 64), every id in exactly one */
    CHECK(lpx_batch_shard_of("", 7) == (int32_t)(1469598103934665603ull % 7));
    CHECK(lpx_batch_shard_of("a", 1) == 0);
    int counts[4] = {0};
    char id[16];
    for (int i = 0; i < 400; i++) {
        snprintf(id, sizeof id, "req-%d", i);
        int32_t s = lpx_batch_shard_of(id, 4);
        CHECK(s >= 0 && s < 4);
        if (s >= 0 && s < 4) counts[s]++;
    }
    for (int k = 0; k < 4; k++)
        CHECK(counts[k] > 50);
    TEST_DONE();
}
