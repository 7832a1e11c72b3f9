/* Generic per-block passes of dlperf_tasks.frameworks._stream.LogStream, in C.
 *
 * bars(data: bytes) -> bytes
 *     every UTF-8 tqdm block glyph (U+2580-U+259F, bytes E2 96 80-9F) replaced by "#": what
 *     _stream._BAR_GLYPHS.sub(b"#", data) gives.
 * newlines(text: str) -> str | None
 *     "\r\n" and a lone "\r" read as "\n": text.replace("\r\n", "\n").replace("\r", "\n").
 *     None for a non-ASCII text (the caller then does the replace itself).
 * count_nl(text: str) -> int | None
 *     text.count("\n"), eight characters at a time; None for a non-ASCII text.
 * lines_with(text: str, literal: str) -> list[tuple[int, str]] | None
 *     LogStream.lines_with(text, literal) as a list; None for a non-ASCII text or literal, a literal with
 *     a newline, or a text that does not end with a newline (the caller then runs the Python generator).
 * which(text: str, literals: tuple[str, ...]) -> int | None
 *     bit i set when literals[i] occurs in text: per literal, memchr for its least common character (the
 *     logs' tqdm text and numbers hold few of them), compared in full where found. None for a
 *     non-ASCII text. The literals: ASCII, 2 to 255 characters, at most 63.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_LITERALS 63

static PyObject *bars(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "bars() takes bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg), hits = 0;
    for (Py_ssize_t i = 0; i + 3 <= n;) {
        const unsigned char *f = memchr(p + i, 0xe2, (size_t)(n - i - 2));
        if (!f)
            break;
        i = f - p;
        if (p[i + 1] == 0x96 && p[i + 2] >= 0x80 && p[i + 2] <= 0x9f) {
            hits++;
            i += 3;
        } else {
            i++;
        }
    }
    if (hits == 0) {
        Py_INCREF(arg);
        return arg;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n - 2 * hits);
    if (!out)
        return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t from = 0, w = 0;
    for (Py_ssize_t i = 0; i + 3 <= n;) {
        const unsigned char *f = memchr(p + i, 0xe2, (size_t)(n - i - 2));
        if (!f)
            break;
        i = f - p;
        if (p[i + 1] == 0x96 && p[i + 2] >= 0x80 && p[i + 2] <= 0x9f) {
            memcpy(o + w, p + from, (size_t)(i - from));
            w += i - from;
            o[w++] = '#';
            i += 3;
            from = i;
        } else {
            i++;
        }
    }
    memcpy(o + w, p + from, (size_t)(n - from));
    return out;
}

static PyObject *newlines(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "newlines() takes a str");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    const unsigned char *p = PyUnicode_1BYTE_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg), pairs = 0, crs = 0;
    for (Py_ssize_t i = 0; i < n;) {
        const unsigned char *f = memchr(p + i, '\r', (size_t)(n - i));
        if (!f)
            break;
        i = f - p;
        crs++;
        if (i + 1 < n && p[i + 1] == '\n') {
            pairs++;
            i += 2;
        } else {
            i++;
        }
    }
    if (crs == 0) {
        Py_INCREF(arg);
        return arg;
    }
    PyObject *out = PyUnicode_New(n - pairs, 127);
    if (!out)
        return NULL;
    unsigned char *o = PyUnicode_1BYTE_DATA(out);
    Py_ssize_t from = 0, w = 0;
    for (Py_ssize_t i = 0; i < n;) {
        const unsigned char *f = memchr(p + i, '\r', (size_t)(n - i));
        if (!f)
            break;
        i = f - p;
        memcpy(o + w, p + from, (size_t)(i - from));
        w += i - from;
        o[w++] = '\n';
        i += (i + 1 < n && p[i + 1] == '\n') ? 2 : 1;
        from = i;
    }
    memcpy(o + w, p + from, (size_t)(n - from));
    return out;
}

/* the anchors of the last literal tuple (callers pass the same module-level tuple on every block):
 * found again only when another tuple comes (held by a reference, so its identity cannot be reused) */
static PyObject *anchored;                   /* strong reference; NULL: none yet */
static unsigned char anchor[MAX_LITERALS];   /* each literal's offset of its least common character */

/* how common a character is in these logs' text less the step lines (tqdm bars, numbers, lower-case
 * words; most common first): the anchor is the literal's least common character. Only the speed
 * depends on the choice */
static int commonness(unsigned char c)
{
    static const char common[] = " 0te:s1ra6ni.24_o3598l/\n|7p,g[]I%<#cdum=hbkfwxTFvLEAR'P";
    const char *f = c ? strchr(common, (int)c) : NULL;
    return f ? (int)(sizeof common - (size_t)(f - common)) : 0;
}

static Py_ssize_t least_common(const unsigned char *lit, Py_ssize_t len);

static void find_anchors(PyObject *lits, const unsigned char **lit, const Py_ssize_t *len, Py_ssize_t k)
{
    Py_XDECREF(anchored);
    Py_INCREF(lits);
    anchored = lits;
    for (Py_ssize_t a = 0; a < k; a++)
        anchor[a] = (unsigned char)least_common(lit[a], len[a]);
}

/* the first occurrence of lit in p[0..n), or -1: memchr for its character at off (its least common),
 * each place that character is found compared in full */
static Py_ssize_t find_at(const unsigned char *p, Py_ssize_t n, const unsigned char *lit, Py_ssize_t len,
                          Py_ssize_t off)
{
    const unsigned char c = lit[off];
    for (Py_ssize_t j = off; j + (len - off) <= n;) {  /* an occurrence's anchor at p[j] */
        const unsigned char *f = memchr(p + j, c, (size_t)(n - (len - off) - j + 1));
        if (!f)
            return -1;
        j = f - p;
        if (memcmp(p + j - off, lit, (size_t)len) == 0)
            return j - off;
        j++;
    }
    return -1;
}

