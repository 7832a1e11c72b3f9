/* _cmxbert: the MXNet BERT (gluon-nlp run_pretraining.py) step-line scanner in C.
 *
 * scan(block) does what mxnet_bert._BULK.split(block) and the column conversions of
 * MxnetBertStream._bulk do, in one pass over an ASCII str:
 *
 *     \[step ([0-9]++)\]\s*+mlm_loss=\s*+(PLAIN)\s++nsp_loss=\s*+(PLAIN)\s++
 *     throughput=[^\n]*latency=\s*+(\S+)\s*ms/batch          PLAIN = -?[0-9]++(?:\.[0-9]++)?+
 *
 * with exactly the regex's semantics (``\s`` of a Python str pattern: \t\n\v\f\r, space and
 * \x1c-\x1f; the greedy ``[^\n]*`` tries the line's last ``latency=`` first; ``\S+`` may give
 * characters back, so ``250.1ms/batch`` matches). It returns
 *
 *     (rest, clean, steps, latencies, mlm_text, nsp_text, runs)
 *
 * rest: the text with every match removed ("".join(parts[0::5])), clean: rest.replace("INFO:root:",
 * ""), steps: list of int, latencies: list of float (the value float() gives), mlm_text/nsp_text:
 * the loss texts joined by "\n" ("\n".join(parts[2::5])), runs: steps without consecutive repeats
 * (the same set and maximum as steps; a step's lines come one per rank in a row). Or None ("fall back": the caller runs the Python path) when
 * the block is not ASCII, a step has more than 18 digits, or a latency is not a plain unsigned
 * decimal (digits with at most one '.', at most 40 characters) whose value is > 0, or the sum
 * of the latencies is not finite, or a line is odd: a "[step " on a line longer than MAX_STEP_LINE,
 * or followed on its line by another "[step " or by two "latency=" (mxnet_bert.odd_step_lines: the
 * Python path refuses such a line; trying each of them, as the regex does, is quadratic in the line).
 * Only CPython's C API is used.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <string.h>
#include <math.h>

#include "_cnum.h"

#define MAX_STEP_DIGITS 18
#define MAX_STEP_LINE 2048 /* _stream.MAX_STEP_LINE */
#define MAX_LAT_CHARS 40

/* \s of a str pattern, for ASCII characters */
static int
is_space(unsigned char c)
{
    return (c >= 9 && c <= 13) || (c >= 28 && c <= 32);
}

static int
is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* s[i:i+len(lit)] == lit, within n */
static int
has_at(const char *s, Py_ssize_t n, Py_ssize_t i, const char *lit, Py_ssize_t len)
{
    return i >= 0 && i <= n - len && memcmp(s + i, lit, (size_t)len) == 0;
}

static Py_ssize_t
skip_space(const char *s, Py_ssize_t n, Py_ssize_t i)
{
    while (i < n && is_space((unsigned char)s[i]))
        i++;
    return i;
}

/* PLAIN at i: -?[0-9]++(?:\.[0-9]++)?+ ; returns its end or -1 */
static Py_ssize_t
plain_at(const char *s, Py_ssize_t n, Py_ssize_t i)
{
    if (i < n && s[i] == '-')
        i++;
    Py_ssize_t d = i;
    while (i < n && is_digit((unsigned char)s[i]))
        i++;
    if (i == d)
        return -1;
    if (i + 1 < n && s[i] == '.' && is_digit((unsigned char)s[i + 1])) {
        i += 2;
        while (i < n && is_digit((unsigned char)s[i]))
            i++;
    }
    return i;
}

typedef struct {
    Py_ssize_t step0, step1, mlm0, mlm1, nsp0, nsp1, lat0, lat1, end;
} Match;

/* Where `lit` (len k) first occurs in s[from:to], or -1 (memchr for its first character, then memcmp). */
static Py_ssize_t
find_in(const char *s, Py_ssize_t from, Py_ssize_t to, const char *lit, Py_ssize_t k)
{
    while (from <= to - k) {
        const char *hit = memchr(s + from, lit[0], (size_t)(to - k + 1 - from));
        if (hit == NULL)
            return -1;
        if (memcmp(hit, lit, (size_t)k) == 0)
            return hit - s;
        from = hit - s + 1;
    }
    return -1;
}

