/*
 * _lkernel: the lockstep family's online loop (asaptrace.replay.policies.lockstep_online.serve_lockstep)
 * with its built-in step formers, compiled.
 *
 * Why this exists: a coupled, balanced or chunked serving run of 2,000 arrivals forms a few hundred
 * steps, and forming one in Python (the FIFO take, the longest-first placement onto the group with
 * the least, the chunked cut) costs ~60 us: three quarters of the run.  This is the same loop over
 * C arrays: the same queue, the same take, the same stable longest-first order, the same (load,
 * group) minimum, the same float loads and float own-time sums in the same order.  A step's cost
 * is StepCoster._cost's arithmetic done here (step_cost_c) from its groups' parts, which the policy's
 * StepCoster computes and keeps (the cost model's parts are Python: a group is asked for once a run,
 * M and X once per exact token count); with micro-batch overlap the step's groups go to
 * cost(groups) as the very lists of (request, new, prefix) tuples the Python former builds.  The
 * Python loop stays the reference; tests/test_compiled_lockstep.py runs both on the same cases
 * and compares every time.
 *
 * Modes (the former's hooks it replaces): 0 LockstepFormer (weight: the request's remaining new
 * tokens), 1 BalancedFormer (weight: c1*c/K + c2*c*(2P+c)/K2, lockstep_cost.piece_weight's IEEE
 * operations in its order), 2 ChunkedFormer with a chunk budget (tails first, then FIFO to the
 * budget, longest-first onto the group with the fewest tokens, cut to fit).  Routing on arrival
 * and any other hook stay in Python.  Build with -ffp-contract=off: a fused multiply-add would
 * round the balanced weights differently from Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define K 1024.0
#define K2 (K * K)

/* the queue of request ids (arrival order, back to the front after a placement that did not fit):
 * a ring of capacity a power of two >= every request (a request is queued at most once) */
typedef struct {
    int64_t *p;
    size_t head, n, mask;
} Deque;

static inline void dq_push_back(Deque *q, int64_t x) { q->p[(q->head + q->n++) & q->mask] = x; }
static inline int64_t dq_pop_front(Deque *q) {
    int64_t x = q->p[q->head];
    q->head = (q->head + 1) & q->mask;
    q->n--;
    return x;
}
static inline void dq_push_front(Deque *q, int64_t x) {
    q->head = (q->head + q->mask) & q->mask;
    q->p[q->head] = x;
    q->n++;
}
static inline int64_t dq_front(const Deque *q) { return q->p[q->head]; }

/* ---------------------------------------------------------------- the step costs' kept parts */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* a group's parts by its pieces' (new, prefix), as the coster gives them: its tokens, attention,
 * dispatch + combine x2 and its pieces' shares; keys and shares in arenas, an open-addressed index */
typedef struct {
    uint64_t hash;
    int64_t off, len; /* its key: pairs[off .. off + 2 len) */
    double tg, x2;
    int64_t attn;
    int64_t sh; /* its shares: shares[sh .. sh + len) */
} GroupPart;

typedef struct {
    GroupPart *e;
    size_t n, cap;
    int64_t *pairs;
    size_t npairs, cappairs;
    double *shares;
    size_t nshares, capshares;
    int64_t *slot; /* index into e, -1 empty; capacity a power of two */
    size_t capslot;
} GroupMap;

/* a table's values by the exact double asked (M of a step's tokens, X of a group's) */
typedef struct {
    uint64_t *key;
    int64_t *val;
    uint8_t *used;
    size_t n, cap;
} ValMap;

typedef struct {
    int64_t n, dp, step_tokens, group_tokens, chunk;
    int mode;
    double c1, c2;
    const int64_t *arrival;
    int64_t *remaining, *done, *carry;
    Deque q;
    /* one step's scratch */
    int64_t *taken, *order, *back, *pg, *pi, *pc, *pp, *gtok, *room, *count, *at, *base;
    double *w, *load;
    int64_t npieces;
    /* the step costs computed here (not in overlap mode): the coster's callables and constants */
    PyObject *parts_fn, *moe_fn, *xfer_fn;
    double k_s;
    int64_t n_l;
    GroupMap gm;
    ValMap moe_at, xfer_at;
    double *share;    /* one step's shares, flattened group-major */
    int64_t *pairs;   /* one step's groups' keys, (new, prefix) pairs group-major */
    int64_t *gidx;    /* per group: its kept parts (-1 not yet, -2 empty) */
    uint64_t *ghash;  /* per group: its key's hash */
} LS;