/* the offset of lit's least common character */
static Py_ssize_t least_common(const unsigned char *lit, Py_ssize_t len)
{
    Py_ssize_t best = 0;
    for (Py_ssize_t q = 1; q < len; q++)
        if (commonness(lit[q]) < commonness(lit[best]))
            best = q;
    return best;
}

static PyObject *which(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *text, *lits;
    if (!PyArg_ParseTuple(args, "UO!:which", &text, &PyTuple_Type, &lits))
        return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(lits);
    if (k > MAX_LITERALS) {
        PyErr_SetString(PyExc_ValueError, "which(): at most 63 literals");
        return NULL;
    }
    const unsigned char *lit[MAX_LITERALS];
    Py_ssize_t len[MAX_LITERALS];
    for (Py_ssize_t a = 0; a < k; a++) {
        PyObject *s = PyTuple_GET_ITEM(lits, a);
        if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s) || PyUnicode_GET_LENGTH(s) < 2
                || PyUnicode_GET_LENGTH(s) > 255) {
            PyErr_SetString(PyExc_ValueError, "which(): each literal is an ASCII str of 2 to 255 characters");
            return NULL;
        }
        lit[a] = PyUnicode_1BYTE_DATA(s);
        len[a] = PyUnicode_GET_LENGTH(s);
    }
    if (!PyUnicode_IS_ASCII(text))
        Py_RETURN_NONE;
    if (anchored != lits)
        find_anchors(lits, lit, len, k);
    const unsigned char *p = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    uint64_t found = 0;
    for (Py_ssize_t a = 0; a < k; a++)
        if (find_at(p, n, lit[a], len[a], anchor[a]) >= 0)
            found |= (uint64_t)1 << a;
    return PyLong_FromUnsignedLongLong(found);
}

/* 0x01 in each byte of x that is zero, 0x00 elsewhere (exact: no borrow between bytes) */
static uint64_t zero_byte_ones(uint64_t x)
{
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL;
    uint64_t y = (x & low7) + low7;
    return (~(y | x | low7)) >> 7;
}

/* the sum of the eight byte lanes of acc */
static Py_ssize_t lane_sum(uint64_t acc)
{
    const uint64_t even = 0x00ff00ff00ff00ffULL;
    uint64_t pairs = (acc & even) + ((acc >> 8) & even);  /* four 16-bit lanes, each <= 510 */
    return (Py_ssize_t)((pairs * 0x0001000100010001ULL) >> 48);
}

static PyObject *count_nl(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "count_nl() takes a str");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    const unsigned char *p = PyUnicode_1BYTE_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg), i = 0, c = 0;
    const uint64_t nl = 0x0a0a0a0a0a0a0a0aULL;
    while (i + 8 <= n) {
        uint64_t acc = 0;  /* per-byte counts: at most 255 words before they are summed */
        for (int k = 0; k < 255 && i + 8 <= n; k++, i += 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            acc += zero_byte_ones(w ^ nl);
        }
        c += lane_sum(acc);
    }
    for (; i < n; i++)
        c += p[i] == '\n';
    return PyLong_FromSsize_t(c);
}

static PyObject *lines_with(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *text, *literal;
    if (!PyArg_ParseTuple(args, "UU:lines_with", &text, &literal))
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), len = PyUnicode_GET_LENGTH(literal);
    if (!PyUnicode_IS_ASCII(text) || !PyUnicode_IS_ASCII(literal) || len < 1 || n == 0
            || PyUnicode_1BYTE_DATA(text)[n - 1] != '\n')
        Py_RETURN_NONE;
    const unsigned char *p = PyUnicode_1BYTE_DATA(text), *lit = PyUnicode_1BYTE_DATA(literal);
    if (memchr(lit, '\n', (size_t)len))  /* a literal holding a newline: left to Python */
        Py_RETURN_NONE;
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    Py_ssize_t pos = 0, off = least_common(lit, len);
    while (n - pos >= len) {
        Py_ssize_t at = find_at(p + pos, n - pos, lit, len, off);
        if (at < 0)
            break;
        at += pos;
        Py_ssize_t start = at, end;
        while (start > 0 && p[start - 1] != '\n')
            start--;
        const unsigned char *e = memchr(p + at, '\n', (size_t)(n - at));
        end = e ? e - p : n - 1;  /* always found: the text ends with a newline */
        PyObject *line = PyUnicode_Substring(text, start, end);
        PyObject *item = line ? Py_BuildValue("(nN)", start, line) : NULL;
        if (!item || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
        pos = end;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"bars", bars, METH_O, "bars(data) -> data with tqdm's block glyphs (UTF-8 U+2580-U+259F) read as '#'"},
    {"newlines", newlines, METH_O, "newlines(text) -> text with \\r\\n and \\r read as \\n, or None (non-ASCII)"},
    {"which", which, METH_VARARGS, "which(text, literals) -> bit mask of the literals that occur, or None (non-ASCII)"},
    {"count_nl", count_nl, METH_O, "count_nl(text) -> text.count('\\n'), or None (non-ASCII)"},
    {"lines_with", lines_with, METH_VARARGS,
     "lines_with(text, literal) -> [(start, line)] of LogStream.lines_with, or None (non-ASCII, no final newline)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cstream", "Generic per-block log passes in C.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cstream(void) { return PyModule_Create(&module); }
