/*
 * _pkernel: the pipelined (ASAP / AFD) event loop of asaptrace.replay.mechanics.pipelined, compiled.
 *
 * Why this exists: a serving sweep (3 policies x 10 rates x 300 simulated s) spends ~95 % of its
 * time in the Python pipeline's item loop (one heap event per attention, dispatch, MoE and combine
 * of every (batch, layer) item).  This is the same loop over plain C structs: the same events, the
 * same heap key (t_ns, priority, seq) with seq stamped in the order the Python handlers yield their
 * follow-ups, the same handlers in the same statement order, int64 ns arithmetic and the one float
 * operation (no overlap: round(comm_share * (dispatch + combine)), a double product rounded half to
 * even, as Python's round does).  The Python engine (Pipeline) stays the reference; the tests run
 * both on the same cases and compare every span.
 *
 * What stays in Python: batch formation.  The kernel calls former.next_batch(t, group, idle)
 * exactly where and as often as Pipeline._assign does (an int answer T, "no batch for any group
 * before T", spares every call before T in both), and copies the batch's four per-layer int64
 * arrays (anything else is converted by the `conv` callable first).  Results go back as int64
 * byte buffers that the Python wrapper turns into a PipelineTrace.  Except for asap's and
 * afd-pingpong's built-in online formers: run_formed runs them here ("the compiled token former"
 * below), asking Python only for a new batch's costs.
 *
 * Deliberate differences from the reference, only for inputs the reference mishandles anyway: a
 * batch id handed out twice, a batch with no layer or with per-layer arrays shorter than its
 * attention array, and times beyond int64 raise ValueError / OverflowError here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* event kinds and their priorities (lower first at equal time), as the Python event classes say */
enum { K_BATCH_DONE, K_ATTN_DONE, K_POOL_DONE, K_ATTN_READY, K_POOL_ARRIVE, K_WAKEUP };
static const uint64_t PRIO[] = {5, 10, 10, 20, 20, 40};
static const char *const KIND_NAME[] = {"BatchDone", "AttentionDone", "PoolDone",
                                        "AttentionReady", "PoolArrive", "Wakeup"};
#define SEQ_BITS 56

/* ------------------------------------------------------------------------------------ vectors */

/* make room for one more element in a doubling array (*p of *cap elements of `size` bytes, n used) */
static int grow(void **p, size_t *cap, size_t n, size_t size, size_t first) {
    if (n < *cap) return 0;
    size_t want = *cap ? *cap * 2 : first;
    void *q = want > SIZE_MAX / size ? NULL : realloc(*p, want * size);
    if (!q) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = want;
    return 0;
}

typedef struct {
    int64_t *p;
    size_t n, cap;
} Vec;

static int vec_push(Vec *v, int64_t x) {
    if (grow((void **)&v->p, &v->cap, v->n, sizeof *v->p, 64) < 0) return -1;
    v->p[v->n++] = x;
    return 0;
}

/* FIFO of fixed-width records (int64 fields), a ring buffer (capacity a power of two) */
typedef struct {
    int64_t *p;
    size_t head, n, cap, w;
} Ring;

static inline int ring_put(Ring *r, const int64_t *rec) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        int64_t *p = malloc(cap * r->w * sizeof *p);
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < r->n; i++)
            memcpy(p + i * r->w, r->p + ((r->head + i) & (r->cap - 1)) * r->w, r->w * sizeof *p);
        free(r->p);
        r->p = p;
        r->head = 0;
        r->cap = cap;
    }
    int64_t *to = r->p + ((r->head + r->n) & (r->cap - 1)) * r->w;
    for (size_t i = 0; i < r->w; i++) to[i] = rec[i]; /* 2 or 3 fields: no memcpy call */
    r->n++;
    return 0;
}

static inline void ring_take(Ring *r, int64_t *rec) {
    const int64_t *from = r->p + r->head * r->w;
    for (size_t i = 0; i < r->w; i++) rec[i] = from[i];
    r->head = (r->head + 1) & (r->cap - 1);
    r->n--;
}

/* --------------------------------------------------------------------------------------- heap */

typedef struct {
    int64_t t;
    uint64_t key;  /* priority << SEQ_BITS | seq */
    uint64_t what; /* (internal batch index + 1) << 24 | layer << 3 | kind: 24 bytes an event */
} Ev;

#define LAYER_BITS 21 /* a batch has fewer than 2^21 layers (add_batch, former_batch check) */
static inline Ev ev_of(int64_t t, uint64_t key, int64_t b, int64_t layer, int kind) {
    Ev e = {t, key, (uint64_t)(b + 1) << (LAYER_BITS + 3) | (uint64_t)layer << 3 | (uint64_t)kind};
    return e;
}
static inline int64_t ev_b(const Ev *e) { return (int64_t)(e->what >> (LAYER_BITS + 3)) - 1; }
static inline int64_t ev_layer(const Ev *e) { return (int64_t)((e->what >> 3) & ((1u << LAYER_BITS) - 1)); }
static inline int ev_kind(const Ev *e) { return (int)(e->what & 7); }

typedef struct {
    Ev *p;
    size_t n, cap;
} Heap;

static inline int ev_less(const Ev *a, const Ev *b) { return a->t < b->t || (a->t == b->t && a->key < b->key); }

static int heap_push(Heap *h, Ev e) {
    if (grow((void **)&h->p, &h->cap, h->n, sizeof *h->p, 256) < 0) return -1;
    size_t i = h->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!ev_less(&e, &h->p[up])) break;
        h->p[i] = h->p[up];
        i = up;
    }
    h->p[i] = e;
    return 0;
}

static Ev heap_pop(Heap *h) {
    Ev top = h->p[0];
    Ev last = h->p[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && ev_less(&h->p[c + 1], &h->p[c])) c++;
        if (!ev_less(&h->p[c], &last)) break;
        h->p[i] = h->p[c];
        i = c;
    }
    if (n) h->p[i] = last;
    return top;
}

/* ------------------------------------------------------------------------ batch id -> index map */

typedef struct {
    int64_t *keys;
    int64_t *vals; /* -1: empty */
    size_t cap, n;
} Map;

static inline size_t mix(int64_t k) {
    uint64_t x = (uint64_t)k + 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return (size_t)(x ^ (x >> 31));
}

static int64_t map_get(const Map *m, int64_t k) {
    if (!m->cap) return -1;
    for (size_t i = mix(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->vals[i] < 0) return -1;
        if (m->keys[i] == k) return m->vals[i];
    }
}

static int map_put(Map *m, int64_t k, int64_t v) {
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        int64_t *keys = malloc(cap * sizeof *keys), *vals = malloc(cap * sizeof *vals);
        if (!keys || !vals) {
            free(keys);
            free(vals);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < cap; i++) vals[i] = -1;
        for (size_t j = 0; j < m->cap; j++) {
            if (m->vals[j] < 0) continue;
            size_t i = mix(m->keys[j]) & (cap - 1);
            while (vals[i] >= 0) i = (i + 1) & (cap - 1);
            keys[i] = m->keys[j];
            vals[i] = m->vals[j];
        }
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    size_t i = mix(k) & (m->cap - 1);
    while (m->vals[i] >= 0) i = (i + 1) & (m->cap - 1);
    m->keys[i] = k;
    m->vals[i] = v;
    m->n++;
    return 0;
}