static const double *cmp_w; /* qsort has no context: the weights being sorted by (the GIL is held) */

/* positions in the take, heavier first; among equals the earlier (Python's stable
 * sorted(reverse=True)) */
static int by_weight_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    double wx = cmp_w[x], wy = cmp_w[y];
    if (wx != wy) return wx > wy ? -1 : 1;
    return (x > y) - (x < y);
}

static void add_piece(LS *s, int64_t g, int64_t i, int64_t c) {
    int64_t k = s->npieces++;
    s->pg[k] = g;
    s->pi[k] = i;
    s->pc[k] = c;
    s->pp[k] = s->done[i];
}

/* the taken requests (positions 0..m-1 of s->taken) sorted heaviest first into s->order */
static void sort_taken(LS *s, int64_t m) {
    for (int64_t k = 0; k < m; k++) s->order[k] = k;
    cmp_w = s->w;
    qsort(s->order, (size_t)m, sizeof *s->order, by_weight_desc);
}

/* placed requests that did not fit go back to the queue's front in arrival (id) order */
static int by_id_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}
static void put_back(LS *s, int64_t nback) {
    qsort(s->back, (size_t)nback, sizeof *s->back, by_id_desc);
    for (int64_t k = 0; k < nback; k++) dq_push_front(&s->q, s->back[k]);
}

/* LockstepFormer.form_step (modes 0 and 1): FIFO take to step_tokens, heaviest first onto the
 * group of least load (the lowest index among equals), <= group_tokens each */
static void form_default(LS *s) {
    int64_t m = 0, tokens = 0;
    while (s->q.n && (!m || tokens + s->remaining[dq_front(&s->q)] <= s->step_tokens)) {
        int64_t i = dq_pop_front(&s->q);
        s->taken[m++] = i;
        tokens += s->remaining[i];
    }
    for (int64_t k = 0; k < m; k++) {
        int64_t i = s->taken[k];
        if (s->mode == 1) {
            double cf = (double)s->remaining[i], pf = (double)s->done[i];
            s->w[k] = s->c1 * cf / K + s->c2 * (cf * (2 * pf + cf)) / K2;
        } else {
            s->w[k] = (double)s->remaining[i];
        }
    }
    sort_taken(s, m);
    for (int64_t g = 0; g < s->dp; g++) {
        s->gtok[g] = 0;
        s->load[g] = 0.0;
    }
    int64_t nback = 0;
    for (int64_t r = 0; r < m; r++) {
        int64_t k = s->order[r], i = s->taken[k], g = 0;
        for (int64_t h = 1; h < s->dp; h++)
            if (s->load[h] < s->load[g]) g = h;
        int64_t c = s->remaining[i];
        if (s->gtok[g] && s->gtok[g] + c > s->group_tokens) {
            s->back[nback++] = i;
            continue;
        }
        add_piece(s, g, i, c);
        s->gtok[g] += c;
        s->load[g] = s->load[g] + s->w[k];
    }
    put_back(s, nback);
}

/* ChunkedFormer.form_step with a budget: tails first on their groups, then FIFO to the free room,
 * longest first onto the open group with the fewest tokens (the lowest index), cut to fit */