/* 1 when a line of the block is odd (see the top of this file): the Python path then decides. Each
 * line's first "[step " is looked at once: linear in the block. */
static int
has_odd_line(const char *s, Py_ssize_t n)
{
    Py_ssize_t p = find_in(s, 0, n, "[step ", 6);
    while (p >= 0) {
        Py_ssize_t start = p;
        while (start > 0 && s[start - 1] != '\n')
            start--;
        const char *nl = memchr(s + p, '\n', (size_t)(n - p));
        Py_ssize_t eol = nl ? nl - s : n;
        if (eol - start > MAX_STEP_LINE || find_in(s, p + 6, eol, "[step ", 6) >= 0)
            return 1;
        Py_ssize_t lat = find_in(s, p, eol, "latency=", 8);
        if (lat >= 0 && find_in(s, lat + 8, eol, "latency=", 8) >= 0)
            return 1;
        p = find_in(s, eol, n, "[step ", 6);
    }
    return 0;
}

/* The latency part from the latency= at q: \s*+(\S+)\s*ms/batch. 1 and m->lat0/lat1/end set, or 0. */
static int
latency_at(const char *s, Py_ssize_t n, Py_ssize_t q, Match *m)
{
    Py_ssize_t j = skip_space(s, n, q + 8);
    Py_ssize_t run = j;
    while (run < n && !is_space((unsigned char)s[run]))
        run++;
    if (run == j)
        return 0;
    /* \S+ takes the whole run first: then \s* and "ms/batch" */
    Py_ssize_t e = skip_space(s, n, run);
    if (has_at(s, n, e, "ms/batch", 8)) {
        m->lat0 = j;
        m->lat1 = run;
        m->end = e + 8;
        return 1;
    }
    /* gives characters back: \s* then matches nothing (a \S follows), "ms/batch" must follow */
    for (Py_ssize_t k = run - 1; k > j; k--) {
        if (has_at(s, n, k, "ms/batch", 8)) {
            m->lat0 = j;
            m->lat1 = k;
            m->end = k + 8;
            return 1;
        }
    }
    return 0;
}

/* The whole pattern at p (s[p:p+6] == "[step "). 1: match in *m; 0: none at p. */
static int
match_at(const char *s, Py_ssize_t n, Py_ssize_t p, Match *m)
{
    Py_ssize_t i = p + 6;
    m->step0 = i;
    while (i < n && is_digit((unsigned char)s[i]))
        i++;
    if (i == m->step0 || i >= n || s[i] != ']')
        return 0;
    m->step1 = i;
    i = skip_space(s, n, i + 1);
    if (!has_at(s, n, i, "mlm_loss=", 9))
        return 0;
    i = skip_space(s, n, i + 9);
    m->mlm0 = i;
    if ((i = plain_at(s, n, i)) < 0)
        return 0;
    m->mlm1 = i;
    if (i >= n || !is_space((unsigned char)s[i]))
        return 0;
    i = skip_space(s, n, i);
    if (!has_at(s, n, i, "nsp_loss=", 9))
        return 0;
    i = skip_space(s, n, i + 9);
    m->nsp0 = i;
    if ((i = plain_at(s, n, i)) < 0)
        return 0;
    m->nsp1 = i;
    if (i >= n || !is_space((unsigned char)s[i]))
        return 0;
    i = skip_space(s, n, i);
    if (!has_at(s, n, i, "throughput=", 11))
        return 0;
    i += 11;
    /* [^\n]* is greedy: the line's last "latency=" is tried first, then each one before it */
    const char *nl = memchr(s + i, '\n', (size_t)(n - i));
    Py_ssize_t eol = nl ? nl - s : n;
    for (Py_ssize_t q = eol - 8; q >= i; q--) {
        if (s[q] == 'l' && has_at(s, n, q, "latency=", 8) && latency_at(s, n, q, m))
            return 1;
    }
    return 0;
}

/* A plain unsigned decimal that float() reads as is: [0-9]*(\.[0-9]*)? with a digit, and its value.
 * 1: *out set; 0: not such a token, or its value is not > 0 (fall back); -1: error set.
 * Up to 15 digits: the exact fast path of _cnum.h (the double float() gives); otherwise CPython's own
 * PyOS_string_to_double. */