/* ------------------------------------------------------------------------------------ the state */

typedef struct {
    int64_t id, layers, group, slot, done;
    int alone, owned;                  /* owned: attn heads a block of its own (else a Former's costs) */
    int64_t *attn, *disp, *moe, *comb; /* one block of 4 * layers */
    uint8_t *cready, *pready;          /* fixed order only: item put in its compute / pool queue */
} Batch;

typedef struct {
    int64_t *b, *layer; /* batch ids and layers, in service order */
    size_t n, next;
} Order;

typedef struct Former Former; /* the compiled FIFO token former (below), or NULL: the Python one */

typedef struct {
    /* config */
    int64_t groups, slots, buffer_slots, launch_ns;
    int overlap, ordered, record;
    double comm_share;
    PyObject *next_batch, *conv, *batch_objs, *now_obj;
    Former *f;
    /* batches */
    Batch *bs;
    size_t nb, capb;
    Map ids;
    /* per group */
    int64_t *used;
    int *compute_busy;
    Vec *free_slots;
    Ring *cq;
    Order *corder;
    /* pool */
    int pool_busy;
    int64_t pool_held;
    Ring pq, blocked;
    Order porder;
    /* engine */
    Heap heap;
    const int64_t *wk_t, *wk_seq;
    size_t nwk, wi;
    uint64_t seq;
    int64_t now, handled;
    int64_t quiet; /* the former said: no batch for any group before this time */
    /* results */
    Vec done_idx, done_t, sp_attn, sp_disp, sp_moe, sp_comb;
    Vec out_ids, out_grp, out_slt; /* the handed-out batches' ids, groups and slots, in hand-out order (at the end) */
} Sim;

static PyObject *S_batch_id, *S_alone, *S_attention_ns, *S_dispatch_ns, *S_moe_ns, *S_combine_ns;

static int push(Sim *s, int kind, int64_t t, int64_t b, int64_t layer) {
    if (t < s->now) {
        PyErr_Format(PyExc_ValueError, "event %s at %lld ns is in the past (%lld)", KIND_NAME[kind],
                     (long long)t, (long long)s->now);
        return -1;
    }
    return heap_push(&s->heap, ev_of(t, PRIO[kind] << SEQ_BITS | s->seq++, b, layer, kind));
}

static int add_ns(int64_t a, int64_t b, int64_t *out) {
    if (__builtin_add_overflow(a, b, out)) {
        PyErr_SetString(PyExc_OverflowError, "pipeline time beyond int64 ns");
        return -1;
    }
    return 0;
}

static int rec(Vec *v, const int64_t *xs, int n) {
    for (int i = 0; i < n; i++)
        if (vec_push(v, xs[i]) < 0) return -1;
    return 0;
}

/* an int64 C-contiguous 1-d view of obj (converted by s->conv when it is not one already: then 1) */
static int int64_view(Sim *s, PyObject *obj, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_ND | PyBUF_FORMAT) == 0) {
        const char *f = view->format ? view->format : "B";
        if (f[0] == '@' || f[0] == '=' || f[0] == '<') f++;
        if (view->ndim == 1 && view->itemsize == 8 && (f[0] == 'l' || f[0] == 'q') && f[1] == 0) return 0;
        PyBuffer_Release(view);
    } else {
        PyErr_Clear();
    }
    PyObject *arr = PyObject_CallOneArg(s->conv, obj);
    if (!arr) return -1;
    int rc = PyObject_GetBuffer(arr, view, PyBUF_ND | PyBUF_FORMAT);
    Py_DECREF(arr); /* the view holds its own reference */
    if (rc < 0) return -1;
    if (view->ndim != 1 || view->itemsize != 8) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "a batch's per-layer costs must be 1-d int64 arrays");
        return -1;
    }
    return 1;
}

/* copy a handed-out Batch object into the state; returns its index or -1 */
static int64_t add_batch(Sim *s, PyObject *obj, int64_t group) {
    PyObject *fields[4] = {S_attention_ns, S_dispatch_ns, S_moe_ns, S_combine_ns};
    Py_buffer views[4];
    int nviews = 0;
    int64_t idx = -1, id;
    PyObject *pid = PyObject_GetAttr(obj, S_batch_id);
    if (!pid) return -1;
    id = PyLong_AsLongLong(pid);
    Py_DECREF(pid);
    if (id == -1 && PyErr_Occurred()) return -1;
    if (map_get(&s->ids, id) >= 0) {
        PyErr_Format(PyExc_ValueError, "the batch former handed out batch id %lld twice", (long long)id);
        return -1;
    }
    PyObject *palone = PyObject_GetAttr(obj, S_alone);
    if (!palone) return -1;
    int alone = PyObject_IsTrue(palone);
    Py_DECREF(palone);
    if (alone < 0) return -1;
    for (; nviews < 4; nviews++) {
        PyObject *arr = PyObject_GetAttr(obj, fields[nviews]);
        if (!arr) goto done;
        int rc = int64_view(s, arr, &views[nviews]);
        Py_DECREF(arr);
        if (rc < 0) goto done;
    }
    int64_t L = views[0].shape[0];
    if (L < 1 || views[1].shape[0] < L || views[2].shape[0] < L || views[3].shape[0] < L) {
        PyErr_Format(PyExc_ValueError, "batch %lld: no layer, or per-layer cost arrays shorter than its attention",
                     (long long)id);
        goto done;
    }
    if (L >= (int64_t)1 << LAYER_BITS) {
        PyErr_Format(PyExc_ValueError, "batch %lld: more than %d layers", (long long)id, (1 << LAYER_BITS) - 1);
        goto done;
    }
    if (grow((void **)&s->bs, &s->capb, s->nb, sizeof *s->bs, 256) < 0) goto done;
    size_t bytes = 4 * (size_t)L * sizeof(int64_t) + (s->ordered ? 2 * (size_t)L : 0);
    char *block = calloc(1, bytes);
    if (!block) {
        PyErr_NoMemory();
        goto done;
    }
    Batch *b = &s->bs[s->nb];
    b->id = id;
    b->layers = L;
    b->group = group;
    b->slot = 0;
    b->done = -1;
    b->alone = alone;
    b->owned = 1;
    b->attn = (int64_t *)block;
    b->disp = b->attn + L;
    b->moe = b->disp + L;
    b->comb = b->moe + L;
    for (int i = 0; i < 4; i++) memcpy((int64_t *)block + i * L, views[i].buf, (size_t)L * sizeof(int64_t));
    b->cready = s->ordered ? (uint8_t *)(b->comb + L) : NULL;
    b->pready = s->ordered ? b->cready + L : NULL;
    if (map_put(&s->ids, id, (int64_t)s->nb) < 0 || PyList_Append(s->batch_objs, obj) < 0) {
        free(block);
        goto done;
    }
    idx = (int64_t)s->nb++;
done:
    for (int i = 0; i < nviews; i++) PyBuffer_Release(&views[i]);
    return idx;
}