static void form_chunked(LS *s) {
    int64_t budget = s->chunk, d = s->dp, free_room = 0;
    for (int64_t g = 0; g < d; g++) {
        s->room[g] = budget;
        int64_t i = s->carry[g];
        if (i >= 0) {
            int64_t c = s->remaining[i] < budget ? s->remaining[i] : budget;
            add_piece(s, g, i, c);
            s->room[g] -= c;
            if (c == s->remaining[i]) s->carry[g] = -1;
        }
        free_room += s->room[g];
    }
    int64_t m = 0, total = 0;
    while (s->q.n && total < free_room) {
        int64_t i = dq_pop_front(&s->q);
        s->taken[m++] = i;
        total += s->remaining[i];
    }
    for (int64_t k = 0; k < m; k++) s->w[k] = (double)s->remaining[s->taken[k]];
    sort_taken(s, m);
    int64_t nback = 0;
    for (int64_t r = 0; r < m; r++) {
        int64_t i = s->taken[s->order[r]], g = -1;
        for (int64_t h = 0; h < d; h++)
            if (s->room[h] > 0 && (g < 0 || budget - s->room[h] < budget - s->room[g])) g = h;
        if (g < 0) {
            s->back[nback++] = i;
            continue;
        }
        int64_t c = s->remaining[i] < s->room[g] ? s->remaining[i] : s->room[g];
        add_piece(s, g, i, c);
        s->room[g] -= c;
        if (c < s->remaining[i]) s->carry[g] = i;
    }
    put_back(s, nback);
}

/* the pieces in group-major order (as the flattened groups list): s->at[j] = the piece at j;
 * s->base[g], s->count[g] each group's first position and size */
static void order_pieces(LS *s) {
    int64_t d = s->dp, np = s->npieces, first = 0;
    for (int64_t g = 0; g < d; g++) s->count[g] = 0;
    for (int64_t k = 0; k < np; k++) s->count[s->pg[k]]++;
    for (int64_t g = 0; g < d; g++) {
        s->base[g] = first;
        first += s->count[g];
        s->count[g] = 0;
    }
    for (int64_t k = 0; k < np; k++) {
        int64_t g = s->pg[k];
        s->at[s->base[g] + s->count[g]++] = k;
    }
}

/* the step's groups as the Python former gives them: d lists of (request, new, prefix), each
 * group's pieces in the order they were placed (order_pieces: the order of the shares) */
static PyObject *groups_obj(LS *s) {
    int64_t d = s->dp;
    order_pieces(s);
    PyObject *groups = PyList_New((Py_ssize_t)d);
    if (!groups) return NULL;
    for (int64_t g = 0; g < d; g++) {
        PyObject *lst = PyList_New((Py_ssize_t)s->count[g]);
        if (!lst) goto fail;
        PyList_SET_ITEM(groups, (Py_ssize_t)g, lst);
        for (int64_t j = 0; j < s->count[g]; j++) {
            int64_t k = s->at[s->base[g] + j];
            PyObject *t = Py_BuildValue("(LLL)", (long long)s->pi[k], (long long)s->pc[k], (long long)s->pp[k]);
            if (!t) goto fail;
            PyList_SET_ITEM(lst, (Py_ssize_t)j, t);
        }
    }
    return groups;
fail:
    Py_DECREF(groups);
    return NULL;
}

/* ---- the kept parts: group map and value maps ---- */

static int grow_to(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * size);
    if (!q) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = c;
    return 0;
}

static uint64_t pairs_hash(const int64_t *pairs, int64_t len) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)len;
    for (int64_t k = 0; k < 2 * len; k++) h = mix64(h ^ (uint64_t)pairs[k]);
    return h;
}

static int64_t gm_find(const GroupMap *m, uint64_t h, const int64_t *pairs, int64_t len) {
    if (!m->capslot) return -1;
    for (size_t i = (size_t)h & (m->capslot - 1);; i = (i + 1) & (m->capslot - 1)) {
        int64_t j = m->slot[i];
        if (j < 0) return -1;
        const GroupPart *g = &m->e[j];
        if (g->hash == h && g->len == len && !memcmp(m->pairs + g->off, pairs, (size_t)(2 * len) * sizeof *pairs))
            return j;
    }
}

static int gm_reindex(GroupMap *m, size_t cap) {
    int64_t *slot = malloc(cap * sizeof *slot);
    if (!slot) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < cap; i++) slot[i] = -1;
    for (size_t j = 0; j < m->n; j++) {
        size_t i = (size_t)m->e[j].hash & (cap - 1);
        while (slot[i] >= 0) i = (i + 1) & (cap - 1);
        slot[i] = (int64_t)j;
    }
    free(m->slot);
    m->slot = slot;
    m->capslot = cap;
    return 0;
}

