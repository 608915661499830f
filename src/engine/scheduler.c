/* Continuous batching. Each step: the running sequences first, oldest first,
 * each with its next chunk (a decode token, or up to the token budget of
 * prompt); a sequence that needs a block when none is free preempts the
 * newest running one (possibly itself). Then, if nothing was preempted,
 * waiting sequences are admitted in order while the sequence limit, the token
 * budget and free blocks allow, except those of a group (one client request's
 * choices) that already runs max_seqs_per_group sequences. The oldest running sequence can always
 * proceed (no sequence is longer than the pool), so there is no deadlock.
 *
 * The prefix cache hit is taken here: an admitted sequence starts with the
 * cached blocks of its longest cached prefix (counted as computed), and a
 * sequence still in its prompt takes, before each chunk, the blocks another
 * sequence has cached meanwhile (two requests with one system prompt
 * admitted together compute it about once).
 *
 * A sequence that wants its prompt's logprobs takes no cached blocks until its
 * first output token, and its chunks are cut so that a step's prompt-logprob
 * rows stay within LPX_PLP_ROWS (the first such sequence always gets some). */
#include "engine/engine_impl.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

bool lpx_seq_list_reserve(lpx_seq_list *l, int32_t n) {
    if (n <= l->cap) return true;
    int32_t cap = l->cap ? l->cap : 16;
    while (cap < n)
        cap *= 2;
    lpx_seq **v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    l->v = v;
    l->cap = cap;
    return true;
}

static bool grow(lpx_seq_list *l) {
    return lpx_seq_list_reserve(l, l->n + 1);
}

bool lpx_seq_list_push(lpx_seq_list *l, lpx_seq *s) {
    if (!grow(l)) return false;
    l->v[l->n++] = s;
    return true;
}

bool lpx_seq_list_push_front(lpx_seq_list *l, lpx_seq *s) {
    if (!grow(l)) return false;
    memmove(l->v + 1, l->v, (size_t)l->n * sizeof *l->v);
    l->v[0] = s;
    l->n++;
    return true;
}

void lpx_seq_list_remove(lpx_seq_list *l, lpx_seq *s) {
    for (int32_t i = 0; i < l->n; i++)
        if (l->v[i] == s) {
            memmove(l->v + i, l->v + i + 1, (size_t)(l->n - i - 1) * sizeof *l->v);
            l->n--;
            return;
        }
}

static void preempt(lpx_engine *e, lpx_seq *s) {
    lpx_kv_release(&e->pool, &s->bt);
    s->n_computed = 0; /* prompt + output are recomputed when it runs again */
    s->n_preempt++;
    lpx_seq_list_remove(&e->running, s);
    lpx_seq_list_push_front(&e->waiting, s); /* room reserved by lpx_schedule */
    pthread_mutex_lock(&e->mu);
    e->st.n_preemptions++;
    pthread_mutex_unlock(&e->mu);
}

/* Moves s->n_computed past the cached blocks that continue its tokens. */
static lpx_status take_cached(lpx_engine *e, lpx_seq *s, int64_t *hits) {
    if (lpx_seq_plp_pending(s)) return LPX_OK; /* its prompt's logits are wanted */
    int32_t n;
    LPX_TRY(lpx_kv_match(&e->pool, &s->bt, s->tokens, s->n_tokens, s->n_computed, &n));
    *hits += n - s->n_computed;
    if (s->n_preempt == 0) s->n_cached += n - s->n_computed; /* all prompt until an output */
    s->n_computed = n;
    return LPX_OK;
}

/* n_new cut so that s's prompt-logprob rows fit the step's *left (and taken from it). */
static int32_t plp_cap(const lpx_seq *s, int32_t n_new, int32_t *left) {
    if (!lpx_seq_plp_pending(s)) return n_new;
    int32_t end = s->n_computed + n_new < s->n_prompt - 1 ? s->n_computed + n_new : s->n_prompt - 1;
    int32_t rows = end > s->n_computed ? end - s->n_computed : 0;
    if (rows > *left) n_new = rows = *left;
    *left -= rows;
    return n_new;
}