/* ----------------------------------------------------------------------------------- the queues */

/* take the next item of a queue (compute of group g, or the pool when g < 0); 0 when none */
static int take(Sim *s, int64_t g, int64_t *bi, int64_t *layer) {
    if (!s->ordered) {
        Ring *r = g < 0 ? &s->pq : &s->cq[g];
        if (!r->n) return 0;
        int64_t it[2];
        ring_take(r, it);
        *bi = it[0];
        *layer = it[1];
        return 1;
    }
    Order *o = g < 0 ? &s->porder : &s->corder[g];
    if (o->next >= o->n) return 0;
    int64_t i = map_get(&s->ids, o->b[o->next]), l = o->layer[o->next];
    if (i < 0 || l < 0 || l >= s->bs[i].layers) return 0;
    Batch *b = &s->bs[i];
    uint8_t *flag = g < 0 ? &b->pready[l] : &b->cready[l];
    if (!*flag || (g >= 0 && b->group != g)) return 0;
    *flag = 0;
    o->next++;
    *bi = i;
    *layer = l;
    return 1;
}

static int put(Sim *s, int64_t g, int64_t bi, int64_t layer) {
    if (s->ordered) {
        if (g < 0)
            s->bs[bi].pready[layer] = 1;
        else
            s->bs[bi].cready[layer] = 1;
        return 0;
    }
    int64_t it[2] = {bi, layer};
    return ring_put(g < 0 ? &s->pq : &s->cq[g], it);
}

/* --------------------------------------------------------------------------------- the handlers */

static int start_compute(Sim *s, int64_t g, int64_t t) {
    int64_t bi, layer, end;
    if (s->compute_busy[g] || !take(s, g, &bi, &layer)) return 0;
    s->compute_busy[g] = 1;
    Batch *b = &s->bs[bi];
    if (add_ns(t, b->attn[layer], &end) < 0) return -1;
    if (s->record) {
        int64_t r[5] = {b->id, g, layer, t, end};
        if (rec(&s->sp_attn, r, 5) < 0) return -1;
    }
    return push(s, K_ATTN_DONE, end, bi, layer);
}

static int start_pool(Sim *s, int64_t t) {
    int64_t bi, layer, dur, end;
    if (s->pool_busy || !take(s, -1, &bi, &layer)) return 0;
    Batch *b = &s->bs[bi];
    if (add_ns(b->moe[layer], s->launch_ns, &dur) < 0) return -1;
    if (!s->overlap) {
        int64_t comm;
        if (add_ns(b->disp[layer], b->comb[layer], &comm) < 0) return -1;
        double x = nearbyint(s->comm_share * (double)comm); /* Python's round(): half to even */
        if (!(fabs(x) < 9.2e18) || add_ns(dur, (int64_t)x, &dur) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "pipeline time beyond int64 ns");
            return -1;
        }
    }
    s->pool_busy = 1;
    if (add_ns(t, dur, &end) < 0) return -1;
    if (s->record) {
        int64_t r[4] = {b->id, layer, t, end};
        if (rec(&s->sp_moe, r, 4) < 0) return -1;
    }
    return push(s, K_POOL_DONE, end, bi, layer);
}

static int next_layer(Sim *s, int64_t bi, int64_t layer, int64_t t) {
    if (layer + 1 < s->bs[bi].layers) return push(s, K_ATTN_READY, t, bi, layer + 1);
    return push(s, K_BATCH_DONE, t, bi, 0);
}

static int int64_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* the Python former's answer for group g at t (Pipeline._assign's call): *bi the index of the batch
 * it handed out (-1: none), *until "no batch for anyone before" (INT64_MIN: no promise) */
static int ask_python(Sim *s, int64_t g, int idle, int64_t *bi, int64_t *until) {
    *bi = -1;
    *until = INT64_MIN;
    PyObject *pg = PyLong_FromLongLong(g);
    if (!pg) return -1;
    PyObject *args[3] = {s->now_obj, pg, idle ? Py_True : Py_False};
    PyObject *obj = PyObject_Vectorcall(s->next_batch, args, 3, NULL);
    Py_DECREF(pg);
    if (!obj) return -1;
    if (obj == Py_None) {
        Py_DECREF(obj);
        return 0;
    }
    if (PyLong_Check(obj)) { /* "nothing for anyone before T" */
        long long t = PyLong_AsLongLong(obj);
        Py_DECREF(obj);
        if (t == -1 && PyErr_Occurred()) return -1;
        *until = t;
        return 0;
    }
    if (PyTuple_Check(obj)) { /* (batch, T): this batch, then nothing before T */
        PyObject *only = PyTuple_GET_SIZE(obj) == 2 ? PyTuple_GET_ITEM(obj, 0) : NULL;
        long long after = only ? PyLong_AsLongLong(PyTuple_GET_ITEM(obj, 1)) : -1;
        if (!only || (after == -1 && PyErr_Occurred())) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "next_batch: a tuple answer is (batch, int)");
            Py_DECREF(obj);
            return -1;
        }
        Py_INCREF(only);
        Py_DECREF(obj);
        obj = only;
        *until = after;
    }
    *bi = add_batch(s, obj, g);
    Py_DECREF(obj);
    return *bi < 0 ? -1 : 0;
}

static int ask_compiled(Sim *s, int64_t t, int64_t g, int idle, int64_t *bi, int64_t *until);

/* fill free slots, least occupied group first, with batches from the former (Pipeline._assign).
 * Candidates are asked by (slots used, group), the order Pipeline._assign sorts them in, walked one
 * occupancy level at a time (no sort: O(groups x slots) at worst, and it stops at the first batch).
 * A former that answers an int T > t instead of None promises no batch for any group before T: the
 * rest of this pass and every pass before T ask nobody (Pipeline._assign does the same); a
 * (batch, T) answer places the batch and then promises the same (its last batch until T). */
static int assign(Sim *s, int64_t t) {
    if (t < s->quiet) return 0;
    if (!s->f) {
        s->now_obj = PyLong_FromLongLong(t);
        if (!s->now_obj) return -1;
    }
    int rc = -1;
    for (;;) {
        int placed = 0;
        for (int64_t u = 0; u < s->slots && !placed && t >= s->quiet; u++) {
            for (int64_t g = 0; g < s->groups && !placed && t >= s->quiet; g++) {
                if (s->used[g] != u) continue;
                int64_t bi, until;
                int got = s->f ? ask_compiled(s, t, g, u == 0, &bi, &until) : ask_python(s, g, u == 0, &bi, &until);
                if (got < 0) goto out;
                if (bi < 0) {
                    if (until > s->quiet) s->quiet = until;
                    continue;
                }
                Batch *b = &s->bs[bi];
                Vec *fs = &s->free_slots[g];
                if (b->alone) {
                    s->used[g] = s->slots;
                    b->slot = 0;
                    fs->n = 0;
                } else {
                    s->used[g] += 1;
                    if (!fs->n) {
                        PyErr_SetString(PyExc_IndexError, "pop from empty list");
                        goto out;
                    }
                    qsort(fs->p, fs->n, sizeof *fs->p, int64_cmp);
                    b->slot = fs->p[0];
                    memmove(fs->p, fs->p + 1, (fs->n - 1) * sizeof *fs->p);
                    fs->n--;
                }
                if (push(s, K_ATTN_READY, t, bi, 0) < 0) goto out;
                if (until > s->quiet) s->quiet = until;
                placed = 1;
            }
        }
        if (!placed) break;
    }
    rc = 0;
out:
    Py_CLEAR(s->now_obj);
    return rc;
}