/* keep one group's parts from the coster's answer (tg, attn, shares, x2) */
static int gm_add(GroupMap *m, uint64_t h, const int64_t *pairs, int64_t len, PyObject *part) {
    if (!PyTuple_Check(part) || PyTuple_GET_SIZE(part) != 4) {
        PyErr_SetString(PyExc_TypeError, "run_lockstep: a group's parts are (tokens, attention, shares, x2)");
        return -1;
    }
    double tg = PyFloat_AsDouble(PyTuple_GET_ITEM(part, 0));
    long long attn = PyLong_AsLongLong(PyTuple_GET_ITEM(part, 1));
    double x2 = PyFloat_AsDouble(PyTuple_GET_ITEM(part, 3));
    if (PyErr_Occurred()) return -1;
    PyObject *sh = PySequence_Fast(PyTuple_GET_ITEM(part, 2), "run_lockstep: a group's shares");
    if (!sh) return -1;
    int rc = -1;
    if (PySequence_Fast_GET_SIZE(sh) != len) {
        PyErr_SetString(PyExc_ValueError, "run_lockstep: a group's shares unlike its pieces");
        goto out;
    }
    if (grow_to((void **)&m->e, &m->cap, m->n + 1, sizeof *m->e) < 0 ||
        grow_to((void **)&m->pairs, &m->cappairs, m->npairs + (size_t)(2 * len), sizeof *m->pairs) < 0 ||
        grow_to((void **)&m->shares, &m->capshares, m->nshares + (size_t)len, sizeof *m->shares) < 0)
        goto out;
    GroupPart g = {h, (int64_t)m->npairs, len, tg, x2, (int64_t)attn, (int64_t)m->nshares};
    for (int64_t k = 0; k < len; k++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(sh, k));
        if (v == -1.0 && PyErr_Occurred()) goto out;
        m->shares[m->nshares + (size_t)k] = v;
    }
    memcpy(m->pairs + m->npairs, pairs, (size_t)(2 * len) * sizeof *pairs);
    m->npairs += (size_t)(2 * len);
    m->nshares += (size_t)len;
    m->e[m->n++] = g;
    if (2 * m->n > m->capslot) {
        if (gm_reindex(m, m->capslot ? 2 * m->capslot : 256) < 0) goto out;
    } else {
        size_t i = (size_t)h & (m->capslot - 1);
        while (m->slot[i] >= 0) i = (i + 1) & (m->capslot - 1);
        m->slot[i] = (int64_t)m->n - 1;
    }
    rc = 0;
out:
    Py_DECREF(sh);
    return rc;
}

static void gm_free(GroupMap *m) {
    free(m->e);
    free(m->pairs);
    free(m->shares);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* fn(x) for a double x, kept by its bits (an int answer) */
static int vm_get(ValMap *m, PyObject *fn, double x, int64_t *out) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    if (m->cap) {
        for (size_t i = (size_t)mix64(bits) & (m->cap - 1); m->used[i]; i = (i + 1) & (m->cap - 1))
            if (m->key[i] == bits) {
                *out = m->val[i];
                return 0;
            }
    }
    PyObject *arg = PyFloat_FromDouble(x);
    if (!arg) return -1;
    PyObject *got = PyObject_CallOneArg(fn, arg);
    Py_DECREF(arg);
    if (!got) return -1;
    PyObject *ix = PyNumber_Index(got);
    Py_DECREF(got);
    if (!ix) return -1;
    long long v = PyLong_AsLongLong(ix);
    Py_DECREF(ix);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (2 * (m->n + 1) > m->cap) { /* rehash into twice the room */
        size_t cap = m->cap ? 2 * m->cap : 256;
        uint64_t *key = malloc(cap * sizeof *key);
        int64_t *val = malloc(cap * sizeof *val);
        uint8_t *used = calloc(cap, 1);
        if (!key || !val || !used) {
            free(key);
            free(val);
            free(used);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t j = 0; j < m->cap; j++) {
            if (!m->used[j]) continue;
            size_t i = (size_t)mix64(m->key[j]) & (cap - 1);
            while (used[i]) i = (i + 1) & (cap - 1);
            key[i] = m->key[j];
            val[i] = m->val[j];
            used[i] = 1;
        }
        free(m->key);
        free(m->val);
        free(m->used);
        m->key = key;
        m->val = val;
        m->used = used;
        m->cap = cap;
    }
    size_t i = (size_t)mix64(bits) & (m->cap - 1);
    while (m->used[i]) i = (i + 1) & (m->cap - 1);
    m->key[i] = bits;
    m->val[i] = (int64_t)v;
    m->used[i] = 1;
    m->n++;
    *out = (int64_t)v;
    return 0;
}

