/*
 * _kscan: one pass over a Chrome-trace (Kineto) JSON document into columnar buffers.
 *
 * Why this exists: decoding with msgspec is fast (~300 MB/s) but then every event costs Python work
 * (one struct, one list append per field).  This scanner reads the bytes once and writes plain C
 * arrays (one slot per event and field), which Python wraps with numpy/Arrow without a Python
 * object per event.  Strings (ph, name, cat, string pids/tids/ids) are dictionary-encoded here:
 * kernel names repeat heavily, so hashing them once is cheaper than copying each one.
 *
 * What it does not do: anything that needs Python semantics.  Values it cannot convert exactly
 * (a float pid, a "1_000" time string, an int64 overflow, ...) are reported as "odd" with their raw
 * byte span so that Python decodes just those few values and applies the same rules as the msgspec
 * path.  Args are not decoded either: their raw text is kept for the few events whose args carry
 * keys Python needs (collective metadata, step/layer annotations, metadata names).
 *
 * Safety (the input is untrusted): every read is bounds-checked against the buffer length, the
 * nesting depth is capped (KS_MAX_DEPTH) and handled without recursion, every output buffer grows
 * with overflow-checked sizes, and the scan is strict JSON (RFC 8259, UTF-8 validated in every
 * string): anything it refuses raises ValueError("invalid JSON at byte N: ...") and the caller falls
 * back to msgspec for the exact message.  No global mutable state: everything lives in one Scan
 * struct per call, so the GIL is released during the scan.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define KS_MAX_DEPTH 256        /* below msgspec's recursion limit, so we never accept what it refuses */
#define KS_HUGE_INT_DIGITS 600  /* integers longer than this go to Python (int_max_str_digits >= 640) */
#define KS_MAX_SIG 36           /* significant digits kept exactly for a JSON number */
#define KS_MAX_SIG_STR 24       /* ... for a number in a string (Decimal's 28-digit context, times 1000) */

typedef unsigned __int128 u128;

/* value fields (int64 + status) */
enum { V_PID, V_TID, V_ID, V_TS, V_DUR, V_CORR, V_EXT, V_COUNT };
/* string dictionaries */
enum { D_PH, D_NAME, D_CAT, D_PID, D_TID, D_ID, D_COUNT };
/* statuses of a value field */
enum { ST_MISSING = 0, ST_OK = 1, ST_ODD = 2, ST_STR = 3 };
/* top-level keys whose raw spans are returned */
enum { H_DIST, H_BASE, H_UNIT, H_DEV, H_COUNT };
static const char *const HEADER_NAMES[H_COUNT] = {
    "distributedInfo", "baseTimeNanoseconds", "displayTimeUnit", "deviceProperties"};

/* ------------------------------------------------------------------------------------------ buffers */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (extra <= b->cap - b->len) return 0;
    size_t need = b->len + extra;
    if (need < b->len) return -1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_append(Buf *b, const void *src, size_t len) {
    if (buf_reserve(b, len)) return -1;
    if (len) memcpy(b->p + b->len, src, len);
    b->len += len;
    return 0;
}

static int buf_i64(Buf *b, int64_t v) { return buf_append(b, &v, sizeof v); }

static int buf_u8(Buf *b, uint8_t v) { return buf_append(b, &v, 1); }

/* An offsets buffer always starts with one 0 entry (Arrow's n+1 offsets). */
static int offs_reset(Buf *b) {
    b->len = 0;
    return buf_i64(b, 0);
}

/* ------------------------------------------------------------------------------ string dictionary */

typedef struct {
    Buf data;           /* the distinct strings, concatenated */
    Buf offs;           /* int64 offsets, count + 1 entries */
    uint64_t *hashes;   /* hash per code */
    size_t hcap;
    int32_t *slots;     /* open addressing, power-of-two size; -1 = empty */
    size_t nslots;
    size_t count;
} Dict;