static int handle(Sim *s, const Ev *e) {
    int64_t t = e->t, bi = ev_b(e), layer = ev_layer(e);
    Batch *b = bi >= 0 ? &s->bs[bi] : NULL;
    switch (ev_kind(e)) {
    case K_WAKEUP:
        return assign(s, t);
    case K_ATTN_READY:
        if (put(s, b->group, bi, layer) < 0) return -1;
        return start_compute(s, b->group, t);
    case K_POOL_ARRIVE:
        if (put(s, -1, bi, layer) < 0) return -1;
        return start_pool(s, t);
    case K_ATTN_DONE: {
        s->compute_busy[b->group] = 0;
        if (start_compute(s, b->group, t) < 0) return -1;
        b = &s->bs[bi]; /* (the former is not called above, so bs did not move; cheap to be safe) */
        if (b->moe[layer] > 0) {
            int64_t arrive;
            if (add_ns(t, b->disp[layer], &arrive) < 0) return -1;
            if (s->record) {
                int64_t r[4] = {b->id, layer, t, arrive};
                if (rec(&s->sp_disp, r, 4) < 0) return -1;
            }
            if (s->pool_held >= s->buffer_slots) {
                int64_t it[3] = {bi, layer, arrive}; /* back-pressure: the slot is still full */
                return ring_put(&s->blocked, it);
            }
            s->pool_held += 1;
            return push(s, K_POOL_ARRIVE, arrive, bi, layer);
        }
        return next_layer(s, bi, layer, t);
    }
    case K_POOL_DONE: {
        s->pool_busy = 0;
        s->pool_held -= 1;
        if (s->blocked.n) {
            int64_t it[3];
            ring_take(&s->blocked, it);
            s->pool_held += 1;
            if (push(s, K_POOL_ARRIVE, it[2] > t ? it[2] : t, it[0], it[1]) < 0) return -1;
        }
        if (start_pool(s, t) < 0) return -1;
        b = &s->bs[bi];
        int64_t back;
        if (add_ns(t, b->comb[layer], &back) < 0) return -1;
        if (s->record) {
            int64_t r[4] = {b->id, layer, t, back};
            if (rec(&s->sp_comb, r, 4) < 0) return -1;
        }
        return next_layer(s, bi, layer, back);
    }
    case K_BATCH_DONE: {
        int64_t g = b->group;
        b->done = t;
        if (vec_push(&s->done_idx, bi) < 0 || vec_push(&s->done_t, t) < 0) return -1;
        s->used[g] -= b->alone ? s->slots : 1;
        if (b->alone) {
            for (int64_t k = 0; k < s->slots; k++)
                if (vec_push(&s->free_slots[g], k) < 0) return -1;
        } else if (vec_push(&s->free_slots[g], b->slot) < 0) {
            return -1;
        }
        return assign(s, t);
    }
    }
    PyErr_SetString(PyExc_SystemError, "pipeline kernel: unknown event kind");
    return -1;
}

static int run_loop(Sim *s) {
    for (;;) {
        Ev e;
        int from_wk = 0;
        if (s->wi < s->nwk) {
            Ev w = ev_of(s->wk_t[s->wi], PRIO[K_WAKEUP] << SEQ_BITS | (uint64_t)s->wk_seq[s->wi], -1, 0, K_WAKEUP);
            if (!s->heap.n || ev_less(&w, &s->heap.p[0])) {
                e = w;
                from_wk = 1;
            }
        }
        if (!from_wk) {
            if (!s->heap.n) return 0;
            e = heap_pop(&s->heap);
        } else {
            s->wi++;
        }
        s->now = e.t;
        s->handled++;
        if (handle(s, &e) < 0) return -1;
    }
}

/* ------------------------------------------------------------------- the compiled token former */

/* The built-in online formers of asap (asaptrace.replay.policies.asap.AsapFormer) and afd-pingpong
 * (afd_pingpong.PingpongFormer), compiled: the same decisions in the same order, so that a serving
 * run never calls Python per batch.  Arrived requests queue in arrival order; a take is FIFO while
 * the taken hold < min_tokens new tokens and the next fits in max_tokens (the first always joins) --
 * with FIFO the queue is always the run of requests [head, next) and a take a run of consecutive
 * requests.  asap (micro = 0): a batch is one take, cut for any group with a free slot; with dual
 * batching a batch holding a prompt of more than long_tokens runs alone: cut for a busy group it
 * reserves that group until the group is idle.  afd-pingpong (micro = m >= 1): a step is one take,
 * cut when the stage is idle and nothing is pending, dealt longest-first by new tokens onto
 * min(m, its requests) micro-batches (planner.place_longest_first), handed out one per free slot.
 * With nothing queued nor held back the answer is the next arrival (NEVER after the last).  A
 * batch's costs come from Python (cost_of(pieces)) once per distinct pieces in the run: pieces
 * ((new, cached), ...) hashed here over the requests' arrays. */

#define NEVER ((int64_t)1 << 62)

typedef struct {
    uint64_t hash;
    int64_t first, count; /* the requests that first had these pieces: reqs[first, first + count) */
    int64_t *block;       /* 4 * layers costs: attention, dispatch, moe, combine */
    int64_t layers;
} Cost;

/* a cost's totals as pipelined_online._totals computes them from the arrays cost_of gave (then
 * exact: int64 numpy arrays of one length, as the built-in formers' are): attention; the rest, its
 * dispatch + combine and pool items (launch overhead, and without overlap the pool's share of the
 * communication, rounded half to even as np.rint) */
static void cost_totals(const Sim *s, const int64_t *block, int64_t L, int64_t *attn, int64_t *rest) {
    const int64_t *at = block, *disp = block + L, *moe = block + 2 * L, *comb = block + 3 * L;
    int64_t a = 0, r = 0;
    for (int64_t l = 0; l < L; l++) {
        int64_t comm = disp[l] + comb[l];
        a += at[l];
        r += comm + moe[l] + (moe[l] > 0 ? s->launch_ns : 0);
        if (!s->overlap) r += (int64_t)nearbyint(s->comm_share * (double)comm);
    }
    *attn = a;
    *rest = r;
}