/* Whether group already has max_seqs_per_group sequences running. */
static bool group_full(const lpx_engine *e, uint64_t group) {
    int32_t cap = e->cfg.max_seqs_per_group, n = 0;
    if (cap <= 0) return false;
    for (int32_t i = 0; i < e->running.n && n < cap; i++)
        n += e->running.v[i]->group == group;
    return n >= cap;
}

bool lpx_schedule_can_admit(const lpx_engine *e) {
    if (e->running.n >= e->cfg.max_num_seqs) return false;
    for (int32_t w = 0; w < e->waiting.n; w++)
        if (!group_full(e, e->waiting.v[w]->group)) return true;
    return false;
}

lpx_status lpx_schedule(lpx_engine *e) {
    e->sched.n = 0;
    /* Reserve first so that moving sequences between lists cannot fail. */
    int32_t all = e->waiting.n + e->running.n;
    if (!lpx_seq_list_reserve(&e->waiting, all) || !lpx_seq_list_reserve(&e->running, all) ||
        !lpx_seq_list_reserve(&e->sched, all))
        return lpx_errorf(LPX_ERR_NOMEM, "scheduler: %d sequences: out of memory", (int)all);
    int32_t budget = e->cfg.max_num_batched_tokens, plp_left = LPX_PLP_ROWS;
    bool preempted = false;
    lpx_status st = LPX_OK;
    int64_t queries = 0, hits = 0;
    for (int32_t i = 0; i < e->running.n && budget > 0;) {
        lpx_seq *s = e->running.v[i];
        if (s->n_computed + 1 < s->n_tokens && (st = take_cached(e, s, &hits)) != LPX_OK) break;
        int32_t n_new = s->n_tokens - s->n_computed;
        if (n_new > budget) n_new = budget;
        if ((n_new = plp_cap(s, n_new, &plp_left)) == 0) {
            i++; /* no prompt-logprob rows left in this step: the next one */
            continue;
        }
        while (!lpx_kv_reserve(&e->pool, &s->bt, (int64_t)s->n_computed + n_new, &st)) {
            if (st != LPX_OK) break;
            lpx_seq *victim = e->running.v[e->running.n - 1];
            preempt(e, victim);
            preempted = true;
            if (victim == s) break;
        }
        if (st != LPX_OK || i >= e->running.n || e->running.v[i] != s)
            break; /* s itself was preempted */
        s->n_new = n_new;
        budget -= n_new;
        lpx_seq_list_push(&e->sched, s);
        i++;
    }
    /* Admission in order, passing over a sequence whose group already runs its cap
     * (a later request's sequences go first: one n=16 request cannot hold every slot). */
    for (int32_t w = 0; st == LPX_OK && !preempted && w < e->waiting.n &&
                        e->running.n < e->cfg.max_num_seqs && budget > 0;) {
        lpx_seq *s = e->waiting.v[w]; /* no blocks, nothing computed */
        if (group_full(e, s->group)) {
            w++;
            continue;
        }
        int64_t hit = 0;
        if ((st = take_cached(e, s, &hit)) != LPX_OK) break;
        int32_t n_new = s->n_tokens - s->n_computed;
        if (n_new > budget) n_new = budget;
        if ((n_new = plp_cap(s, n_new, &plp_left)) == 0) break;
        if (!lpx_kv_reserve(&e->pool, &s->bt, (int64_t)s->n_computed + n_new, &st)) {
            lpx_kv_release(&e->pool, &s->bt); /* the cached blocks stay cached */
            if (s->n_preempt == 0) s->n_cached = 0;
            s->n_computed = 0;
            break;
        }
        if (e->pool.caching) queries += s->n_tokens;
        hits += hit;
        lpx_seq_list_remove(&e->waiting, s);
        lpx_seq_list_push(&e->running, s);
        lpx_seq_list_push(&e->sched, s);
        s->n_new = n_new;
        budget -= n_new;
    }
    pthread_mutex_lock(&e->mu);
    e->st.prefix_cache_queries += queries;
    e->st.prefix_cache_hits += hits;
    pthread_mutex_unlock(&e->mu);
    return st;
}
