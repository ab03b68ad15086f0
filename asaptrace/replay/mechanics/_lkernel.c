/*
 * _lkernel: the lockstep family's online loop (asaptrace.replay.policies.lockstep_online.serve_lockstep)
 * with its built-in step formers, compiled.
 *
 * Why this exists: a coupled, balanced or chunked serving run of 2,000 arrivals forms a few hundred
 * steps, and forming one in Python (the FIFO take, the longest-first placement onto the group with
 * the least, the chunked cut) costs ~60 us: three quarters of the run.  This is the same loop over
 * C arrays: the same queue, the same take, the same stable longest-first order, the same (load,
 * group) minimum, the same float loads and float own-time sums in the same order.  What a step
 * costs stays in Python: each step's groups are handed to cost(groups) (the policy's StepCoster,
 * which keeps the step costs by their shape) as the very lists of (request, new, prefix) tuples
 * the Python former builds, and its (step ns, shares) are read back.  The Python loop stays the
 * reference; tests/test_compiled_lockstep.py runs both on the same cases and compares every time.
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

/* the step's groups as the Python former gives them: d lists of (request, new, prefix), each
 * group's pieces in the order they were placed; s->at[j] = the piece at flattened (group-major)
 * position j, the order of the shares cost() gives back */
static PyObject *groups_obj(LS *s) {
    int64_t d = s->dp, np = s->npieces;
    for (int64_t g = 0; g < d; g++) s->count[g] = 0;
    for (int64_t k = 0; k < np; k++) s->count[s->pg[k]]++;
    PyObject *groups = PyList_New((Py_ssize_t)d);
    if (!groups) return NULL;
    int64_t first = 0;
    for (int64_t g = 0; g < d; g++) {
        PyObject *lst = PyList_New((Py_ssize_t)s->count[g]);
        if (!lst) goto fail;
        PyList_SET_ITEM(groups, (Py_ssize_t)g, lst);
        s->base[g] = first;
        first += s->count[g];
        s->count[g] = 0; /* now: the group's pieces listed so far */
    }
    for (int64_t k = 0; k < np; k++) {
        int64_t g = s->pg[k], j = s->count[g]++;
        s->at[s->base[g] + j] = k;
        PyObject *t = Py_BuildValue("(LLL)", (long long)s->pi[k], (long long)s->pc[k], (long long)s->pp[k]);
        if (!t) goto fail;
        PyList_SET_ITEM(PyList_GET_ITEM(groups, (Py_ssize_t)g), (Py_ssize_t)j, t);
    }
    return groups;
fail:
    Py_DECREF(groups);
    return NULL;
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
    s->q.p = NULL;
    s->w = s->load = NULL;
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
    if (!ok || !s->q.p || !s->w || !s->load) {
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

/* one step's cost: (step ns, shares) from cost(groups); the shares added to the pieces' requests */
static int cost_step(LS *s, PyObject *cost, int64_t t, int64_t *start, int64_t *end, double *own, int64_t *t_end) {
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
    long long step_ns = PyLong_AsLongLong(ns);
    if (step_ns == -1 && PyErr_Occurred()) goto out;
    shares = PySequence_Fast(PyTuple_GET_ITEM(got, 1), "run_lockstep: the shares must be a sequence");
    if (!shares) goto out;
    if (PySequence_Fast_GET_SIZE(shares) != s->npieces) {
        PyErr_SetString(PyExc_ValueError, "run_lockstep: cost(groups) gave a share count unlike the pieces'");
        goto out;
    }
    if (__builtin_add_overflow(t, (int64_t)step_ns, t_end)) {
        PyErr_SetString(PyExc_OverflowError, "lockstep time beyond int64 ns");
        goto out;
    }
    PyObject **items = PySequence_Fast_ITEMS(shares);
    for (int64_t j = 0; j < s->npieces; j++) {
        int64_t k = s->at[j], i = s->pi[k], c = s->pc[k];
        double share = PyFloat_AsDouble(items[j]);
        if (share == -1.0 && PyErr_Occurred()) goto out;
        if (start[i] < 0) start[i] = t;
        own[i] += share;
        s->done[i] += c;
        s->remaining[i] -= c;
        if (s->remaining[i] == 0) end[i] = *t_end;
    }
    rc = 0;
out:
    Py_XDECREF(shares);
    Py_XDECREF(ns);
    Py_DECREF(got);
    return rc;
}

PyDoc_STRVAR(run_doc,
             "run_lockstep(arrival, new, cached, dp, step_tokens, group_tokens, mode, chunk, c1, c2, cost)\n"
             "-> (start, end, own, steps)\n\n"
             "serve_lockstep's loop with routing at step formation: arrival / new / cached the requests'\n"
             "int64 bytes (arrival order); mode 0 LockstepFormer, 1 BalancedFormer (weights c1*c/K +\n"
             "c2*c*(2P+c)/K2), 2 ChunkedFormer of budget chunk; cost(groups) a step's (ns, shares).\n"
             "Results: start and end per request (int64 bytes, -1: never), own (float64 bytes), steps.");

static PyObject *lk_run(PyObject *self, PyObject *args) {
    (void)self;
    LS s;
    memset(&s, 0, sizeof s);
    Py_buffer v[3];
    long long dp, step_tokens, group_tokens, chunk;
    int mode;
    double c1, c2;
    PyObject *cost;
    if (!PyArg_ParseTuple(args, "y*y*y*LLLiLddO", &v[0], &v[1], &v[2], &dp, &step_tokens, &group_tokens, &mode,
                          &chunk, &c1, &c2, &cost))
        return NULL;
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
