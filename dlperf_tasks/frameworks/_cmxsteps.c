/* _cmxsteps: per-step reductions of the MXNet BERT sample columns in C (mxnet_bert's trial metric
 * and lines_per_step; the same values as the Python code, which stays the reference).
 *
 * medians(iterations, values, lo, hi, k) -> dict | None
 *     {step: statistics.median([k / v for v in the step's values]) for lo < step <= hi}, steps in
 *     order of appearance. Only for an iteration list of ints in non-decreasing order, values that
 *     are floats > 0 and finite, k a float > 0 and C doubles without extended precision: then k / v
 *     falls as v grows, so the one or two middle speeds are k over the middle latencies (sorted), and
 *     (a + b) / 2 is what statistics.median computes. Anything else: None (the Python path).
 *
 * counts(iterations) -> dict | None
 *     dict(collections.Counter(iterations)) for a list of ints (keys in order of first appearance);
 *     None for anything else.
 *
 * Only CPython's C API is used; the lists are only read.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

/* the list's ints as C long longs; 1: done, 0: not such a list (an item not an int, or too large),
 * -1: error set. Runs of the same int object are converted once. */
static int
as_steps(PyObject *its, long long *out)
{
    Py_ssize_t n = PyList_GET_SIZE(its);
    PyObject *prev = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(its, i);
        if (x == prev) {
            out[i] = out[i - 1];
            continue;
        }
        if (!PyLong_CheckExact(x))
            return 0;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (overflow)
            return 0;
        out[i] = v;
        prev = x;
    }
    return 1;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static PyObject *
medians(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *its, *vals;
    long long lo, hi;
    double k;
    if (!PyArg_ParseTuple(args, "O!O!LLd:medians", &PyList_Type, &its, &PyList_Type, &vals, &lo, &hi, &k))
        return NULL;
#if FLT_EVAL_METHOD != 0
    Py_RETURN_NONE;
#else
    Py_ssize_t n = PyList_GET_SIZE(its);
    if (n == 0 || PyList_GET_SIZE(vals) != n || !(k > 0.0) || !isfinite(k))
        Py_RETURN_NONE;
    long long *steps = PyMem_Malloc((size_t)n * sizeof(long long));
    double *buf = PyMem_Malloc((size_t)n * sizeof(double));
    PyObject *out = NULL;
    if (steps == NULL || buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int r = as_steps(its, steps);
    if (r < 0)
        goto done;
    for (Py_ssize_t i = 1; r && i < n; i++)
        r = steps[i - 1] <= steps[i];
    if (!r) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t a = 0, b = 0; /* bisect_right(its, lo), bisect_right(its, hi) */
    while (a < n && steps[a] <= lo)
        a++;
    b = a;
    while (b < n && steps[b] <= hi)
        b++;
    for (Py_ssize_t i = a; i < b; i++) {
        PyObject *v = PyList_GET_ITEM(vals, i);
        if (!PyFloat_CheckExact(v)) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        double d = PyFloat_AS_DOUBLE(v);
        if (!(d > 0.0) || !isfinite(d)) {
            out = Py_NewRef(Py_None);
            goto done;
        }
    }
    out = PyDict_New();
    if (out == NULL)
        goto done;
    while (a < b) {
        Py_ssize_t end = a + 1;
        while (end < b && steps[end] == steps[a])
            end++;
        Py_ssize_t m = end - a;
        for (Py_ssize_t i = 0; i < m; i++)
            buf[i] = PyFloat_AS_DOUBLE(PyList_GET_ITEM(vals, a + i));
        qsort(buf, (size_t)m, sizeof(double), cmp_double);
        double med = (m % 2) ? k / buf[m / 2] : (k / buf[m / 2 - 1] + k / buf[m / 2]) / 2.0;
        PyObject *f = PyFloat_FromDouble(med);
        if (f == NULL || PyDict_SetItem(out, PyList_GET_ITEM(its, a), f) < 0) {
            Py_XDECREF(f);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(f);
        a = end;
    }
done:
    PyMem_Free(steps);
    PyMem_Free(buf);
    return out;
#endif
}

/* d[key] += count (d[key] = count when absent); -1: error set */
static int
add_count(PyObject *d, PyObject *key, Py_ssize_t count)
{
    PyObject *old = PyDict_GetItemWithError(d, key); /* borrowed */
    if (old == NULL && PyErr_Occurred())
        return -1;
    Py_ssize_t have = 0;
    if (old != NULL && (have = PyLong_AsSsize_t(old)) == -1 && PyErr_Occurred())
        return -1;
    PyObject *v = PyLong_FromSsize_t(have + count);
    if (v == NULL)
        return -1;
    int r = PyDict_SetItem(d, key, v);
    Py_DECREF(v);
    return r;
}

static PyObject *
counts(PyObject *Py_UNUSED(module), PyObject *its)
{
    if (!PyList_CheckExact(its)) {
        PyErr_SetString(PyExc_TypeError, "counts() takes a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(its);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyLong_CheckExact(PyList_GET_ITEM(its, i)))
            Py_RETURN_NONE;
    }
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    /* a run of equal ints (one line per rank) is one dict update; the run's first int is the key,
     * as Counter keeps the first one it saw */
    Py_ssize_t i = 0;
    while (i < n) {
        PyObject *key = PyList_GET_ITEM(its, i);
        Py_ssize_t end = i + 1;
        while (end < n) {
            PyObject *x = PyList_GET_ITEM(its, end);
            if (x != key) {
                int eq = PyObject_RichCompareBool(x, key, Py_EQ);
                if (eq < 0) {
                    Py_DECREF(d);
                    return NULL;
                }
                if (!eq)
                    break;
            }
            end++;
        }
        if (add_count(d, key, end - i) < 0) {
            Py_DECREF(d);
            return NULL;
        }
        i = end;
    }
    return d;
}

static PyMethodDef methods[] = {
    {"medians", medians, METH_VARARGS,
     "medians(iterations, values, lo, hi, k) -> {step: median of k / value} for lo < step <= hi, or None "
     "(the Python path)."},
    {"counts", counts, METH_O, "counts(iterations) -> dict(Counter(iterations)) for a list of ints, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cmxsteps",
    "Per-step reductions of the MXNet BERT sample columns (accelerators of mxnet_bert; same values).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__cmxsteps(void)
{
    return PyModule_Create(&module);
}