static void vm_free(ValMap *m) {
    free(m->key);
    free(m->val);
    free(m->used);
    memset(m, 0, sizeof *m);
}

/* StepCoster._cost in C: the step's time and each piece's share into s->share (group-major), from
 * the groups' kept parts (asked of the coster for the groups not seen yet, all of a step in one
 * call) and M / X by the exact tokens; the same float operations in the same order */
static int step_cost_c(LS *s, int64_t *step_ns) {
    int64_t d = s->dp;
    order_pieces(s);
    int64_t *pairs = s->pairs, *gidx = s->gidx;
    uint64_t *gh = s->ghash;
    /* each group's key and whether it is kept */
    PyObject *missing = NULL;
    for (int64_t g = 0; g < d; g++) {
        int64_t len = s->count[g], *kp = pairs + 2 * s->base[g];
        for (int64_t j = 0; j < len; j++) {
            int64_t k = s->at[s->base[g] + j];
            kp[2 * j] = s->pc[k];
            kp[2 * j + 1] = s->pp[k];
        }
        gidx[g] = -2; /* empty */
        if (!len) continue;
        gh[g] = pairs_hash(kp, len);
        gidx[g] = gm_find(&s->gm, gh[g], kp, len);
        if (gidx[g] >= 0) continue;
        if (!missing && !(missing = PyList_New(0))) return -1;
        PyObject *key = PyTuple_New((Py_ssize_t)len);
        if (!key) goto fail;
        for (int64_t j = 0; j < len; j++) {
            PyObject *pr = Py_BuildValue("(LL)", (long long)kp[2 * j], (long long)kp[2 * j + 1]);
            if (!pr) {
                Py_DECREF(key);
                goto fail;
            }
            PyTuple_SET_ITEM(key, (Py_ssize_t)j, pr);
        }
        int rc = PyList_Append(missing, key);
        Py_DECREF(key);
        if (rc < 0) goto fail;
    }
    if (missing) {
        PyObject *parts = PyObject_CallOneArg(s->parts_fn, missing);
        if (!parts) goto fail;
        PyObject *fast = PySequence_Fast(parts, "run_lockstep: group_parts must give a sequence");
        Py_DECREF(parts);
        if (!fast) goto fail;
        Py_ssize_t q = 0;
        for (int64_t g = 0; g < d && q < PySequence_Fast_GET_SIZE(fast); g++) {
            if (gidx[g] != -1) continue;
            int64_t len = s->count[g], *kp = pairs + 2 * s->base[g];
            int64_t again = gm_find(&s->gm, gh[g], kp, len); /* (a group twice in one step) */
            if (again < 0 && gm_add(&s->gm, gh[g], kp, len, PySequence_Fast_GET_ITEM(fast, q)) < 0) {
                Py_DECREF(fast);
                goto fail;
            }
            gidx[g] = again >= 0 ? again : (int64_t)s->gm.n - 1;
            q++;
        }
        Py_DECREF(fast);
        Py_CLEAR(missing);
    }
    /* toks, n_total = float(sum(toks)), xfer = round(k_s * X(max(toks))), moe = M(n_total) */
    double n_total = 0.0, tmax = 0.0;
    int64_t amax = 0;
    for (int64_t g = 0; g < d; g++) {
        double tg = gidx[g] >= 0 ? s->gm.e[gidx[g]].tg : 0.0;
        int64_t a = gidx[g] >= 0 ? s->gm.e[gidx[g]].attn : 0;
        n_total += tg;
        if (!g || tg > tmax) tmax = tg;
        if (!g || a > amax) amax = a;
    }
    int64_t xv, moe;
    if (vm_get(&s->xfer_at, s->xfer_fn, tmax, &xv) < 0 || vm_get(&s->moe_at, s->moe_fn, n_total, &moe) < 0) return -1;
    double xr = nearbyint(s->k_s * (double)xv); /* Python's round(): half to even */
    if (!(fabs(xr) < 9.2e18)) goto overflow;
    int64_t xfer = (int64_t)xr, layer;
    if (__builtin_add_overflow(amax, xfer, &layer) || __builtin_add_overflow(layer, moe, &layer) ||
        __builtin_add_overflow(layer, xfer, &layer) || __builtin_mul_overflow(s->n_l, layer, step_ns))
        goto overflow;
    double n_l = (double)s->n_l;
    for (int64_t g = 0; g < d; g++) {
        if (gidx[g] < 0) continue;
        const GroupPart *p = &s->gm.e[gidx[g]];
        const double *sh = s->gm.shares + p->sh;
        for (int64_t j = 0; j < p->len; j++) {
            int64_t c = s->pc[s->at[s->base[g] + j]], mc;
            if (__builtin_mul_overflow(moe, c, &mc)) goto overflow;
            s->share[s->base[g] + j] = n_l * (sh[j] + p->x2 * (double)c / p->tg + (double)mc / n_total);
        }
    }
    return 0;
overflow:
    PyErr_SetString(PyExc_OverflowError, "lockstep step cost beyond int64 ns");
    return -1;
fail:
    Py_XDECREF(missing);
    return -1;
}