struct Former {
    const int64_t *arrival, *new, *cached;
    int64_t n, next, head; /* requests; the next to arrive; the queue is [head, next) */
    int64_t min_tokens, max_tokens, long_tokens, micro;
    int dual;
    int64_t *reserved, nreserved; /* per group: the batch waiting for it to drain (-1: none) */
    Vec reqs;                      /* the batches' requests, batch after batch (in batch id order) */
    Vec attn, rest, exact;         /* per cost index: its totals, and whether they are _totals' */
    Vec first, count, cost, alone; /* per batch id: its requests reqs[first, first + count), ... */
    Vec pending;                   /* afd-pingpong: the step's micro-batches not handed out yet */
    size_t pending_head;
    int64_t *order, *where; /* afd-pingpong: scratch of a step's placement */
    double *load;
    size_t cap_scratch;
    int64_t *start;                /* per request: its batch's hand-out time (-1: not yet) */
    Cost *costs;
    size_t ncosts, capcosts;
    int64_t *slot_of; /* open-addressed table of cost indexes (-1: empty), 2x the costs at least */
    size_t capslots;
    PyObject *cost_of, *cost_objs; /* the Python costs callable; what it answered, by cost index */
};

static void former_free(Former *f) {
    if (!f) return;
    free(f->reserved);
    Vec *vs[] = {&f->reqs, &f->attn, &f->rest, &f->exact, &f->first, &f->count, &f->cost, &f->alone, &f->pending};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) free(vs[i]->p);
    free(f->order);
    free(f->where);
    free(f->load);
    free(f->start);
    for (size_t i = 0; i < f->ncosts; i++) free(f->costs[i].block);
    free(f->costs);
    free(f->slot_of);
    Py_XDECREF(f->cost_objs);
    free(f);
}

static uint64_t pieces_hash(const Former *f, int64_t a, int64_t n) {
    uint64_t h = (uint64_t)n;
    for (const int64_t *r = f->reqs.p + a; r < f->reqs.p + a + n; r++) {
        h = mix((int64_t)(h ^ (uint64_t)f->new[*r]));
        h = mix((int64_t)(h ^ (uint64_t)f->cached[*r]));
    }
    return h;
}

static int same_pieces(const Former *f, const Cost *c, int64_t a, int64_t n) {
    if (c->count != n) return 0;
    const int64_t *x = f->reqs.p + c->first, *y = f->reqs.p + a;
    for (int64_t k = 0; k < n; k++)
        if (f->new[x[k]] != f->new[y[k]] || f->cached[x[k]] != f->cached[y[k]]) return 0;
    return 1;
}

static int costs_rehash(Former *f) {
    size_t cap = f->capslots ? f->capslots * 2 : 256;
    int64_t *t = malloc(cap * sizeof *t);
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < cap; i++) t[i] = -1;
    for (size_t k = 0; k < f->ncosts; k++) {
        size_t i = (size_t)f->costs[k].hash & (cap - 1);
        while (t[i] >= 0) i = (i + 1) & (cap - 1);
        t[i] = (int64_t)k;
    }
    free(f->slot_of);
    f->slot_of = t;
    f->capslots = cap;
    return 0;
}

/* the cost index of requests reqs[a, a + n)'s pieces, asking Python the first time; -1 on error */
static int64_t cost_index(Sim *s, int64_t a, int64_t n) {
    Former *f = s->f;
    uint64_t h = pieces_hash(f, a, n);
    size_t i = f->capslots ? (size_t)h & (f->capslots - 1) : 0;
    for (; f->capslots && f->slot_of[i] >= 0; i = (i + 1) & (f->capslots - 1)) {
        Cost *c = &f->costs[f->slot_of[i]];
        if (c->hash == h && same_pieces(f, c, a, n)) return f->slot_of[i];
    }
    PyObject *pieces = PyTuple_New((Py_ssize_t)n);
    if (!pieces) return -1;
    for (int64_t k = 0; k < n; k++) {
        int64_t r = f->reqs.p[a + k];
        PyObject *one = Py_BuildValue("(LL)", (long long)f->new[r], (long long)f->cached[r]);
        if (!one) {
            Py_DECREF(pieces);
            return -1;
        }
        PyTuple_SET_ITEM(pieces, (Py_ssize_t)k, one);
    }
    PyObject *got = PyObject_CallOneArg(f->cost_of, pieces);
    Py_DECREF(pieces);
    if (!got) return -1;
    int64_t idx = -1, L = 0, exact = 1, attn, rest;
    Py_buffer views[4];
    int nviews = 0;
    int64_t *block = NULL;
    if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 4) {
        PyErr_SetString(PyExc_ValueError, "cost_of: the answer is (attention, dispatch, moe, combine)");
        goto done;
    }
    for (; nviews < 4; nviews++) {
        PyObject *arr = PyTuple_GET_ITEM(got, nviews);
        int rc = int64_view(s, arr, &views[nviews]);
        if (rc < 0) goto done;
        exact = exact && rc == 0 && strcmp(Py_TYPE(arr)->tp_name, "numpy.ndarray") == 0;
    }
    L = views[0].shape[0];
    for (int k = 1; k < 4; k++) exact = exact && views[k].shape[0] == L;
    if (L < 1 || views[1].shape[0] < L || views[2].shape[0] < L || views[3].shape[0] < L) {
        PyErr_SetString(PyExc_ValueError, "a batch: no layer, or per-layer cost arrays shorter than its attention");
        goto done;
    }
    if (L >= (int64_t)1 << LAYER_BITS) {
        PyErr_Format(PyExc_ValueError, "a batch: more than %d layers", (1 << LAYER_BITS) - 1);
        goto done;
    }
    block = malloc(4 * (size_t)L * sizeof *block);
    if (!block) {
        PyErr_NoMemory();
        goto done;
    }
    for (int k = 0; k < 4; k++) memcpy(block + k * L, views[k].buf, (size_t)L * sizeof *block);
    cost_totals(s, block, L, &attn, &rest);
    if (vec_push(&f->attn, attn) < 0 || vec_push(&f->rest, rest) < 0 || vec_push(&f->exact, exact) < 0) goto done;
    if (grow((void **)&f->costs, &f->capcosts, f->ncosts, sizeof *f->costs, 64) < 0) goto done;
    if (PyList_Append(f->cost_objs, got) < 0) goto done;
    Cost c = {h, a, n, block, L};
    f->costs[f->ncosts++] = c;
    block = NULL;
    idx = (int64_t)f->ncosts - 1;
    if (2 * f->ncosts > f->capslots) {
        if (costs_rehash(f) < 0) idx = -1;
    } else {
        size_t j = (size_t)h & (f->capslots - 1);
        while (f->slot_of[j] >= 0) j = (j + 1) & (f->capslots - 1);
        f->slot_of[j] = idx;
    }
done:
    free(block);
    for (int k = 0; k < nviews; k++) PyBuffer_Release(&views[k]);
    Py_DECREF(got);
    return idx;
}

