/* cublaslt_algos.c: the process's table of cuBLASLt heuristic answers (cublaslt_algos.h). A fixed
 * array searched in full, under one mutex: it is read only when a gemm step meets an M or K its
 * own plans do not hold (a new prefill length), never on a run that repeats one. */
#include <pthread.h>

#include "delegates/cuda/cublaslt_algos.h"

/* Room for every shape of a decoder's GEMMs at the counts a step's plans keep (gemm_cublaslt.c's
 * GEMM_PLANS), times the alignment tiers and two workspace caps */
#define ALGO_SLOTS 512

typedef struct algo_slot {
    int used;
    lt_algo_key key;
    lt_algo_answer answer;
} algo_slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static algo_slot slots[ALGO_SLOTS];
static unsigned next_slot; /* the slot a new answer takes: the oldest once all are used */
static uint64_t asks;

static int same(const lt_algo_key *a, const lt_algo_key *b)
{
    return a->device == b->device && a->dtype == b->dtype && a->flags == b->flags &&
           a->align == b->align && a->m == b->m && a->n == b->n && a->k == b->k && a->cap == b->cap;
}

static algo_slot *lookup(const lt_algo_key *key)
{
    for (unsigned i = 0; i < ALGO_SLOTS; i++)
        if (slots[i].used && same(&slots[i].key, key))
            return &slots[i];
    return NULL;
}

int baton__lt_algo_find(const lt_algo_key *key, lt_algo_answer *out)
{
    pthread_mutex_lock(&lock);
    const algo_slot *s = lookup(key);
    if (s)
        *out = s->answer;
    pthread_mutex_unlock(&lock);
    return s != NULL;
}

void baton__lt_algo_keep(const lt_algo_key *key, const lt_algo_answer *answer)
{
    pthread_mutex_lock(&lock);
    asks++;
    algo_slot *s = lookup(key); /* another thread asked the same meanwhile: one copy */
    if (!s) {
        s = &slots[next_slot];
        next_slot = (next_slot + 1) % ALGO_SLOTS;
    }
    s->used = 1;
    s->key = *key;
    s->answer = *answer;
    pthread_mutex_unlock(&lock);
}

uint64_t baton__lt_algo_asks(void)
{
    pthread_mutex_lock(&lock);
    uint64_t n = asks;
    pthread_mutex_unlock(&lock);
    return n;
}