static int
latency_value(const char *s, Py_ssize_t len, double *out)
{
    int dots = 0, digits = 0;
    if (len > MAX_LAT_CHARS)
        return 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        if (s[i] == '.')
            dots++;
        else if (is_digit((unsigned char)s[i]))
            digits++;
        else
            return 0;
    }
    if (dots > 1 || digits == 0)
        return 0;
    if (exact_decimal(s, len, out))
        return *out > 0.0;
    char tok[MAX_LAT_CHARS + 1];
    memcpy(tok, s, (size_t)len);
    tok[len] = '\0';
    char *end = NULL;
    double d = PyOS_string_to_double(tok, &end, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear(); /* not a number after all: the Python path says why */
        return 0;
    }
    *out = d;
    return end == tok + len && d > 0.0;
}

typedef struct {
    char *rest, *mlm, *nsp;
    Py_ssize_t rest_n, mlm_n, nsp_n;
    PyObject *steps, *lats, *runs;
} Out;

static void
out_free(Out *o)
{
    PyMem_Free(o->rest);
    PyMem_Free(o->mlm);
    PyMem_Free(o->nsp);
    Py_XDECREF(o->steps);
    Py_XDECREF(o->lats);
    Py_XDECREF(o->runs);
}

static void
put(char *buf, Py_ssize_t *len, const char *src, Py_ssize_t k)
{
    memcpy(buf + *len, src, (size_t)k);
    *len += k;
}

static PyObject *
ascii_str(const char *buf, Py_ssize_t len)
{
    PyObject *u = PyUnicode_New(len, 127);
    if (u != NULL)
        memcpy(PyUnicode_1BYTE_DATA(u), buf, (size_t)len);
    return u;
}

/* -1: error set; 0: fall back; 1: the match's columns appended */
static int
add_match(Out *o, const char *s, const Match *m, PyObject **prev_step, long long *prev_step_v,
          PyObject **prev_lat, Py_ssize_t *prev_lat0, Py_ssize_t *prev_lat1, double *sum)
{
    Py_ssize_t nd = m->step1 - m->step0;
    if (nd > MAX_STEP_DIGITS)
        return 0;
    long long v = 0;
    for (Py_ssize_t i = m->step0; i < m->step1; i++)
        v = v * 10 + (s[i] - '0');
    /* the same value as the step before: the same int object (steps come in runs, one line a rank) */
    if (*prev_step == NULL || v != *prev_step_v) {
        PyObject *x = PyLong_FromLongLong(v);
        if (x == NULL)
            return -1;
        *prev_step = x;
        *prev_step_v = v;
        if (PyList_Append(o->steps, x) < 0 || PyList_Append(o->runs, x) < 0) {
            Py_DECREF(x);
            return -1;
        }
        Py_DECREF(x); /* the list holds it; *prev_step borrows */
    }
    else if (PyList_Append(o->steps, *prev_step) < 0)
        return -1;

    Py_ssize_t ll = m->lat1 - m->lat0;
    if (*prev_lat != NULL && ll == *prev_lat1 - *prev_lat0 && memcmp(s + m->lat0, s + *prev_lat0, (size_t)ll) == 0) {
        if (PyList_Append(o->lats, *prev_lat) < 0)
            return -1;
        *sum += PyFloat_AS_DOUBLE(*prev_lat);
    }
    else {
        double d;
        int r = latency_value(s + m->lat0, ll, &d);
        if (r <= 0)
            return r;
        PyObject *x = PyFloat_FromDouble(d);
        if (x == NULL)
            return -1;
        if (PyList_Append(o->lats, x) < 0) {
            Py_DECREF(x);
            return -1;
        }
        Py_DECREF(x);
        *prev_lat = x;
        *prev_lat0 = m->lat0;
        *prev_lat1 = m->lat1;
        *sum += d;
    }
    if (o->mlm_n)
        o->mlm[o->mlm_n++] = '\n';
    put(o->mlm, &o->mlm_n, s + m->mlm0, m->mlm1 - m->mlm0);
    if (o->nsp_n)
        o->nsp[o->nsp_n++] = '\n';
    put(o->nsp, &o->nsp_n, s + m->nsp0, m->nsp1 - m->nsp0);
    return 1;
}