/* OnlineFormer.take: the next take's requests off the queue, [a, j) */
static void former_take(Former *f, int64_t *a, int64_t *j) {
    int64_t k = *a = f->head, tokens = 0;
    while (k < f->next && (k == *a || (tokens < f->min_tokens && tokens + f->new[k] <= f->max_tokens)))
        tokens += f->new[k++];
    *j = f->head = k;
}

/* a batch of the requests reqs[a, reqs.n) just pushed: its id (or -1 on error) */
static int64_t former_batch(Sim *s, int64_t a) {
    Former *f = s->f;
    int64_t n = (int64_t)f->reqs.n - a, longest = 0;
    for (int64_t k = a; k < a + n; k++)
        if (k == a || f->new[f->reqs.p[k]] > longest) longest = f->new[f->reqs.p[k]];
    int64_t c = cost_index(s, a, n);
    if (c < 0) return -1;
    int64_t bid = (int64_t)f->first.n;
    if (vec_push(&f->first, a) < 0 || vec_push(&f->count, n) < 0 || vec_push(&f->cost, c) < 0 ||
        vec_push(&f->alone, f->micro == 0 && f->dual && longest > f->long_tokens) < 0)
        return -1;
    return bid;
}

/* AsapFormer.take + cut: the next batch off the queue, its id (or -1 on error) */
static int64_t former_cut(Sim *s) {
    Former *f = s->f;
    int64_t a, j, at = (int64_t)f->reqs.n;
    former_take(f, &a, &j);
    for (int64_t i = a; i < j; i++)
        if (vec_push(&f->reqs, i) < 0) return -1;
    return former_batch(s, at);
}

static const double *sort_w; /* (qsort has no context argument) */

/* by descending weight, ties by position: Python's stable sorted(key=lambda i: -w[i]) */
static int by_weight(const void *x, const void *y) {
    int64_t i = *(const int64_t *)x, j = *(const int64_t *)y;
    if (sort_w[i] != sort_w[j]) return sort_w[i] > sort_w[j] ? -1 : 1;
    return (i > j) - (i < j);
}

/* PingpongFormer._cut_step: the next step off the queue, dealt longest-first by new tokens onto
 * min(m, its requests) micro-batches (planner.place_longest_first: float64 loads, the first
 * least-loaded bin), each pending in bin order with its requests in arrival order; 0 or -1 */
static int former_cut_step(Sim *s) {
    Former *f = s->f;
    int64_t a, j;
    former_take(f, &a, &j);
    int64_t n = j - a, parts = f->micro < n ? f->micro : n;
    if ((size_t)n > f->cap_scratch) {
        size_t cap = 2 * (size_t)n;
        int64_t *order = realloc(f->order, cap * sizeof *order), *where = NULL;
        double *w = NULL;
        if (order) f->order = order;
        if (order && (where = realloc(f->where, cap * sizeof *where))) f->where = where;
        if (where && (w = realloc(f->load, 2 * cap * sizeof *w))) f->load = w; /* weights, then loads */
        if (!w) {
            PyErr_NoMemory();
            return -1;
        }
        f->cap_scratch = cap;
    }
    double *w = f->load, *load = w + n;
    int64_t *where = f->where;
    for (int64_t k = 0; k < n; k++) {
        w[k] = (double)f->new[a + k];
        f->order[k] = k;
        where[k] = 0;
    }
    if (parts > 1) {
        for (int64_t b = 0; b < parts; b++) load[b] = 0.0;
        sort_w = w;
        qsort(f->order, (size_t)n, sizeof *f->order, by_weight);
        for (int64_t k = 0; k < n; k++) {
            int64_t i = f->order[k], b = 0;
            for (int64_t c = 1; c < parts; c++)
                if (load[c] < load[b]) b = c;
            where[i] = b;
            load[b] += w[i];
        }
    }
    for (int64_t b = 0; b < parts; b++) {
        int64_t at = (int64_t)f->reqs.n;
        for (int64_t k = 0; k < n; k++)
            if (where[k] == b && vec_push(&f->reqs, a + k) < 0) return -1;
        int64_t bid = former_batch(s, at);
        if (bid < 0 || vec_push(&f->pending, bid) < 0) return -1;
    }
    return 0;
}

/* AsapFormer._hand_out: its requests start now; the batch joins the run on group g (its index) */
static int64_t former_hand_out(Sim *s, int64_t bid, int64_t t, int64_t g) {
    Former *f = s->f;
    for (int64_t k = f->first.p[bid]; k < f->first.p[bid] + f->count.p[bid]; k++) f->start[f->reqs.p[k]] = t;
    if (grow((void **)&s->bs, &s->capb, s->nb, sizeof *s->bs, 256) < 0) return -1;
    const Cost *c = &f->costs[f->cost.p[bid]];
    Batch *b = &s->bs[s->nb];
    memset(b, 0, sizeof *b);
    b->id = bid;
    b->layers = c->layers;
    b->group = g;
    b->done = -1;
    b->alone = (int)f->alone.p[bid];
    b->attn = c->block;
    b->disp = b->attn + c->layers;
    b->moe = b->disp + c->layers;
    b->comb = b->moe + c->layers;
    return (int64_t)s->nb++;
}

static int64_t quiet_until(const Former *f) { return f->next < f->n ? f->arrival[f->next] : NEVER; }

/* PingpongFormer.next_batch, statement for statement */
static int ask_pingpong(Sim *s, int64_t t, int64_t g, int idle, int64_t *bi, int64_t *until) {
    Former *f = s->f;
    *bi = -1;
    *until = INT64_MIN;
    while (f->next < f->n && f->arrival[f->next] <= t) f->next++;
    if (f->pending_head == f->pending.n) {
        if (f->head == f->next) {
            *until = quiet_until(f);
            return 0;
        }
        if (!idle) return 0;
        f->pending.n = f->pending_head = 0;
        if (former_cut_step(s) < 0) return -1;
    }
    int64_t bid = f->pending.p[f->pending_head++];
    if (f->pending_head == f->pending.n && f->head == f->next) *until = quiet_until(f);
    *bi = former_hand_out(s, bid, t, g);
    return *bi < 0 ? -1 : 0;
}