/* the run's int64 arrays and their lengths (a request's pieces per step: one, or chunked at most
 * one a group, its tail or a cut: so a step holds at most n + dp pieces); *nq the queue's ring */
#define N_ARRAYS 15
static void ls_arrays(LS *s, int64_t **p[N_ARRAYS], size_t len[N_ARRAYS], size_t *nq) {
    size_t n = (size_t)s->n + 1, d = (size_t)s->dp, pieces = n + d, cap = 1;
    while (cap < n) cap <<= 1;
    *nq = cap;
    int64_t **ptrs[N_ARRAYS] = {&s->remaining, &s->done, &s->taken, &s->order, &s->back, &s->pg,  &s->pi, &s->pc,
                                &s->pp,        &s->at,   &s->carry, &s->gtok,  &s->room, &s->count, &s->base};
    for (int k = 0; k < N_ARRAYS; k++) {
        p[k] = ptrs[k];
        len[k] = k < 5 ? n : k < 10 ? pieces : d;
    }
}

static void ls_free(LS *s) {
    int64_t **p[N_ARRAYS];
    size_t len[N_ARRAYS], nq;
    ls_arrays(s, p, len, &nq);
    for (int k = 0; k < N_ARRAYS; k++) {
        free(*p[k]);
        *p[k] = NULL;
    }
    free(s->q.p);
    free(s->w);
    free(s->load);
    free(s->share);
    free(s->pairs);
    free(s->gidx);
    free(s->ghash);
    s->q.p = NULL;
    s->w = s->load = s->share = NULL;
    s->pairs = s->gidx = NULL;
    s->ghash = NULL;
    gm_free(&s->gm);
    vm_free(&s->moe_at);
    vm_free(&s->xfer_at);
}