static inline uint64_t load64(const char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint64_t hash_bytes(const char *p, size_t n, uint64_t seed) {
    uint64_t h = seed ^ ((uint64_t)n * 0x9E3779B97F4A7C15ULL);
    while (n >= 8) {
        h = (h ^ load64(p)) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t t = 0;
    if (n) memcpy(&t, p, n);
    h = (h ^ t) * 0x94d049bb133111ebULL;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return h;
}

static int dict_init(Dict *d) {
    memset(d, 0, sizeof *d);
    d->nslots = 64;
    d->slots = malloc(d->nslots * sizeof(int32_t));
    if (!d->slots) return -1;
    memset(d->slots, 0xff, d->nslots * sizeof(int32_t));
    return offs_reset(&d->offs);
}

static void dict_free(Dict *d) {
    free(d->data.p);
    free(d->offs.p);
    free(d->hashes);
    free(d->slots);
    memset(d, 0, sizeof *d);
}

static int dict_rehash(Dict *d) {
    if (d->nslots > SIZE_MAX / 2 / sizeof(int32_t)) return -1;
    size_t ns = d->nslots * 2, mask = ns - 1;
    int32_t *slots = malloc(ns * sizeof(int32_t));
    if (!slots) return -1;
    memset(slots, 0xff, ns * sizeof(int32_t));
    for (size_t c = 0; c < d->count; c++) {
        size_t i = (size_t)d->hashes[c] & mask;
        while (slots[i] >= 0) i = (i + 1) & mask;
        slots[i] = (int32_t)c;
    }
    free(d->slots);
    d->slots = slots;
    d->nslots = ns;
    return 0;
}

/* Code of the string (adding it when new); -1 out of memory, -2 too many distinct strings. */
static int64_t dict_intern(Dict *d, const char *s, size_t len, uint64_t seed) {
    uint64_t h = hash_bytes(s, len, seed);
    size_t mask = d->nslots - 1, i = (size_t)h & mask;
    const int64_t *offs = (const int64_t *)d->offs.p;
    for (;;) {
        int32_t c = d->slots[i];
        if (c < 0) break;
        if (d->hashes[c] == h) {
            size_t a = (size_t)offs[c], b = (size_t)offs[c + 1];
            if (b - a == len && (len == 0 || memcmp(d->data.p + a, s, len) == 0)) return c;
        }
        i = (i + 1) & mask;
    }
    if (d->count >= (size_t)INT32_MAX - 1) return -2;
    if (d->count == d->hcap) {
        size_t cap = d->hcap ? d->hcap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(uint64_t)) return -1;
        uint64_t *hs = realloc(d->hashes, cap * sizeof(uint64_t));
        if (!hs) return -1;
        d->hashes = hs;
        d->hcap = cap;
    }
    if (buf_append(&d->data, s, len)) return -1;
    if (buf_i64(&d->offs, (int64_t)d->data.len)) return -1;
    int32_t code = (int32_t)d->count;
    d->hashes[code] = h;
    d->slots[i] = code;
    d->count++;
    if (d->count * 2 > d->nslots && dict_rehash(d)) return -1;
    return code;
}

/* ----------------------------------------------------------------------------- per-event columns */

typedef struct {
    size_t n, cap;
    uint8_t *ok, *args_st, *rich;
    int32_t *code[3]; /* ph, name, cat */
    int32_t *key[2];  /* pid, tid: code of the (kind, value) key, -1 for an odd value */
    int64_t *val[V_COUNT];
    uint8_t *st[V_COUNT];
} Cols;

static int grow(void **p, size_t count, size_t size) {
    if (count > SIZE_MAX / size) return -1;
    void *q = realloc(*p, count * size);
    if (!q) return -1;
    *p = q;
    return 0;
}

static int cols_grow(Cols *c, size_t hint) {
    size_t cap = c->cap ? c->cap * 2 : (hint > 4096 ? hint : 4096);
    if (cap < c->cap) return -1;
    if (grow((void **)&c->ok, cap, 1) || grow((void **)&c->args_st, cap, 1) || grow((void **)&c->rich, cap, 1))
        return -1;
    for (int j = 0; j < 3; j++)
        if (grow((void **)&c->code[j], cap, sizeof(int32_t))) return -1;
    for (int j = 0; j < 2; j++)
        if (grow((void **)&c->key[j], cap, sizeof(int32_t))) return -1;
    for (int f = 0; f < V_COUNT; f++)
        if (grow((void **)&c->val[f], cap, sizeof(int64_t)) || grow((void **)&c->st[f], cap, 1)) return -1;
    c->cap = cap;
    return 0;
}

static void cols_free(Cols *c) {
    free(c->ok);
    free(c->args_st);
    free(c->rich);
    for (int j = 0; j < 3; j++) free(c->code[j]);
    for (int j = 0; j < 2; j++) free(c->key[j]);
    for (int f = 0; f < V_COUNT; f++) {
        free(c->val[f]);
        free(c->st[f]);
    }
    memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------------------------- pid / tid keys */

/*
 * Distinct pid (or tid) values in order of first appearance, each a (kind, value) pair: kind 0 =
 * absent, 1 = the int value, 3 = string (value = its code in the field's string dictionary).
 * Python maps these few keys to stream ids instead of hashing a million values again.
 */
typedef struct {
    uint8_t *kind;
    int64_t *value;
    size_t count, cap;
    int32_t *slots;
    size_t nslots;
    int32_t last; /* the code of the previous event's key: consecutive events mostly share it */
} Keys;

static int keys_init(Keys *k) {
    memset(k, 0, sizeof *k);
    k->nslots = 64;
    k->slots = malloc(k->nslots * sizeof(int32_t));
    if (!k->slots) return -1;
    memset(k->slots, 0xff, k->nslots * sizeof(int32_t));
    k->last = -1;
    return 0;
}

static void keys_free(Keys *k) {
    free(k->kind);
    free(k->value);
    free(k->slots);
    memset(k, 0, sizeof *k);
}

static void keys_clear(Keys *k) {
    k->count = 0;
    k->last = -1;
    memset(k->slots, 0xff, k->nslots * sizeof(int32_t));
}

static inline uint64_t key_hash(uint8_t kind, int64_t value) {
    uint64_t h = ((uint64_t)value ^ ((uint64_t)kind << 56)) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

/* The key's code (adding it when new); -1 out of memory, -2 too many distinct keys. */
static int64_t keys_code(Keys *k, uint8_t kind, int64_t value) {
    if (k->last >= 0 && k->kind[k->last] == kind && k->value[k->last] == value) return k->last;
    size_t mask = k->nslots - 1, i = (size_t)key_hash(kind, value) & mask;
    for (;;) {
        int32_t c = k->slots[i];
        if (c < 0) break;
        if (k->kind[c] == kind && k->value[c] == value) return k->last = c;
        i = (i + 1) & mask;
    }
    if (k->count >= (size_t)INT32_MAX - 1) return -2;
    if (k->count == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 16;
        if (grow((void **)&k->kind, cap, 1) || grow((void **)&k->value, cap, sizeof(int64_t))) return -1;
        k->cap = cap;
    }
    int32_t code = (int32_t)k->count++;
    k->kind[code] = kind;
    k->value[code] = value;
    k->slots[i] = code;
    if (k->count * 2 > k->nslots) {
        if (k->nslots > SIZE_MAX / 2 / sizeof(int32_t)) return -1;
        size_t ns = k->nslots * 2;
        int32_t *slots = malloc(ns * sizeof(int32_t));
        if (!slots) return -1;
        memset(slots, 0xff, ns * sizeof(int32_t));
        for (size_t c = 0; c < k->count; c++) {
            size_t j = (size_t)key_hash(k->kind[c], k->value[c]) & (ns - 1);
            while (slots[j] >= 0) j = (j + 1) & (ns - 1);
            slots[j] = (int32_t)c;
        }
        free(k->slots);
        k->slots = slots;
        k->nslots = ns;
    }
    return k->last = code;
}

/* What one event said, collected while its keys go by (any order; the last occurrence wins). */
typedef struct {
    uint8_t ok, args_st, args_bad, rich, has_dims, has_type;
    int32_t code[3];
    int64_t val[V_COUNT];
    uint8_t st[V_COUNT];
    size_t odd_s[V_COUNT], odd_e[V_COUNT];
    size_t args_s, args_e, dims_s, dims_e, type_s, type_e;
} Ev;

/* ---------------------------------------------------------------------------------- scanner state */

typedef struct {
    const unsigned char *s;
    size_t n, i;
    int depth;
    const char *err;
    size_t err_at;
    int oom;
    uint64_t seed;
    Buf scratch; /* unescaped strings */
    Cols cols;
    Dict dict[D_COUNT];
    Keys keys[2]; /* pid, tid */
    Buf odd;                              /* int64 quads: row, field, start, end */
    Buf args_rows, args_data; /* rows, and raw args text, of events with keys Python needs: "[a,b,...]" */
    Buf sh_rows, dims_offs, dims_data, dims_valid, type_offs, type_data, type_valid;
    int form; /* 0 list, 1 object, 2 anything else */
    int has_events;
    size_t huge_ints;
    int64_t hs[H_COUNT], he[H_COUNT];
    unsigned char stack[KS_MAX_DEPTH + 1];
} Scan;

static int fail(Scan *sc, size_t at, const char *msg) {
    if (!sc->err) {
        sc->err = msg;
        sc->err_at = at;
    }
    return -1;
}

static int fail_eof(Scan *sc) { return fail(sc, sc->n, "input is truncated"); }

static int fail_oom(Scan *sc) {
    sc->oom = 1;
    return fail(sc, sc->i, "out of memory");
}

static inline void ws(Scan *sc) {
    const unsigned char *s = sc->s;
    size_t i = sc->i, n = sc->n;
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
    sc->i = i;
}

/* ------------------------------------------------------------------------------------------ strings */

static int utf8_valid(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            k = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (k > n - i - 1) return 0;
        for (size_t j = 1; j <= k; j++) {
            unsigned char b = p[i + j];
            if ((b & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (b & 0x3F);
        }
        if (k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
        if (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Four hex digits at s[i..i+4) (bounded by end); -1 when missing or not hex. */
static int32_t hex4(const unsigned char *s, size_t i, size_t end) {
    if (i > end || end - i < 4) return -1;
    int32_t u = 0;
    for (int j = 0; j < 4; j++) {
        int h = hexval(s[i + j]);
        if (h < 0) return -1;
        u = (u << 4) | h;
    }
    return u;
}

/*
 * At an opening quote: validate the string (escapes, surrogate pairs, control characters, UTF-8)
 * and move past its closing quote.  [*a, *b) is the content between the quotes; *esc tells whether
 * it holds backslash escapes (then unescape() decodes it).
 */
static int scan_string(Scan *sc, size_t *a, size_t *b, int *esc) {
    const unsigned char *s = sc->s;
    size_t n = sc->n, i = sc->i + 1, start = i;
    int e = 0;
    unsigned high = 0;
    for (;;) {
#if defined(__SSE2__)
        {
            const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), ctrl = _mm_set1_epi8(0x1f);
            while (n - i >= 16) {
                __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
                __m128i sp = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                          _mm_cmpeq_epi8(_mm_max_epu8(v, ctrl), ctrl));
                unsigned m = (unsigned)_mm_movemask_epi8(sp);
                unsigned hm = (unsigned)_mm_movemask_epi8(v);
                if (m == 0) {
                    high |= hm;
                    i += 16;
                    continue;
                }
                high |= hm & ((m & (0u - m)) - 1u);
                i += (size_t)__builtin_ctz(m);
                break;
            }
        }
#endif
        if (i >= n) return fail_eof(sc);
        unsigned char c = s[i];
        if (c == '"') break;
        if (c == '\\') {
            if (n - i < 2) return fail_eof(sc);
            e = 1;
            switch (s[i + 1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                i += 2;
                break;
            case 'u': {
                if (n - i < 6) return fail_eof(sc);
                int32_t u = hex4(s, i + 2, n);
                if (u < 0) return fail(sc, i, "invalid character in unicode escape");
                if (u >= 0xDC00 && u <= 0xDFFF) return fail(sc, i, "invalid utf-16 surrogate pair");
                i += 6;
                if (u >= 0xD800 && u <= 0xDBFF) { /* a low surrogate escape must follow */
                    if (i >= n) return fail_eof(sc);
                    if (s[i] != '\\') return fail(sc, i, "invalid utf-16 surrogate pair");
                    if (n - i < 2) return fail_eof(sc);
                    if (s[i + 1] != 'u') return fail(sc, i, "invalid utf-16 surrogate pair");
                    if (n - i < 6) return fail_eof(sc);
                    int32_t l = hex4(s, i + 2, n);
                    if (l < 0xDC00 || l > 0xDFFF) return fail(sc, i, "invalid utf-16 surrogate pair");
                    i += 6;
                }
                break;
            }
            default:
                return fail(sc, i, "invalid escape character in string");
            }
            continue;
        }
        if (c < 0x20) return fail(sc, i, "invalid character in string");
        high |= c & 0x80u;
        i++;
    }
    if (high && !utf8_valid(s + start, i - start)) return fail(sc, start, "invalid UTF-8 in string");
    *a = start;
    *b = i;
    *esc = e;
    sc->i = i + 1;
    return 0;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/*
 * Decode the escapes of s[a, b) (already validated by scan_string) into sc->scratch.  Every escape
 * is at least as long as the UTF-8 it stands for, so b - a bytes always suffice; every step is still
 * checked, so a buffer changed under us (a memoryview of a mutated bytearray) cannot overflow.
 */
static int unescape(Scan *sc, size_t a, size_t b) {
    Buf *o = &sc->scratch;
    o->len = 0;
    if (buf_reserve(o, b - a + 4)) return fail_oom(sc);
    const unsigned char *s = sc->s;
    char *out = o->p;
    size_t cap = o->cap, k = 0, i = a;
    while (i < b) {
        unsigned char c = s[i];
        if (c != '\\') {
            if (k >= cap) return fail(sc, i, "string changed while being read");
            out[k++] = (char)c;
            i++;
            continue;
        }
        if (b - i < 2) return fail(sc, i, "string changed while being read");
        unsigned char x = s[i + 1];
        char r = 0;
        switch (x) {
        case '"': r = '"'; break;
        case '\\': r = '\\'; break;
        case '/': r = '/'; break;
        case 'b': r = '\b'; break;
        case 'f': r = '\f'; break;
        case 'n': r = '\n'; break;
        case 'r': r = '\r'; break;
        case 't': r = '\t'; break;
        case 'u': {
            int32_t u = hex4(s, i + 2, b);
            if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return fail(sc, i, "string changed while being read");
            uint32_t cp = (uint32_t)u;
            size_t used = 6;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (b - i < 12 || s[i + 6] != '\\' || s[i + 7] != 'u')
                    return fail(sc, i, "string changed while being read");
                int32_t l = hex4(s, i + 8, b);
                if (l < 0xDC00 || l > 0xDFFF) return fail(sc, i, "string changed while being read");
                cp = 0x10000 + (((uint32_t)u - 0xD800) << 10) + ((uint32_t)l - 0xDC00);
                used = 12;
            }
            if (cap - k < 4) return fail(sc, i, "string changed while being read");
            k += put_utf8(out + k, cp);
            i += used;
            continue;
        }
        default:
            return fail(sc, i, "string changed while being read");
        }
        if (k >= cap) return fail(sc, i, "string changed while being read");
        out[k++] = r;
        i += 2;
    }
    o->len = k;
    return 0;
}

/* At a quote: the string's decoded bytes (pointing into the input, or into scratch when escaped). */
static int read_string(Scan *sc, const char **p, size_t *len, size_t *start) {
    size_t a, b;
    int esc;
    if (scan_string(sc, &a, &b, &esc)) return -1;
    *start = a;
    if (!esc) {
        *p = (const char *)sc->s + a;
        *len = b - a;
        return 0;
    }
    if (unescape(sc, a, b)) return -1;
    *p = sc->scratch.p;
    *len = sc->scratch.len;
    return 0;
}

/* ------------------------------------------------------------------------------------------ numbers */

/* A decimal number: value = (neg ? -1 : 1) * mant * 10^exp10, exactly unless inexact. */
typedef struct {
    int neg, is_int, inexact, ndig;
    u128 mant;
    int64_t exp10;
} Dec;

static inline void dec_digit(Dec *d, int v, int frac) {
    if (d->ndig < KS_MAX_SIG) {
        d->mant = d->mant * 10 + (u128)v;
        if (d->mant) d->ndig++;
        if (frac) d->exp10--;
    } else {
        if (v) d->inexact = 1;
        if (!frac) d->exp10++;
    }
}

static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* Exponent digits at p[*i..n): accumulated with saturation (huge exponents stay huge, no overflow). */
static void exp_digits(const unsigned char *p, size_t n, size_t *i, int64_t *e) {
    int64_t v = 0;
    while (*i < n && is_digit(p[*i])) {
        if (v < 1000000000) v = v * 10 + (p[*i] - '0');
        (*i)++;
    }
    *e = v;
}

/*
 * The value of decimal text p[0, n): optional sign, digits with an optional point (at least one
 * digit), optional exponent, nothing else.  Accepts the JSON number grammar and the common forms of
 * Python's Decimal ("+5", "5.", ".5").  0 when the text does not match or has more than max_sig
 * significant digits.
 */
static int dec_parse(const unsigned char *p, size_t n, int max_sig, Dec *d) {
    size_t i = 0, digits = 0;
    Dec t;
    memset(&t, 0, sizeof t);
    t.is_int = 1;
    if (i < n && (p[i] == '+' || p[i] == '-')) {
        t.neg = p[i] == '-';
        i++;
    }
    /* fast path: at most 19 digits (< 2^64) with an optional point and no exponent — every
     * ts, dur, pid and correlation in practice */
    if (n - i <= 20) {
        uint64_t m = 0;
        size_t j = i, nd = 0, frac = 0, lead = 0;
        int point = 0;
        for (; j < n; j++) {
            unsigned char c = p[j];
            if (is_digit(c)) {
                if (m == 0 && c == '0') lead++;
                m = m * 10 + (uint64_t)(c - '0');
                nd++;
                frac += point;
            } else if (c == '.' && !point) {
                point = 1;
            } else {
                break;
            }
        }
        if (j == n && nd > 0 && nd <= 19) {
            t.mant = m;
            t.ndig = m ? (int)(nd - lead) : 0;
            t.exp10 = -(int64_t)frac;
            t.is_int = !point;
            if (t.ndig > max_sig) return 0;
            *d = t;
            return 1;
        }
    }
    while (i < n && is_digit(p[i])) {
        dec_digit(&t, p[i] - '0', 0);
        digits++;
        i++;
    }
    if (i < n && p[i] == '.') {
        t.is_int = 0;
        i++;
        while (i < n && is_digit(p[i])) {
            dec_digit(&t, p[i] - '0', 1);
            digits++;
            i++;
        }
    }
    if (!digits) return 0;
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        t.is_int = 0;
        i++;
        int eneg = 0;
        if (i < n && (p[i] == '+' || p[i] == '-')) {
            eneg = p[i] == '-';
            i++;
        }
        if (i >= n || !is_digit(p[i])) return 0;
        int64_t e;
        exp_digits(p, n, &i, &e);
        t.exp10 += eneg ? -e : e;
    }
    if (i != n || t.ndig > max_sig) return 0;
    *d = t;
    return 1;
}

/* Step over a JSON number at sc->i (strict grammar), counting over-long integer literals. */
static int scan_number(Scan *sc) {
    const unsigned char *s = sc->s;
    size_t n = sc->n, i = sc->i;
    int is_int = 1;
    if (i < n && s[i] == '-') i++;
    if (i >= n) return fail_eof(sc);
    size_t int_start = i;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && is_digit(s[i])) i++;
    } else {
        return fail(sc, i, "invalid number");
    }
    size_t int_digits = i - int_start;
    if (i < n && s[i] == '.') {
        is_int = 0;
        i++;
        if (i >= n) return fail_eof(sc);
        if (!is_digit(s[i])) return fail(sc, i, "invalid number");
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        is_int = 0;
        i++;
        if (i >= n) return fail_eof(sc);
        if (s[i] == '+' || s[i] == '-') {
            i++;
            if (i >= n) return fail_eof(sc);
        }
        if (!is_digit(s[i])) return fail(sc, i, "invalid number");
        while (i < n && is_digit(s[i])) i++;
    }
    if (is_int && int_digits > KS_HUGE_INT_DIGITS) sc->huge_ints++;
    sc->i = i;
    return 0;
}

/* A JSON number at sc->i and its exact decimal value (d->inexact when over KS_MAX_SIG digits). */
static int parse_number(Scan *sc, Dec *d) {
    size_t a = sc->i;
    if (scan_number(sc)) return -1;
    if (!dec_parse(sc->s + a, sc->i - a, KS_MAX_SIG, d)) {
        memset(d, 0, sizeof *d);
        d->inexact = 1;
    }
    return 0;
}

/* A number written in a string, as Python's Decimal reads its common forms (spaces around, sign,
 * point, exponent).  Anything else (underscores, "NaN", other whitespace, more digits than Decimal's
 * 28-digit context keeps exact after the scaling) is left to Python. */
static int parse_decimal_text(const unsigned char *p, size_t n, Dec *d) {
    size_t i = 0;
    while (i < n && p[i] == ' ') i++;
    while (n > i && p[n - 1] == ' ') n--;
    return dec_parse(p + i, n - i, KS_MAX_SIG_STR, d);
}

static const uint64_t POW10[20] = {1ULL,
                                   10ULL,
                                   100ULL,
                                   1000ULL,
                                   10000ULL,
                                   100000ULL,
                                   1000000ULL,
                                   10000000ULL,
                                   100000000ULL,
                                   1000000000ULL,
                                   10000000000ULL,
                                   100000000000ULL,
                                   1000000000000ULL,
                                   10000000000000ULL,
                                   100000000000000ULL,
                                   1000000000000000ULL,
                                   10000000000000000ULL,
                                   100000000000000000ULL,
                                   1000000000000000000ULL,
                                   10000000000000000000ULL};

/* value * 10^3 as int64 (µs -> ns), rounded half to even; 0 when not exactly representable. */
static int dec_to_ns(const Dec *d, int64_t *out) {
    if (d->inexact) return 0;
    if (d->mant == 0) {
        *out = 0;
        return 1;
    }
    int64_t k = d->exp10 + 3;
    if (d->mant <= UINT64_MAX && k >= -19 && k <= 19) { /* the usual case, in 64-bit arithmetic */
        uint64_t m = (uint64_t)d->mant, q;
        uint64_t lim = d->neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        if (k >= 0) {
            if (__builtin_mul_overflow(m, POW10[k], &q) || q > lim) return 0;
        } else {
            uint64_t p = POW10[-k], r;
            q = m / p;
            r = m % p;
            if (r > p - r || (r == p - r && (q & 1))) q++; /* r > p/2, or exactly half and q odd */
            if (q > lim) return 0;
        }
        *out = d->neg ? (q == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)q) : (int64_t)q;
        return 1;
    }
    u128 lim = d->neg ? (u128)INT64_MAX + 1 : (u128)INT64_MAX;
    u128 q;
    if (k >= 0) {
        if (k > 19) return 0;
        q = d->mant;
        if (q > lim) return 0;
        for (int64_t j = 0; j < k; j++) {
            if (q > lim / 10) return 0;
            q *= 10;
        }
    } else {
        if (k < -38) { /* mant < 10^36: the value is below 0.01 ns */
            *out = 0;
            return 1;
        }
        u128 p = 1;
        for (int64_t j = 0; j < -k; j++) p *= 10;
        q = d->mant / p;
        u128 r = d->mant % p;
        if (r * 2 > p || (r * 2 == p && (q & 1))) q++;
        if (q > lim) return 0;
    }
    if (d->neg)
        *out = q == (u128)INT64_MAX + 1 ? INT64_MIN : -(int64_t)q;
    else
        *out = (int64_t)q;
    return 1;
}

/* A JSON integer literal that fits int64. */
static int dec_to_i64(const Dec *d, int64_t *out) {
    if (!d->is_int || d->inexact || d->exp10 != 0) return 0;
    u128 lim = d->neg ? (u128)INT64_MAX + 1 : (u128)INT64_MAX;
    if (d->mant > lim) return 0;
    if (d->neg)
        *out = d->mant == (u128)INT64_MAX + 1 ? INT64_MIN : -(int64_t)d->mant;
    else
        *out = (int64_t)d->mant;
    return 1;
}

/* -------------------------------------------------------------------------------- generic values */

static int literal(Scan *sc, const char *word, size_t len) {
    for (size_t j = 0; j < len; j++) {
        if (sc->i + j >= sc->n) return fail_eof(sc);
        if (sc->s[sc->i + j] != (unsigned char)word[j]) return fail(sc, sc->i, "invalid character");
    }
    sc->i += len;
    return 0;
}

/* Validate and step over one value of any kind, iteratively (the depth is capped). */
static int skip_value(Scan *sc) {
    const unsigned char *s = sc->s;
    size_t n = sc->n;
    int top = 0;
    unsigned char *stack = sc->stack;
    const int room = KS_MAX_DEPTH - sc->depth;
value:
    ws(sc);
    if (sc->i >= n) return fail_eof(sc);
    switch (s[sc->i]) {
    case '{':
        if (top >= room) return fail(sc, sc->i, "nested too deeply");
        stack[top++] = '}';
        sc->i++;
        ws(sc);
        if (sc->i >= n) return fail_eof(sc);
        if (s[sc->i] == '}') {
            sc->i++;
            top--;
            goto after;
        }
        goto key;
    case '[':
        if (top >= room) return fail(sc, sc->i, "nested too deeply");
        stack[top++] = ']';
        sc->i++;
        ws(sc);
        if (sc->i >= n) return fail_eof(sc);
        if (s[sc->i] == ']') {
            sc->i++;
            top--;
            goto after;
        }
        goto value;
    case '"': {
        size_t a, b;
        int esc;
        if (scan_string(sc, &a, &b, &esc)) return -1;
        goto after;
    }
    case 't':
        if (literal(sc, "true", 4)) return -1;
        goto after;
    case 'f':
        if (literal(sc, "false", 5)) return -1;
        goto after;
    case 'n':
        if (literal(sc, "null", 4)) return -1;
        goto after;
    default:
        if (s[sc->i] == '-' || is_digit(s[sc->i])) {
            if (scan_number(sc)) return -1;
            goto after;
        }
        return fail(sc, sc->i, "invalid character");
    }
key:
    ws(sc);
    if (sc->i >= n) return fail_eof(sc);
    if (s[sc->i] != '"') return fail(sc, sc->i, "object keys must be strings");
    {
        size_t a, b;
        int esc;
        if (scan_string(sc, &a, &b, &esc)) return -1;
    }
    ws(sc);
    if (sc->i >= n) return fail_eof(sc);
    if (s[sc->i] != ':') return fail(sc, sc->i, "expected ':'");
    sc->i++;
    goto value;
after:
    if (top == 0) return 0;
    ws(sc);
    if (sc->i >= n) return fail_eof(sc);
    if (s[sc->i] == ',') {
        sc->i++;
        if (stack[top - 1] == '}') goto key;
        goto value;
    }
    if (s[sc->i] == stack[top - 1]) {
        sc->i++;
        top--;
        goto after;
    }
    return fail(sc, sc->i, stack[top - 1] == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

/* At a value: [*a, *b) is its raw text. */
static int value_span(Scan *sc, size_t *a, size_t *b) {
    ws(sc);
    *a = sc->i;
    if (skip_value(sc)) return -1;
    *b = sc->i;
    return 0;
}

/* ----------------------------------------------------------------------------------- event fields */

/* ph / name / cat: a dictionary code, -1 for anything that is not a string. */
static int field_string(Scan *sc, int dict, int32_t *code) {
    if (sc->i >= sc->n) return fail_eof(sc);
    if (sc->s[sc->i] != '"') {
        *code = -1;
        return skip_value(sc);
    }
    const char *p;
    size_t len, start;
    if (read_string(sc, &p, &len, &start)) return -1;
    int64_t c = dict_intern(&sc->dict[dict], p, len, sc->seed);
    if (c == -1) return fail_oom(sc);
    if (c < 0) return fail(sc, start, "too many distinct strings");
    *code = (int32_t)c;
    return 0;
}

/*
 * pid / tid / id / correlation / External id / ts / dur.  Status 1 with the value when it converts
 * exactly; 3 with a dictionary code for a string (when dict >= 0); 0 for null; otherwise 2 ("odd")
 * with the raw span, for Python to decode.
 */
static int field_value(Scan *sc, Ev *ev, int f, int dict, int is_time) {
    const unsigned char *s = sc->s;
    size_t a = sc->i;
    if (a >= sc->n) return fail_eof(sc);
    unsigned char c = s[a];
    ev->st[f] = ST_MISSING;
    ev->val[f] = 0;
    if (c == '-' || is_digit(c)) {
        Dec d;
        if (parse_number(sc, &d)) return -1;
        int64_t v;
        if (is_time ? dec_to_ns(&d, &v) : dec_to_i64(&d, &v)) {
            ev->val[f] = v;
            ev->st[f] = ST_OK;
            return 0;
        }
    } else if (c == '"') {
        if (dict >= 0) {
            int32_t code;
            if (field_string(sc, dict, &code)) return -1;
            ev->val[f] = code;
            ev->st[f] = ST_STR;
            return 0;
        }
        size_t sa, sb;
        int esc;
        if (scan_string(sc, &sa, &sb, &esc)) return -1;
        Dec d;
        int64_t v;
        if (is_time && !esc && parse_decimal_text(s + sa, sb - sa, &d) && dec_to_ns(&d, &v)) {
            ev->val[f] = v;
            ev->st[f] = ST_OK;
            return 0;
        }
    } else {
        if (skip_value(sc)) return -1;
        if (c == 'n') return 0; /* null: the same as absent */
    }
    ev->st[f] = ST_ODD;
    ev->odd_s[f] = a;
    ev->odd_e[f] = sc->i;
    return 0;
}

static int key_is(const char *p, size_t len, const char *k) {
    size_t kl = strlen(k);
    return len == kl && memcmp(p, k, kl) == 0;
}

enum { A_OTHER, A_CORR, A_EXT, A_DIMS, A_TYPE, A_RICH, A_META };

static int args_key(const char *p, size_t len) {
    switch (len) {
    case 4:
        if (key_is(p, len, "step")) return A_RICH;
        if (key_is(p, len, "name")) return A_META;
        break;
    case 5:
        if (key_is(p, len, "layer")) return A_RICH;
        break;
    case 6:
        if (key_is(p, len, "labels")) return A_META;
        break;
    case 8:
        if (key_is(p, len, "seq_lens") || key_is(p, len, "dp_group")) return A_RICH;
        break;
    case 10:
        if (key_is(p, len, "Input Dims")) return A_DIMS;
        if (key_is(p, len, "Input type")) return A_TYPE;
        break;
    case 11:
        if (key_is(p, len, "correlation")) return A_CORR;
        if (key_is(p, len, "External id")) return A_EXT;
        if (key_is(p, len, "micro_batch")) return A_RICH;
        if (key_is(p, len, "cached_lens") || key_is(p, len, "request_ids")) return A_META;
        break;
    case 13:
        if (key_is(p, len, "In msg nelems")) return A_RICH;
        break;
    case 14:
        if (key_is(p, len, "wait_on_stream")) return A_RICH;
        break;
    case 15:
        if (key_is(p, len, "Collective name")) return A_RICH;
        break;
    case 19:
        if (key_is(p, len, "Process Group Ranks")) return A_RICH;
        break;
    case 33: /* a CUDA event wait: which cudaEventRecord it waits on (critical path) */
        if (key_is(p, len, "wait_on_cuda_event_record_corr_id")) return A_RICH;
        break;
    default:
        break;
    }
    return A_OTHER;
}

/* Expect `"key" :` at sc->i (after whitespace); the decoded key is returned in *p and *len. */
static int object_key(Scan *sc, const char **p, size_t *len) {
    size_t start;
    ws(sc);
    if (sc->i >= sc->n) return fail_eof(sc);
    if (sc->s[sc->i] != '"') return fail(sc, sc->i, "object keys must be strings");
    if (read_string(sc, p, len, &start)) return -1;
    ws(sc);
    if (sc->i >= sc->n) return fail_eof(sc);
    if (sc->s[sc->i] != ':') return fail(sc, sc->i, "expected ':'");
    sc->i++;
    ws(sc);
    if (sc->i >= sc->n) return fail_eof(sc);
    return 0;
}

/* After a member: 1 when another follows, 0 at the closing brace. */
static int object_next(Scan *sc) {
    ws(sc);
    if (sc->i >= sc->n) return fail_eof(sc);
    if (sc->s[sc->i] == ',') {
        sc->i++;
        return 1;
    }
    if (sc->s[sc->i] == '}') {
        sc->i++;
        return 0;
    }
    return fail(sc, sc->i, "expected ',' or '}'");
}

static int parse_args(Scan *sc, Ev *ev) {
    const unsigned char *s = sc->s;
    size_t a = sc->i;
    ev->rich = ev->has_dims = ev->has_type = 0;
    ev->st[V_CORR] = ev->st[V_EXT] = ST_MISSING;
    if (s[a] != '{') {
        if (skip_value(sc)) return -1;
        ev->args_st = s[a] == 'n' ? 0 : 2;
        /* msgspec checks every occurrence of a repeated key: one that is not an object (or null)
         * fails the event even when a later one is fine */
        ev->args_bad |= ev->args_st == 2;
        return 0;
    }
    if (sc->depth >= KS_MAX_DEPTH) return fail(sc, a, "nested too deeply");
    sc->depth++;
    sc->i++;
    ev->args_st = 1;
    ev->args_s = a;
    ws(sc);
    if (sc->i >= sc->n) return fail_eof(sc);
    if (s[sc->i] == '}') {
        sc->i++;
    } else {
        int more = 1;
        while (more) {
            const char *p;
            size_t len;
            if (object_key(sc, &p, &len)) return -1;
            switch (args_key(p, len)) {
            case A_CORR:
                if (field_value(sc, ev, V_CORR, -1, 0)) return -1;
                break;
            case A_EXT:
                if (field_value(sc, ev, V_EXT, -1, 0)) return -1;
                break;
            case A_DIMS:
                if (value_span(sc, &ev->dims_s, &ev->dims_e)) return -1;
                ev->has_dims = 1;
                break;
            case A_TYPE:
                if (value_span(sc, &ev->type_s, &ev->type_e)) return -1;
                ev->has_type = 1;
                break;
            case A_RICH:
                ev->rich |= 1;
                if (skip_value(sc)) return -1;
                break;
            case A_META:
                ev->rich |= 2;
                if (skip_value(sc)) return -1;
                break;
            default:
                if (skip_value(sc)) return -1;
            }
            more = object_next(sc);
            if (more < 0) return -1;
        }
    }
    sc->depth--;
    ev->args_e = sc->i;
    return 0;
}

enum { E_OTHER, E_PH, E_NAME, E_CAT, E_PID, E_TID, E_ID, E_TS, E_DUR, E_ARGS };

static int event_key(const char *p, size_t len) {
    switch (len) {
    case 2:
        if (p[0] == 'p' && p[1] == 'h') return E_PH;
        if (p[0] == 't' && p[1] == 's') return E_TS;
        if (p[0] == 'i' && p[1] == 'd') return E_ID;
        break;
    case 3:
        if (key_is(p, len, "cat")) return E_CAT;
        if (key_is(p, len, "pid")) return E_PID;
        if (key_is(p, len, "tid")) return E_TID;
        if (key_is(p, len, "dur")) return E_DUR;
        break;
    case 4:
        if (key_is(p, len, "name")) return E_NAME;
        if (key_is(p, len, "args")) return E_ARGS;
        break;
    default:
        break;
    }
    return E_OTHER;
}

/* Append the event's values to the columns (and its raw args / shapes to the sparse tables). */
static int commit(Scan *sc, const Ev *ev) {
    Cols *c = &sc->cols;
    /* first size: one event per 128 input bytes (real events are 100-400 bytes): growing from
     * small sizes would copy every column several times; pages never written cost no memory */
    if (c->n == c->cap && cols_grow(c, sc->n / 128)) return fail_oom(sc);
    size_t r = c->n;
    uint8_t args_st = ev->args_bad ? 2 : ev->args_st;
    c->ok[r] = ev->ok;
    c->args_st[r] = args_st;
    c->rich[r] = ev->rich;
    for (int j = 0; j < 3; j++) c->code[j][r] = ev->code[j];
    for (int j = 0; j < 2; j++) { /* V_PID, V_TID */
        int64_t code = -1;
        if (ev->st[j] != ST_ODD) {
            code = keys_code(&sc->keys[j], ev->st[j], ev->st[j] == ST_MISSING ? 0 : ev->val[j]);
            if (code == -1) return fail_oom(sc);
            if (code < 0) return fail(sc, sc->i, "too many distinct pids or tids");
        }
        c->key[j][r] = (int32_t)code;
    }
    for (int f = 0; f < V_COUNT; f++) {
        c->val[f][r] = ev->val[f];
        c->st[f][r] = ev->st[f];
        if (ev->st[f] == ST_ODD) {
            if (buf_i64(&sc->odd, (int64_t)r) || buf_i64(&sc->odd, f) || buf_i64(&sc->odd, (int64_t)ev->odd_s[f]) ||
                buf_i64(&sc->odd, (int64_t)ev->odd_e[f]))
                return fail_oom(sc);
        }
    }
    if (ev->ok && args_st == 1) {
        if (ev->rich) {
            if (buf_i64(&sc->args_rows, (int64_t)r) ||
                buf_append(&sc->args_data, sc->s + ev->args_s, ev->args_e - ev->args_s) ||
                buf_append(&sc->args_data, ",", 1))
                return fail_oom(sc);
        }
        if (ev->has_dims || ev->has_type) {
            if (buf_i64(&sc->sh_rows, (int64_t)r)) return fail_oom(sc);
            if (ev->has_dims && buf_append(&sc->dims_data, sc->s + ev->dims_s, ev->dims_e - ev->dims_s))
                return fail_oom(sc);
            if (ev->has_type && buf_append(&sc->type_data, sc->s + ev->type_s, ev->type_e - ev->type_s))
                return fail_oom(sc);
            if (buf_i64(&sc->dims_offs, (int64_t)sc->dims_data.len) || buf_u8(&sc->dims_valid, ev->has_dims) ||
                buf_i64(&sc->type_offs, (int64_t)sc->type_data.len) || buf_u8(&sc->type_valid, ev->has_type))
                return fail_oom(sc);
        }
    }
    c->n++;
    return 0;
}

static int parse_event(Scan *sc) {
    const unsigned char *s = sc->s;
    Ev ev;
    memset(&ev, 0, sizeof ev);
    ev.code[0] = ev.code[1] = ev.code[2] = -1;
    if (sc->i >= sc->n) return fail_eof(sc);
    if (s[sc->i] != '{') {
        if (skip_value(sc)) return -1;
        return commit(sc, &ev); /* ok = 0: not an object */
    }
    if (sc->depth >= KS_MAX_DEPTH) return fail(sc, sc->i, "nested too deeply");
    sc->depth++;
    sc->i++;
    ev.ok = 1;
    ws(sc);
    if (sc->i >= sc->n) return fail_eof(sc);
    if (s[sc->i] == '}') {
        sc->i++;
    } else {
        int more = 1;
        while (more) {
            const char *p;
            size_t len;
            if (object_key(sc, &p, &len)) return -1;
            int rc;
            switch (event_key(p, len)) {
            case E_PH: rc = field_string(sc, D_PH, &ev.code[0]); break;
            case E_NAME: rc = field_string(sc, D_NAME, &ev.code[1]); break;
            case E_CAT: rc = field_string(sc, D_CAT, &ev.code[2]); break;
            case E_PID: rc = field_value(sc, &ev, V_PID, D_PID, 0); break;
            case E_TID: rc = field_value(sc, &ev, V_TID, D_TID, 0); break;
            case E_ID: rc = field_value(sc, &ev, V_ID, D_ID, 0); break;
            case E_TS: rc = field_value(sc, &ev, V_TS, -1, 1); break;
            case E_DUR: rc = field_value(sc, &ev, V_DUR, -1, 1); break;
            case E_ARGS: rc = parse_args(sc, &ev); break;
            default: rc = skip_value(sc);
            }
            if (rc) return -1;
            more = object_next(sc);
            if (more < 0) return -1;
        }
    }
    sc->depth--;
    return commit(sc, &ev);
}

static int parse_events(Scan *sc) {
    const unsigned char *s = sc->s;
    if (sc->depth >= KS_MAX_DEPTH) return fail(sc, sc->i, "nested too deeply");
    sc->depth++;
    sc->i++;
    ws(sc);
    if (sc->i >= sc->n) return fail_eof(sc);
    if (s[sc->i] == ']') {
        sc->i++;
        sc->depth--;
        return 0;
    }
    for (;;) {
        ws(sc);
        if (parse_event(sc)) return -1;
        ws(sc);
        if (sc->i >= sc->n) return fail_eof(sc);
        if (s[sc->i] == ',') {
            sc->i++;
            continue;
        }
        if (s[sc->i] == ']') {
            sc->i++;
            break;
        }
        return fail(sc, sc->i, "expected ',' or ']'");
    }
    sc->depth--;
    return 0;
}

/* A second "traceEvents" key replaces the first (the last occurrence wins, as in msgspec). */
static int reset_events(Scan *sc) {
    sc->cols.n = 0;
    keys_clear(&sc->keys[0]);
    keys_clear(&sc->keys[1]);
    sc->odd.len = 0;
    sc->args_rows.len = sc->args_data.len = 0;
    if (buf_append(&sc->args_data, "[", 1)) return fail_oom(sc);
    sc->sh_rows.len = sc->dims_data.len = sc->dims_valid.len = 0;
    sc->type_data.len = sc->type_valid.len = 0;
    if (offs_reset(&sc->dims_offs) || offs_reset(&sc->type_offs)) return fail_oom(sc);
    return 0;
}

static int parse_top_object(Scan *sc) {
    const unsigned char *s = sc->s;
    sc->depth = 1;
    sc->i++;
    ws(sc);
    if (sc->i >= sc->n) return fail_eof(sc);
    if (s[sc->i] == '}') {
        sc->i++;
        sc->depth = 0;
        return 0;
    }
    int more = 1;
    while (more) {
        const char *p;
        size_t len;
        if (object_key(sc, &p, &len)) return -1;
        int header = -1;
        for (int h = 0; h < H_COUNT; h++)
            if (key_is(p, len, HEADER_NAMES[h])) header = h;
        if (key_is(p, len, "traceEvents")) {
            if (reset_events(sc)) return -1;
            sc->has_events = s[sc->i] == '[';
            if (sc->has_events ? parse_events(sc) : skip_value(sc)) return -1;
        } else if (header >= 0) {
            size_t a, b;
            if (value_span(sc, &a, &b)) return -1;
            sc->hs[header] = (int64_t)a;
            sc->he[header] = (int64_t)b;
        } else if (skip_value(sc)) {
            return -1;
        }
        more = object_next(sc);
        if (more < 0) return -1;
    }
    sc->depth = 0;
    return 0;
}

static int scan_document(Scan *sc) {
    if (reset_events(sc)) return -1;
    ws(sc);
    if (sc->i >= sc->n) return fail_eof(sc);
    unsigned char c = sc->s[sc->i];
    if (c == '[') {
        sc->form = 0;
        sc->has_events = 1;
        if (parse_events(sc)) return -1;
    } else if (c == '{') {
        sc->form = 1;
        if (parse_top_object(sc)) return -1;
    } else {
        sc->form = 2;
        if (skip_value(sc)) return -1;
    }
    ws(sc);
    if (sc->i != sc->n) return fail(sc, sc->i, "trailing characters");
    return 0;
}

/* --------------------------------------------------------------------------------- Python glue */

static void scan_free(Scan *sc) {
    free(sc->scratch.p);
    cols_free(&sc->cols);
    for (int d = 0; d < D_COUNT; d++) dict_free(&sc->dict[d]);
    for (int j = 0; j < 2; j++) keys_free(&sc->keys[j]);
    Buf *bufs[] = {&sc->odd, &sc->args_rows, &sc->args_data, &sc->sh_rows, &sc->dims_offs,
                   &sc->dims_data, &sc->dims_valid, &sc->type_offs, &sc->type_data, &sc->type_valid};
    for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++) {
        free(bufs[j]->p);
        bufs[j]->p = NULL;
    }
}

/* A column's memory, handed to Python as it is: read-only through the buffer protocol (numpy,
 * pyarrow and msgspec read it in place), freed with the last view of it. A copy into a bytes
 * object was a second pass over every column and a fresh page fault per 4 KiB of it: ≈ 0.45×
 * the input, ≈ 0.7 s of the scanning threads' CPU on a 2 GB rank. */
typedef struct {
    PyObject_HEAD
    void *p;
    Py_ssize_t n;
} Block;

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Block *b = (Block *)self;
    return PyBuffer_FillInfo(view, self, b->p, b->n, 1, flags);
}

static void block_dealloc(PyObject *self) {
    free(((Block *)self)->p);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs block_buffer = {block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_kscan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &block_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A scanned column's memory (read it through a memoryview).",
};

/* A read-only memoryview of the first nbytes of p, which it owns from then on (trimmed to them;
 * an empty column is an empty bytes object). */
static PyObject *column_view(void *p, size_t nbytes) {
    if (!p || nbytes == 0) {
        free(p);
        return PyBytes_FromStringAndSize("", 0);
    }
    void *fit = realloc(p, nbytes);
    Block *b = PyObject_New(Block, &BlockType);
    if (!b) {
        free(fit ? fit : p);
        return NULL;
    }
    b->p = fit ? fit : p;
    b->n = (Py_ssize_t)nbytes;
    PyObject *view = PyMemoryView_FromObject((PyObject *)b);
    Py_DECREF(b);
    return view;
}

/* Move a column into a view of its own memory (the field is left NULL so that scan_free skips it). */
#define TAKE(field, nbytes) (moved = (void *)(field), (field) = NULL, column_view(moved, (nbytes)))

static PyObject *take_buf(Buf *b) {
    PyObject *r = column_view(b->p, b->len);
    b->p = NULL;
    b->len = b->cap = 0;
    return r;
}

static PyObject *take_dict(Dict *d) {
    PyObject *data = take_buf(&d->data);
    PyObject *offs = take_buf(&d->offs);
    if (!data || !offs) {
        Py_XDECREF(data);
        Py_XDECREF(offs);
        return NULL;
    }
    return Py_BuildValue("(NN)", data, offs);
}

/* Steals `value`; returns -1 (with the exception set) when value is NULL or the insert fails. */
static int put(PyObject *dict, const char *key, PyObject *value) {
    if (!value) return -1;
    int rc = PyDict_SetItemString(dict, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *build_result(Scan *sc) {
    Cols *c = &sc->cols;
    void *moved;
    size_t n = c->n;
    PyObject *res = PyDict_New();
    if (!res) return NULL;
    static const char *const VNAMES[V_COUNT] = {"pid", "tid", "id", "ts", "dur", "corr", "ext"};
    static const char *const CNAMES[3] = {"ph", "name", "cat"};
    static const int VDICT[V_COUNT] = {D_PID, D_TID, D_ID, -1, -1, -1, -1};
    PyObject *header = PyDict_New();
    if (!header) goto error;
    for (int h = 0; h < H_COUNT; h++) {
        PyObject *span = sc->hs[h] >= 0 ? Py_BuildValue("(LL)", (long long)sc->hs[h], (long long)sc->he[h])
                                        : Py_NewRef(Py_None);
        if (!span || PyDict_SetItemString(header, HEADER_NAMES[h], span) < 0) {
            Py_XDECREF(span);
            Py_DECREF(header);
            goto error;
        }
        Py_DECREF(span);
    }
    if (put(res, "header", header) || put(res, "form", PyLong_FromLong(sc->form)) ||
        put(res, "has_events", PyBool_FromLong(sc->has_events)) ||
        put(res, "n", PyLong_FromSize_t(n)) || put(res, "huge_ints", PyLong_FromSize_t(sc->huge_ints)) ||
        put(res, "event_ok", TAKE(c->ok, n)) || put(res, "args_status", TAKE(c->args_st, n)) ||
        put(res, "rich", TAKE(c->rich, n)))
        goto error;
    for (int j = 0; j < 3; j++) {
        PyObject *codes = TAKE(c->code[j], n * sizeof(int32_t));
        PyObject *dict = take_dict(&sc->dict[j]);
        if (!codes || !dict) {
            Py_XDECREF(codes);
            Py_XDECREF(dict);
            goto error;
        }
        if (put(res, CNAMES[j], Py_BuildValue("(NN)", codes, dict))) goto error;
    }
    for (int f = 0; f < V_COUNT; f++) {
        PyObject *vals = TAKE(c->val[f], n * sizeof(int64_t));
        PyObject *st = TAKE(c->st[f], n);
        PyObject *dict = VDICT[f] >= 0 ? take_dict(&sc->dict[VDICT[f]]) : Py_NewRef(Py_None);
        if (!vals || !st || !dict) {
            Py_XDECREF(vals);
            Py_XDECREF(st);
            Py_XDECREF(dict);
            goto error;
        }
        if (f == V_PID || f == V_TID) {
            Keys *k = &sc->keys[f];
            PyObject *codes = TAKE(c->key[f], n * sizeof(int32_t));
            PyObject *kinds = TAKE(k->kind, k->count);
            PyObject *kvals = TAKE(k->value, k->count * sizeof(int64_t));
            if (!codes || !kinds || !kvals) {
                Py_XDECREF(codes);
                Py_XDECREF(kinds);
                Py_XDECREF(kvals);
                Py_DECREF(vals);
                Py_DECREF(st);
                Py_DECREF(dict);
                goto error;
            }
            if (put(res, VNAMES[f], Py_BuildValue("(NNNNNN)", vals, st, dict, codes, kinds, kvals))) goto error;
        } else if (put(res, VNAMES[f], Py_BuildValue("(NNN)", vals, st, dict))) {
            goto error;
        }
    }
    if (put(res, "odd", take_buf(&sc->odd))) goto error;
    /* close the args array: "[" + "a," per event → "[a,b]" (or "[]") */
    if (sc->args_data.len > 1) {
        sc->args_data.p[sc->args_data.len - 1] = ']';
    } else if (buf_append(&sc->args_data, "]", 1)) {
        PyErr_NoMemory();
        goto error;
    }
    {
        PyObject *rows = take_buf(&sc->args_rows), *data = take_buf(&sc->args_data);
        if (!rows || !data) {
            Py_XDECREF(rows);
            Py_XDECREF(data);
            goto error;
        }
        if (put(res, "args_raw", Py_BuildValue("(NN)", rows, data))) goto error;
    }
    {
        PyObject *t[7] = {take_buf(&sc->sh_rows), take_buf(&sc->dims_offs), take_buf(&sc->dims_data),
                          take_buf(&sc->dims_valid), take_buf(&sc->type_offs), take_buf(&sc->type_data),
                          take_buf(&sc->type_valid)};
        int bad = 0;
        for (int j = 0; j < 7; j++) bad |= t[j] == NULL;
        if (bad) {
            for (int j = 0; j < 7; j++) Py_XDECREF(t[j]);
            goto error;
        }
        if (put(res, "shapes", Py_BuildValue("(NNNNNNN)", t[0], t[1], t[2], t[3], t[4], t[5], t[6]))) goto error;
    }
    return res;
error:
    Py_DECREF(res);
    return NULL;
}

PyDoc_STRVAR(scan_doc,
             "scan(buf) -> dict\n\n"
             "Scan a Chrome-trace JSON document (bytes-like) into columnar buffers (read-only\n"
             "memoryviews of the scanner's own memory, or b'' when empty): per-event codes,\n"
             "values and statuses, string dictionaries, raw spans of odd values, raw args text of the\n"
             "events whose args need Python, Input Dims/Input type text, and the spans of the header\n"
             "values.  Raises ValueError('invalid JSON at byte N: ...') on anything that is not strict\n"
             "JSON (the reason says 'truncated' when the input ends early).");

static PyObject *ks_scan(PyObject *module, PyObject *arg) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Scan *sc = calloc(1, sizeof(Scan));
    if (!sc) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    int init_failed = 0;
    for (int d = 0; d < D_COUNT; d++) init_failed |= dict_init(&sc->dict[d]) != 0;
    for (int j = 0; j < 2; j++) init_failed |= keys_init(&sc->keys[j]) != 0;
    for (int h = 0; h < H_COUNT; h++) sc->hs[h] = sc->he[h] = -1;
    sc->s = (const unsigned char *)view.buf;
    sc->n = (size_t)view.len;
    sc->seed = (uint64_t)(uintptr_t)sc ^ ((uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)clock();
    int rc = -1;
    if (!init_failed) {
        Py_BEGIN_ALLOW_THREADS
        rc = scan_document(sc);
        Py_END_ALLOW_THREADS
    } else {
        sc->oom = 1;
    }
    PyObject *result = NULL;
    if (rc == 0) {
        result = build_result(sc);
    } else if (sc->oom) {
        PyErr_NoMemory();
    } else {
        PyErr_Format(PyExc_ValueError, "invalid JSON at byte %zu: %s", sc->err_at, sc->err ? sc->err : "?");
    }
    scan_free(sc);
    free(sc);
    PyBuffer_Release(&view);
    return result;
}


/* ------------------------------------------------------------------------- the piece cutter */

PyDoc_STRVAR(walk_doc,
             "walk(buf, in_string, escape, depth, level, min_gap, since) -> tuple\n\n"
             "Walk JSON text structurally (strings, escapes, bracket depth; nothing is decoded), the\n"
             "state carried from the previous buffer.  Returns (cuts, in_string, escape, depth, since,\n"
             "end): cuts are the offsets just after a ',' at bracket depth ``level`` (between two\n"
             "elements of the events array) once ``min_gap`` bytes have passed since the last cut\n"
             "(``since`` counts them, carried over); ``end`` is the offset of the bracket that closed\n"
             "the array (depth fell below ``level``; the walk stops there), or -1.");

/* the bytes the walk stops at outside strings */
static const unsigned char WALK_SPECIAL[256] = {['"'] = 1, ['{'] = 1, ['}'] = 1, ['['] = 1, [']'] = 1, [','] = 1};

/* The first quote or backslash in s[i:n] (n when there is none): 16 bytes at a compare. A string's
   two memchr calls (its quote, then a backslash before it) cost more than the string on Kineto's
   short names and keys: the walk ran at 1.0 GB/s. */
static size_t quote_or_backslash(const unsigned char *s, size_t i, size_t n) {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)));
        if (m) return i + (size_t)__builtin_ctz(m);
    }
#endif
    while (i < n && s[i] != '"' && s[i] != '\\') i++;
    return i;
}

static PyObject *ks_walk(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer view;
    int in_string, escape;
    long long depth, level, min_gap, since;
    if (!PyArg_ParseTuple(args, "y*iiLLLL", &view, &in_string, &escape, &depth, &level, &min_gap, &since))
        return NULL;
    const unsigned char *s = (const unsigned char *)view.buf;
    size_t n = (size_t)view.len, i = 0, ncuts = 0, cap = 16;
    long long end = -1;
    size_t *cuts = malloc(cap * sizeof(size_t));
    if (!cuts) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    int oom = 0;
    Py_BEGIN_ALLOW_THREADS
    while (i < n) {
        if (in_string) { /* to the next quote or backslash */
            if (escape) {
                escape = 0;
                i++;
                continue;
            }
            i = quote_or_backslash(s, i, n);
            if (i == n) break;
            if (s[i] == '\\') escape = 1;
            else in_string = 0;
            i++;
            continue;
        }
        unsigned char c = s[i];
        if (!WALK_SPECIAL[c]) {
            i++;
            continue;
        }
        if (c == '"') {
            in_string = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
            if (depth < level) {
                end = (long long)i;
                break;
            }
        } else if (c == ',' && depth == level && (long long)(since + (long long)i + 1) >= min_gap) {
            if (ncuts == cap) {
                size_t *more = realloc(cuts, 2 * cap * sizeof(size_t));
                if (!more) {
                    oom = 1;
                    break;
                }
                cuts = more;
                cap *= 2;
            }
            cuts[ncuts++] = i + 1;
            since = -(long long)(i + 1);
        }
        i++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (oom) {
        free(cuts);
        return PyErr_NoMemory();
    }
    PyObject *list = PyList_New((Py_ssize_t)ncuts);
    if (!list) {
        free(cuts);
        return NULL;
    }
    for (size_t k = 0; k < ncuts; k++) {
        PyObject *v = PyLong_FromSize_t(cuts[k]);
        if (!v) {
            free(cuts);
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, v);
    }
    free(cuts);
    /* bytes since the last cut at the end of this buffer (all of it when there was none) */
    long long walked = end >= 0 ? end : (long long)n;
    return Py_BuildValue("(NiiLLL)", list, in_string, escape, depth, since + walked, end);
}

static PyMethodDef ks_methods[] = {
    {"scan", ks_scan, METH_O, scan_doc},
    {"walk", ks_walk, METH_VARARGS, walk_doc},
    {NULL, NULL, 0, NULL},
};

static int ks_exec(PyObject *module) {
    (void)module;
    return PyType_Ready(&BlockType);
}

static PyModuleDef_Slot ks_slots[] = {
    {Py_mod_exec, ks_exec},
    {0, NULL},
};

static struct PyModuleDef ks_module = {
    PyModuleDef_HEAD_INIT,
    "_kscan",
    "One-pass Chrome-trace JSON scanner into columnar buffers (asaptrace's Kineto fast path).",
    0,
    ks_methods,
    ks_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__kscan(void) { return PyModuleDef_Init(&ks_module); }