/* AsapFormer.next_batch, statement for statement */
static int ask_compiled(Sim *s, int64_t t, int64_t g, int idle, int64_t *bi, int64_t *until) {
    Former *f = s->f;
    if (f->micro) return ask_pingpong(s, t, g, idle, bi, until);
    *bi = -1;
    *until = INT64_MIN;
    if (f->next < f->n && f->arrival[f->next] <= t) {
        while (f->next < f->n && f->arrival[f->next] <= t) f->next++;
    } else if (f->head == f->next && !f->nreserved) {
        *until = quiet_until(f);
        return 0;
    }
    if (f->nreserved && f->reserved[g] >= 0) {
        if (!idle) return 0;
        int64_t bid = f->reserved[g];
        f->reserved[g] = -1;
        f->nreserved--;
        *bi = former_hand_out(s, bid, t, g);
        return *bi < 0 ? -1 : 0;
    }
    if (f->head == f->next) return 0;
    int64_t bid = former_cut(s);
    if (bid < 0) return -1;
    if (f->alone.p[bid] && !idle) {
        f->reserved[g] = bid;
        f->nreserved++;
        return 0;
    }
    if (f->head == f->next && !f->nreserved) *until = quiet_until(f);
    *bi = former_hand_out(s, bid, t, g);
    return *bi < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------------------------- the API */

static int read_order(PyObject *buf, Order *o) {
    Py_buffer v;
    if (PyObject_GetBuffer(buf, &v, PyBUF_SIMPLE) < 0) return -1;
    size_t n = (size_t)v.len / (2 * sizeof(int64_t));
    o->b = malloc((n ? n : 1) * sizeof(int64_t));
    o->layer = malloc((n ? n : 1) * sizeof(int64_t));
    if (!o->b || !o->layer) {
        PyBuffer_Release(&v);
        PyErr_NoMemory();
        return -1;
    }
    const int64_t *p = v.buf;
    for (size_t i = 0; i < n; i++) {
        o->b[i] = p[2 * i];
        o->layer[i] = p[2 * i + 1];
    }
    o->n = n;
    o->next = 0;
    PyBuffer_Release(&v);
    return 0;
}

static PyObject *vec_bytes(const Vec *v) {
    return PyBytes_FromStringAndSize((const char *)v->p, (Py_ssize_t)(v->n * sizeof(int64_t)));
}

static void sim_free(Sim *s) {
    for (size_t i = 0; i < s->nb; i++)
        if (s->bs[i].owned) free(s->bs[i].attn);
    former_free(s->f);
    free(s->bs);
    free(s->ids.keys);
    free(s->ids.vals);
    for (int64_t g = 0; s->free_slots && g < s->groups; g++) free(s->free_slots[g].p);
    for (int64_t g = 0; s->cq && g < s->groups; g++) free(s->cq[g].p);
    for (int64_t g = 0; s->corder && g < s->groups; g++) {
        free(s->corder[g].b);
        free(s->corder[g].layer);
    }
    free(s->free_slots);
    free(s->cq);
    free(s->corder);
    free(s->used);
    free(s->compute_busy);
    free(s->pq.p);
    free(s->blocked.p);
    free(s->porder.b);
    free(s->porder.layer);
    free(s->heap.p);
    Vec *vs[] = {&s->done_idx, &s->done_t, &s->sp_attn, &s->sp_disp, &s->sp_moe, &s->sp_comb, &s->out_ids, &s->out_grp, &s->out_slt};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) free(vs[i]->p);
    Py_XDECREF(s->next_batch);
    Py_XDECREF(s->batch_objs);
}

PyDoc_STRVAR(run_doc,
             "run(groups, slots, buffer_slots, overlap, comm_share, launch_ns, wakeup_t, wakeup_seq, former,\n"
             "    conv, order, record) -> (ids, groups, slots, done_idx, done_t, handled, batches,\n"
             "    attention, dispatch, moe, combine)\n\n"
             "Run the pipelined deployment (asaptrace.replay.mechanics.pipelined.Pipeline's semantics) to the end.\n"
             "wakeup_t / wakeup_seq: int64 bytes, the wakeups sorted by (time, push order) and their push\n"
             "order; order: None (first come, first served) or (list of int64 (batch id, layer) bytes per\n"
             "group, the pool's bytes). Results are int64 bytes (spans only with record), handled the\n"
             "number of events, batches the handed-out Batch objects in hand-out order.");

/* the state before the first event: the configuration, the wakeups, every slot free */
static int sim_init(Sim *s, long long groups, long long slots, long long buffer_slots, int overlap,
                    double comm_share, long long launch_ns, const Py_buffer *wt, const Py_buffer *ws, PyObject *conv,
                    int record) {
    if (groups < 1 || slots < 0 || wt->len != ws->len) {
        PyErr_SetString(PyExc_ValueError, "pipeline kernel: bad configuration");
        return -1;
    }
    s->groups = groups;
    s->slots = slots;
    s->buffer_slots = buffer_slots;
    s->launch_ns = launch_ns;
    s->overlap = overlap;
    s->comm_share = comm_share;
    s->record = record;
    s->conv = conv;
    s->wk_t = wt->buf;
    s->wk_seq = ws->buf;
    s->nwk = (size_t)wt->len / sizeof(int64_t);
    s->seq = s->nwk;
    s->quiet = INT64_MIN;
    s->pq.w = 2;
    s->blocked.w = 3;
    if (s->nwk && s->wk_t[0] < 0) /* a store's clock may start before 0: as Engine(start_ns=min(0, …)) */
        s->now = s->wk_t[0];
    s->used = calloc((size_t)groups, sizeof *s->used);
    s->compute_busy = calloc((size_t)groups, sizeof *s->compute_busy);
    s->free_slots = calloc((size_t)groups, sizeof *s->free_slots);
    s->cq = calloc((size_t)groups, sizeof *s->cq);
    s->corder = calloc((size_t)groups, sizeof *s->corder);
    if (!s->used || !s->compute_busy || !s->free_slots || !s->cq || !s->corder) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t g = 0; g < groups; g++) {
        s->cq[g].w = 2;
        for (int64_t k = 0; k < slots; k++)
            if (vec_push(&s->free_slots[g], k) < 0) return -1;
    }
    return 0;
}

/* run to the end, then the handed-out batches' ids, groups and slots (in hand-out order); 0 or -1 */
static int sim_run(Sim *s) {
    if (run_loop(s) < 0) return -1;
    for (size_t i = 0; i < s->nb; i++)
        if (vec_push(&s->out_ids, s->bs[i].id) < 0 || vec_push(&s->out_grp, s->bs[i].group) < 0 ||
            vec_push(&s->out_slt, s->bs[i].slot) < 0)
            return -1;
    return 0;
}

static void release(Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&views[i]);
}