static int ls_alloc(LS *s) {
    int64_t **p[N_ARRAYS];
    size_t len[N_ARRAYS], nq;
    ls_arrays(s, p, len, &nq);
    int ok = 1;
    for (int k = 0; k < N_ARRAYS; k++) ok &= (*p[k] = malloc(len[k] * sizeof(int64_t))) != NULL;
    s->q.mask = nq - 1;
    s->q.p = malloc(nq * sizeof(int64_t));
    s->w = malloc(len[0] * sizeof(double));
    s->load = malloc((size_t)s->dp * sizeof(double));
    s->share = malloc(len[5] * sizeof(double));
    s->pairs = malloc(2 * len[5] * sizeof(int64_t));
    s->gidx = malloc((size_t)s->dp * sizeof(int64_t));
    s->ghash = malloc((size_t)s->dp * sizeof(uint64_t));
    if (!ok || !s->q.p || !s->w || !s->load || !s->share || !s->pairs || !s->gidx || !s->ghash) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t g = 0; g < s->dp; g++) s->carry[g] = -1;
    return 0;
}

static int any_carry(const LS *s) {
    for (int64_t g = 0; g < s->dp; g++)
        if (s->carry[g] >= 0) return 1;
    return 0;
}

/* a step's pieces served: their requests start (first piece), gain their shares of its time,
 * and end with it (last piece); share[j] the share of the piece at group-major position j */
static void serve_step(LS *s, const double *share, int64_t t, int64_t t_end, int64_t *start, int64_t *end,
                       double *own) {
    for (int64_t j = 0; j < s->npieces; j++) {
        int64_t k = s->at[j], i = s->pi[k], c = s->pc[k];
        if (start[i] < 0) start[i] = t;
        own[i] += share[j];
        s->done[i] += c;
        s->remaining[i] -= c;
        if (s->remaining[i] == 0) end[i] = t_end;
    }
}

/* one step's cost, computed here from the kept parts (step_cost_c) or, with micro-batch overlap,
 * asked of cost(groups) as (step ns, shares); then the step served */
static int cost_step(LS *s, PyObject *cost, int64_t t, int64_t *start, int64_t *end, double *own, int64_t *t_end) {
    int64_t step_ns;
    if (s->parts_fn) {
        if (step_cost_c(s, &step_ns) < 0) return -1;
    } else {
        PyObject *groups = groups_obj(s);
        if (!groups) return -1;
        PyObject *got = PyObject_CallOneArg(cost, groups);
        Py_DECREF(groups);
        if (!got) return -1;
        int rc = -1;
        PyObject *shares = NULL, *ns = NULL;
        if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
            PyErr_SetString(PyExc_TypeError, "run_lockstep: cost(groups) must give (step ns, shares)");
            goto out;
        }
        ns = PyNumber_Index(PyTuple_GET_ITEM(got, 0));
        if (!ns) goto out;
        step_ns = PyLong_AsLongLong(ns);
        if (step_ns == -1 && PyErr_Occurred()) goto out;
        shares = PySequence_Fast(PyTuple_GET_ITEM(got, 1), "run_lockstep: the shares must be a sequence");
        if (!shares) goto out;
        if (PySequence_Fast_GET_SIZE(shares) != s->npieces) {
            PyErr_SetString(PyExc_ValueError, "run_lockstep: cost(groups) gave a share count unlike the pieces'");
            goto out;
        }
        for (int64_t j = 0; j < s->npieces; j++) {
            s->share[j] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(shares, j));
            if (s->share[j] == -1.0 && PyErr_Occurred()) goto out;
        }
        rc = 0;
    out:
        Py_XDECREF(shares);
        Py_XDECREF(ns);
        Py_DECREF(got);
        if (rc < 0) return -1;
    }
    if (__builtin_add_overflow(t, step_ns, t_end)) {
        PyErr_SetString(PyExc_OverflowError, "lockstep time beyond int64 ns");
        return -1;
    }
    serve_step(s, s->share, t, *t_end, start, end, own);
    return 0;
}

PyDoc_STRVAR(run_doc,
             "run_lockstep(arrival, new, cached, dp, step_tokens, group_tokens, mode, chunk, c1, c2, cost, parts)\n"
             "-> (start, end, own, steps)\n\n"
             "serve_lockstep's loop with routing at step formation: arrival / new / cached the requests'\n"
             "int64 bytes (arrival order); mode 0 LockstepFormer, 1 BalancedFormer (weights c1*c/K +\n"
             "c2*c*(2P+c)/K2), 2 ChunkedFormer of budget chunk; cost(groups) a step's (ns, shares), or,\n"
             "with parts = (group_parts, moe_at, xfer_at, k_s, layers), the step costed here from its\n"
             "groups' parts (StepCoster._cost's arithmetic; None: ask cost).\n"
             "Results: start and end per request (int64 bytes, -1: never), own (float64 bytes), steps.");