static PyObject *
scan(PyObject *Py_UNUSED(module), PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "scan() takes a str");
        return NULL;
    }
    if (PyUnicode_READY(arg) < 0)
        return NULL;
    if (!PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    const char *s = (const char *)PyUnicode_1BYTE_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    if (has_odd_line(s, n))
        Py_RETURN_NONE;

    Out o = {0};
    /* each output is at most the block's length (+1: PyMem_Malloc(0) is fine too) */
    o.rest = PyMem_Malloc((size_t)n + 1);
    o.mlm = PyMem_Malloc((size_t)n + 1);
    o.nsp = PyMem_Malloc((size_t)n + 1);
    o.steps = PyList_New(0);
    o.lats = PyList_New(0);
    o.runs = PyList_New(0);
    if (!o.rest || !o.mlm || !o.nsp || !o.steps || !o.lats || !o.runs) {
        out_free(&o);
        return PyErr_NoMemory();
    }

    PyObject *prev_step = NULL, *prev_lat = NULL; /* borrowed from the lists */
    long long prev_step_v = 0;
    Py_ssize_t prev_lat0 = 0, prev_lat1 = 0;
    double sum = 0.0;
    Py_ssize_t last = 0, pos = 0;
    Match m;
    while (pos <= n - 6) {
        const char *hit = memchr(s + pos, '[', (size_t)(n - pos));
        if (hit == NULL)
            break;
        Py_ssize_t p = hit - s;
        if (!has_at(s, n, p, "[step ", 6) || !match_at(s, n, p, &m)) {
            pos = p + 1;
            continue;
        }
        int r = add_match(&o, s, &m, &prev_step, &prev_step_v, &prev_lat, &prev_lat0, &prev_lat1, &sum);
        if (r <= 0) {
            out_free(&o);
            if (r < 0)
                return NULL;
            Py_RETURN_NONE;
        }
        put(o.rest, &o.rest_n, s + last, p - last);
        last = pos = m.end;
    }
    if (!(sum < HUGE_VAL)) {
        out_free(&o);
        Py_RETURN_NONE;
    }
    put(o.rest, &o.rest_n, s + last, n - last);

    /* the rest without python logging's "INFO:root:" prefixes (left to right, like str.replace: the
     * literal cannot overlap itself), compacted in place once the rest is copied out (k <= cut) */
    PyObject *rest = ascii_str(o.rest, o.rest_n);
    PyObject *clean = NULL;
    if (rest != NULL) {
        Py_ssize_t k = 0, cut = 0, i = 0;
        char *c = o.rest;
        while (i <= o.rest_n - 10) {
            const char *hit = memchr(o.rest + i, 'I', (size_t)(o.rest_n - 9 - i));
            if (hit == NULL)
                break;
            i = hit - o.rest;
            if (memcmp(hit, "INFO:root:", 10) == 0) {
                memmove(c + k, o.rest + cut, (size_t)(i - cut));
                k += i - cut;
                cut = i = i + 10;
            }
            else
                i++;
        }
        if (cut == 0) {
            clean = rest;
            Py_INCREF(clean);
        }
        else {
            memmove(c + k, o.rest + cut, (size_t)(o.rest_n - cut));
            clean = ascii_str(c, k + o.rest_n - cut);
        }
    }
    PyObject *mlm = clean ? ascii_str(o.mlm, o.mlm_n) : NULL;
    PyObject *nsp = mlm ? ascii_str(o.nsp, o.nsp_n) : NULL;
    PyObject *res = NULL;
    if (nsp != NULL)
        res = PyTuple_Pack(7, rest, clean, o.steps, o.lats, mlm, nsp, o.runs);
    Py_XDECREF(rest);
    Py_XDECREF(clean);
    Py_XDECREF(mlm);
    Py_XDECREF(nsp);
    out_free(&o);
    return res;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O,
     "scan(block: str) -> (rest, clean, steps, latencies, mlm_text, nsp_text, runs) | None: the MXNet BERT step "
     "lines of an ASCII block (None: fall back to the Python path)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cmxbert",
    "The MXNet BERT step-line scanner (an accelerator of mxnet_bert.MxnetBertStream; same results).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__cmxbert(void)
{
    return PyModule_Create(&module);
}