static PyObject *pk_run(PyObject *self, PyObject *args) {
    (void)self;
    Sim s;
    memset(&s, 0, sizeof s);
    long long groups, slots, buffer_slots, launch_ns;
    int overlap, record;
    double comm_share;
    Py_buffer v[2]; /* the wakeups' times and seqs */
    PyObject *former, *conv, *order;
    if (!PyArg_ParseTuple(args, "LLLpdLy*y*OOOp", &groups, &slots, &buffer_slots, &overlap, &comm_share,
                          &launch_ns, &v[0], &v[1], &former, &conv, &order, &record))
        return NULL;
    PyObject *result = NULL;
    if (sim_init(&s, groups, slots, buffer_slots, overlap, comm_share, launch_ns, &v[0], &v[1], conv, record) < 0)
        goto out;
    s.ordered = order != Py_None;
    s.next_batch = PyObject_GetAttrString(former, "next_batch");
    s.batch_objs = PyList_New(0);
    if (!s.next_batch || !s.batch_objs) goto out;
    if (s.ordered) {
        PyObject *per_group, *pool;
        if (!PyArg_ParseTuple(order, "OO", &per_group, &pool)) goto out;
        if (!PyList_Check(per_group) || PyList_GET_SIZE(per_group) != groups) {
            PyErr_SetString(PyExc_ValueError, "pipeline kernel: order needs one list entry per group");
            goto out;
        }
        for (int64_t g = 0; g < groups; g++)
            if (read_order(PyList_GET_ITEM(per_group, g), &s.corder[g]) < 0) goto out;
        if (read_order(pool, &s.porder) < 0) goto out;
    }
    if (sim_run(&s) < 0) goto out;
    if (record)
        result = Py_BuildValue("(NNNNNLONNNN)", vec_bytes(&s.out_ids), vec_bytes(&s.out_grp), vec_bytes(&s.out_slt),
                               vec_bytes(&s.done_idx), vec_bytes(&s.done_t), (long long)s.handled, s.batch_objs,
                               vec_bytes(&s.sp_attn), vec_bytes(&s.sp_disp), vec_bytes(&s.sp_moe),
                               vec_bytes(&s.sp_comb));
    else
        result = Py_BuildValue("(NNNNNLOOOOO)", vec_bytes(&s.out_ids), vec_bytes(&s.out_grp), vec_bytes(&s.out_slt),
                               vec_bytes(&s.done_idx), vec_bytes(&s.done_t), (long long)s.handled, s.batch_objs,
                               Py_None, Py_None, Py_None, Py_None);
out:
    sim_free(&s);
    release(v, 2);
    return result;
}

PyDoc_STRVAR(run_formed_doc,
             "run_formed(groups, slots, buffer_slots, overlap, comm_share, launch_ns, wakeup_t, wakeup_seq,\n"
             "    arrival, new, cached, min_tokens, max_tokens, dual, long_tokens, micro, cost_of, conv)\n"
             "    -> (ids, done_idx, done_t, handled, start, count, reqs, cost, costs, attn, rest, exact)\n\n"
             "run() with a compiled FIFO token former in place of a Python one (micro 0: asap's AsapFormer;\n"
             "m >= 1: afd-pingpong's PingpongFormer, steps of m micro-batches): arrival / new / cached the\n"
             "requests' int64 bytes (arrival order); cost_of(pieces) the 4 per-layer cost arrays of a batch\n"
             "whose ((new, cached), ...) were not seen before.  Results: ids, done_idx, done_t as run()'s;\n"
             "start per request; per batch id its request count (its requests the next count[k] of reqs)\n"
             "and cost index into costs, the list of cost_of's answers; per cost its attention and rest\n"
             "totals (int64; exact: whether they are pipelined_online._totals', else 0).");

static PyObject *pk_run_formed(PyObject *self, PyObject *args) {
    (void)self;
    Sim s;
    memset(&s, 0, sizeof s);
    long long groups, slots, buffer_slots, launch_ns, min_tokens, max_tokens, long_tokens, micro;
    int overlap, dual;
    double comm_share;
    Py_buffer v[5]; /* the wakeups' times and seqs; the requests' arrivals, new and cached tokens */
    PyObject *cost_of, *conv;
    if (!PyArg_ParseTuple(args, "LLLpdLy*y*y*y*y*LLpLLOO", &groups, &slots, &buffer_slots, &overlap,
                          &comm_share, &launch_ns, &v[0], &v[1], &v[2], &v[3], &v[4], &min_tokens, &max_tokens,
                          &dual, &long_tokens, &micro, &cost_of, &conv))
        return NULL;
    PyObject *result = NULL;
    if (sim_init(&s, groups, slots, buffer_slots, overlap, comm_share, launch_ns, &v[0], &v[1], conv, 0) < 0)
        goto out;
    if (v[2].len != v[3].len || v[2].len != v[4].len || micro < 0) {
        PyErr_SetString(PyExc_ValueError, "run_formed: arrival, new and cached differ in length");
        goto out;
    }
    Former *f = s.f = calloc(1, sizeof *f);
    if (!f) {
        PyErr_NoMemory();
        goto out;
    }
    f->arrival = v[2].buf;
    f->new = v[3].buf;
    f->cached = v[4].buf;
    f->n = (int64_t)(v[2].len / (Py_ssize_t)sizeof(int64_t));
    f->min_tokens = min_tokens;
    f->max_tokens = max_tokens;
    f->long_tokens = long_tokens;
    f->dual = dual;
    f->micro = micro;
    f->cost_of = cost_of;
    f->cost_objs = PyList_New(0);
    f->reserved = malloc((size_t)groups * sizeof *f->reserved);
    f->start = malloc((f->n ? (size_t)f->n : 1) * sizeof *f->start);
    if (!f->cost_objs) goto out;
    if (!f->reserved || !f->start) {
        PyErr_NoMemory();
        goto out;
    }
    for (int64_t g = 0; g < groups; g++) f->reserved[g] = -1;
    for (int64_t i = 0; i < f->n; i++) f->start[i] = -1;
    if (sim_run(&s) < 0) goto out;
    result = Py_BuildValue("(NNNLNNNNONNN)", vec_bytes(&s.out_ids), vec_bytes(&s.done_idx), vec_bytes(&s.done_t),
                           (long long)s.handled,
                           PyBytes_FromStringAndSize((const char *)f->start, (Py_ssize_t)(f->n * sizeof(int64_t))),
                           vec_bytes(&f->count), vec_bytes(&f->reqs), vec_bytes(&f->cost), f->cost_objs,
                           vec_bytes(&f->attn), vec_bytes(&f->rest), vec_bytes(&f->exact));
out:
    sim_free(&s);
    release(v, 5);
    return result;
}

static PyMethodDef pk_methods[] = {
    {"run", pk_run, METH_VARARGS, run_doc},
    {"run_formed", pk_run_formed, METH_VARARGS, run_formed_doc},
    {NULL, NULL, 0, NULL},
};

static int pk_exec(PyObject *m) {
    (void)m;
    S_batch_id = PyUnicode_InternFromString("batch_id");
    S_alone = PyUnicode_InternFromString("alone");
    S_attention_ns = PyUnicode_InternFromString("attention_ns");
    S_dispatch_ns = PyUnicode_InternFromString("dispatch_ns");
    S_moe_ns = PyUnicode_InternFromString("moe_ns");
    S_combine_ns = PyUnicode_InternFromString("combine_ns");
    if (!S_batch_id || !S_alone || !S_attention_ns || !S_dispatch_ns || !S_moe_ns || !S_combine_ns) return -1;
    return 0;
}

static PyModuleDef_Slot pk_slots[] = {
    {Py_mod_exec, pk_exec},
    {0, NULL},
};

static struct PyModuleDef pk_module = {
    PyModuleDef_HEAD_INIT,
    "_pkernel",
    "The pipelined (ASAP / AFD) event loop of asaptrace.replay.mechanics.pipelined, compiled.",
    0,
    pk_methods,
    pk_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__pkernel(void) { return PyModuleDef_Init(&pk_module); }