static PyObject *lk_run(PyObject *self, PyObject *args) {
    (void)self;
    LS s;
    memset(&s, 0, sizeof s);
    Py_buffer v[3];
    long long dp, step_tokens, group_tokens, chunk;
    int mode;
    double c1, c2;
    PyObject *cost, *parts;
    if (!PyArg_ParseTuple(args, "y*y*y*LLLiLddOO", &v[0], &v[1], &v[2], &dp, &step_tokens, &group_tokens, &mode,
                          &chunk, &c1, &c2, &cost, &parts))
        return NULL;
    if (parts != Py_None) {
        long long layers;
        if (!PyArg_ParseTuple(parts, "OOOdL", &s.parts_fn, &s.moe_fn, &s.xfer_fn, &s.k_s, &layers)) {
            for (int k = 0; k < 3; k++) PyBuffer_Release(&v[k]);
            return NULL;
        }
        s.n_l = layers;
    }
    PyObject *result = NULL;
    int64_t *start = NULL, *end = NULL;
    double *own = NULL;
    Py_ssize_t len = v[0].len;
    if (v[1].len != len || v[2].len != len || len % (Py_ssize_t)sizeof(int64_t) || dp < 1 || mode < 0 ||
        mode > 2 || (mode == 2 && chunk < 1)) {
        PyErr_SetString(PyExc_ValueError, "run_lockstep: bad arrays, groups, mode or chunk");
        goto out;
    }
    s.n = (int64_t)(len / (Py_ssize_t)sizeof(int64_t));
    s.dp = dp;
    s.step_tokens = step_tokens;
    s.group_tokens = group_tokens;
    s.chunk = chunk;
    s.mode = mode;
    s.c1 = c1;
    s.c2 = c2;
    s.arrival = v[0].buf;
    size_t n1 = (size_t)s.n + 1;
    start = malloc(n1 * sizeof *start);
    end = malloc(n1 * sizeof *end);
    own = calloc(n1, sizeof *own);
    if (!start || !end || !own) {
        PyErr_NoMemory();
        goto out;
    }
    if (ls_alloc(&s) < 0) goto out;
    const int64_t *new = v[1].buf, *cached = v[2].buf;
    for (int64_t i = 0; i < s.n; i++) {
        start[i] = end[i] = -1;
        s.remaining[i] = new[i];
        s.done[i] = cached[i];
    }
    int64_t t = 0, ptr = 0, steps = 0;
    for (;;) {
        while (ptr < s.n && s.arrival[ptr] <= t) dq_push_back(&s.q, ptr++);
        if (!any_carry(&s) && !s.q.n) {
            if (ptr >= s.n) break;
            if (s.arrival[ptr] > t) t = s.arrival[ptr];
            continue;
        }
        s.npieces = 0;
        if (mode == 2)
            form_chunked(&s);
        else
            form_default(&s);
        int64_t t_end;
        if (cost_step(&s, cost, t, start, end, own, &t_end) < 0) goto out;
        steps++;
        t = t_end;
    }
    result = Py_BuildValue("(y#y#y#L)", (const char *)start, (Py_ssize_t)(s.n * sizeof *start), (const char *)end,
                           (Py_ssize_t)(s.n * sizeof *end), (const char *)own, (Py_ssize_t)(s.n * sizeof *own),
                           (long long)steps);
out:
    free(start);
    free(end);
    free(own);
    ls_free(&s);
    for (int k = 0; k < 3; k++) PyBuffer_Release(&v[k]);
    return result;
}

static PyMethodDef lk_methods[] = {
    {"run_lockstep", lk_run, METH_VARARGS, run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lk_module = {
    PyModuleDef_HEAD_INIT, "_lkernel", "The lockstep family's online loop, compiled.", 0, lk_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lkernel(void) { return PyModule_Create(&lk_module); }
