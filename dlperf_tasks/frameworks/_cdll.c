/* DLE PyTorch BERT step lines ("DLL <date> <clock> - Training Epoch: E Training Iteration: N  loss : X")
 * read in one pass: the accelerator of pytorch_bert_stream.PytorchBertStream.scan's bulk case.
 *
 * scan(block) matches exactly what pytorch_bert_stream._DLL_FAST matches (leftmost match from each "DLL ",
 * \d{1,2} fields, seconds \d{1,2}(?:\.\d{1,6})?+, "\b" on [A-Za-z0-9_], "\S" as Python's str "\S" on
 * ASCII) and returns (rest, epochs, steps, timestamps, losses):
 *   rest        the block with every match removed (what "".join(_DLL_FAST.split(block)[0::11]) gives)
 *   epochs      how many times "Training Epoch: " occurs (str.count)
 *   steps       the lines' step numbers (ints), strictly increasing
 *   timestamps  float(day) + (h*3600 + m*60), then + float(seconds): the doubles Python computes
 *   losses      the loss each line prints (finite, plain decimals only)
 * It returns None (the caller then runs the pure-Python path on the block) for anything outside that
 * bulk case: a non-ASCII or non-str block, a line without a loss, a loss that is not a plain finite
 * decimal (or longer than 64 characters), dates that differ between lines (compared as text) or an
 * invalid date, a step of more than 18 digits, steps not strictly increasing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_cnum.h"

#define LOSS_MAX 64

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static int is_word(unsigned char c)
{
    return is_digit(c) || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

/* Python's str "\s" on ASCII: \t \n \v \f \r, \x1c-\x1f and the space */
static int is_space(unsigned char c) { return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20); }

/* digits run at p[j..n) capped at cap */
static Py_ssize_t digits(const unsigned char *p, Py_ssize_t n, Py_ssize_t j, Py_ssize_t cap)
{
    Py_ssize_t k = 0;
    while (j + k < n && k < cap && is_digit(p[j + k]))
        k++;
    return k;
}

static int literal(const unsigned char *p, Py_ssize_t n, Py_ssize_t j, const char *lit, Py_ssize_t len)
{
    return j + len <= n && memcmp(p + j, lit, (size_t)len) == 0;
}

typedef struct {
    Py_ssize_t start, end;
    Py_ssize_t date, date_len;       /* "YYYY-M-D" text */
    long h, mi;
    Py_ssize_t secs, secs_len;
    Py_ssize_t step, step_len;
    Py_ssize_t loss, loss_len;       /* loss_len 0: no loss group */
} Match;

/* \d{1,2} followed by sep: the field's value, or -1 */
static long field12(const unsigned char *p, Py_ssize_t n, Py_ssize_t *j, char sep)
{
    Py_ssize_t k = digits(p, n, *j, 2);
    if (k == 0 || *j + k >= n || p[*j + k] != (unsigned char)sep)
        return -1;
    long v = 0;
    for (Py_ssize_t i = 0; i < k; i++)
        v = v * 10 + (p[*j + i] - '0');
    *j += k + 1;
    return v;
}

static const char EPOCH[] = " - Training Epoch: ";
static const char ITER[] = " Training Iteration: ";
static const char *NAMES[] = {"average_loss", "final_loss", "step_loss"};

/* the regex at p[i..] (p[i..i+4) is "DLL "): 1 and *m filled, or 0 */
static int match_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t i, Match *m)
{
    Py_ssize_t j = i + 4;
    m->start = i;
    m->date = j;
    if (digits(p, n, j, 4) != 4 || j + 4 >= n || p[j + 4] != '-')
        return 0;
    j += 5;
    if (field12(p, n, &j, '-') < 0 || field12(p, n, &j, ' ') < 0)
        return 0;
    m->date_len = j - 1 - m->date;
    if ((m->h = field12(p, n, &j, ':')) < 0 || (m->mi = field12(p, n, &j, ':')) < 0)
        return 0;
    m->secs = j;
    Py_ssize_t k = digits(p, n, j, 2);
    if (k == 0)
        return 0;
    j += k;
    if (j + 1 < n && p[j] == '.' && is_digit(p[j + 1]))  /* (?:\.\d{1,6})?+ : atomic */
        j += 1 + digits(p, n, j + 1, 6);
    m->secs_len = j - m->secs;
    if (!literal(p, n, j, EPOCH, (Py_ssize_t)(sizeof EPOCH - 1)))
        return 0;
    j += (Py_ssize_t)(sizeof EPOCH - 1);
    k = digits(p, n, j, PY_SSIZE_T_MAX);
    if (k == 0)
        return 0;
    j += k;
    if (!literal(p, n, j, ITER, (Py_ssize_t)(sizeof ITER - 1)))
        return 0;
    j += (Py_ssize_t)(sizeof ITER - 1);
    m->step = j;
    k = digits(p, n, j, PY_SSIZE_T_MAX);
    if (k == 0)
        return 0;
    j += k;
    m->step_len = k;
    if (j < n && is_word(p[j]))  /* \b after a digit */
        return 0;
    while (j < n && (p[j] == ' ' || p[j] == '\t'))
        j++;
    m->loss_len = 0;
    for (int a = 0; a < 3; a++) {
        Py_ssize_t len = (Py_ssize_t)strlen(NAMES[a]);
        if (literal(p, n, j, NAMES[a], len) && literal(p, n, j + len, " : ", 3)) {
            Py_ssize_t v = j + len + 3, e = v;
            while (e < n && !is_space(p[e]))
                e++;
            if (e > v) {
                m->loss = v;
                m->loss_len = e - v;
                j = e;
            }
            break;
        }
    }
    m->end = j;
    return 1;
}

/* -?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?  over the whole text */
static int plain_decimal(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t j = 0, k;
    if (j < n && s[j] == '-')
        j++;
    if ((k = digits(s, n, j, PY_SSIZE_T_MAX)) == 0)
        return 0;
    j += k;
    if (j < n && s[j] == '.')
        j += 1 + digits(s, n, j + 1, PY_SSIZE_T_MAX);
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        Py_ssize_t e = j + 1;
        if (e < n && (s[e] == '-' || s[e] == '+'))
            e++;
        if ((k = digits(s, n, e, PY_SSIZE_T_MAX)) == 0)
            return 0;
        j = e + k;
    }
    return j == n;
}

/* Python's float() of an ASCII number text (correctly rounded); 0 when it cannot: the exact fast
 * path of _cnum.h, else CPython's own parser */
static int to_double(const unsigned char *s, Py_ssize_t n, double *out)
{
    if (exact_decimal((const char *)s, n, out))
        return 1;
    char buf[LOSS_MAX + 1];
    if (n > LOSS_MAX)
        return 0;
    memcpy(buf, s, (size_t)n);
    buf[n] = '\0';
    double v = PyOS_string_to_double(buf, NULL, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

static int64_t parse_long(const unsigned char *s, Py_ssize_t n)  /* n <= 18 digits: fits */
{
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

/* seconds from 1970-01-01 to 00:00 of a valid Gregorian date (datetime's range), or 0 when invalid */
static int day_seconds(const unsigned char *s, Py_ssize_t n, int64_t *out)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    Py_ssize_t d1 = 5;  /* "YYYY-" then M{1,2}-D{1,2} */
    Py_ssize_t mlen = digits(s, n, d1, 2);
    int64_t y = parse_long(s, 4), mo = parse_long(s + d1, mlen), d = parse_long(s + d1 + mlen + 1, n - d1 - mlen - 1);
    if (y < 1 || mo < 1 || mo > 12 || d < 1)
        return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d > mdays[mo - 1] + (mo == 2 && leap))
        return 0;
    int64_t yy = y - 1, ord = yy * 365 + yy / 4 - yy / 100 + yy / 400 + d;
    for (int64_t i = 1; i < mo; i++)
        ord += mdays[i - 1] + (i == 2 && leap);
    *out = (ord - 719163) * 86400;  /* date(1970, 1, 1).toordinal() == 719163 */
    return 1;
}

/* non-overlapping occurrences of lit (len >= 1) in p[0..n), like str.count */
static Py_ssize_t count_lit(const unsigned char *p, Py_ssize_t n, const char *lit, Py_ssize_t len)
{
    Py_ssize_t c = 0, i = 0;
    while (n - i >= len) {
        const unsigned char *f = memchr(p + i, lit[0], (size_t)(n - i - len + 1));
        if (!f)
            break;
        i = f - p;
        if (memcmp(p + i, lit, (size_t)len) == 0) {
            c++;
            i += len;
        } else {
            i++;
        }
    }
    return c;
}

/* the next "DLL " at or after i, or -1 */
static Py_ssize_t next_dll(const unsigned char *p, Py_ssize_t n, Py_ssize_t i)
{
    while (n - i >= 4) {
        const unsigned char *f = memchr(p + i, 'D', (size_t)(n - i - 3));
        if (!f)
            return -1;
        i = f - p;
        if (p[i + 1] == 'L' && p[i + 2] == 'L' && p[i + 3] == ' ')
            return i;
        i++;
    }
    return -1;
}

static PyObject *fail(PyObject *a, PyObject *b, PyObject *c)
{
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(c);
    Py_RETURN_NONE;
}

static PyObject *append_steal(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return NULL;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r < 0 ? NULL : list;
}

static PyObject *scan(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyUnicode_Check(arg) || !PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    const unsigned char *p = PyUnicode_1BYTE_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    PyObject *steps = PyList_New(0), *ts = PyList_New(0), *losses = PyList_New(0);
    if (!steps || !ts || !losses) {
        Py_XDECREF(steps);
        Py_XDECREF(ts);
        Py_XDECREF(losses);
        return NULL;
    }
    Py_ssize_t nm = 0, cap = 0, date0 = -1, date0_len = 0;
    Py_ssize_t *spans = NULL;  /* start, end of each match */
    int64_t day = 0;
    long long last = -1;
    Match m;
    PyObject *rest = NULL;
    for (Py_ssize_t i = next_dll(p, n, 0); i >= 0; i = next_dll(p, n, i)) {
        if (!match_at(p, n, i, &m)) {
            i += 1;
            continue;
        }
        if (m.loss_len == 0 || m.step_len > 18)
            goto fallback;
        if (date0 < 0) {
            date0 = m.date;
            date0_len = m.date_len;
            if (!day_seconds(p + m.date, m.date_len, &day))
                goto fallback;
        } else if (m.date_len != date0_len || memcmp(p + m.date, p + date0, (size_t)date0_len) != 0) {
            goto fallback;
        }
        long long step = (long long)parse_long(p + m.step, m.step_len);
        if (step <= last)
            goto fallback;
        last = step;
        double secs, loss;
        if (!to_double(p + m.secs, m.secs_len, &secs) || !plain_decimal(p + m.loss, m.loss_len)
                || !to_double(p + m.loss, m.loss_len, &loss) || !isfinite(loss))
            goto fallback;
        double base = (double)(day + (int64_t)m.h * 3600 + (int64_t)m.mi * 60);
        if (!append_steal(steps, PyLong_FromLongLong(step)) || !append_steal(ts, PyFloat_FromDouble(base + secs))
                || !append_steal(losses, PyFloat_FromDouble(loss)))
            goto error;
        if (nm == cap) {
            cap = cap ? 2 * cap : 256;
            Py_ssize_t *grown = PyMem_Realloc(spans, (size_t)cap * 2 * sizeof *spans);
            if (!grown) {
                PyErr_NoMemory();
                goto error;
            }
            spans = grown;
        }
        spans[2 * nm] = m.start;
        spans[2 * nm + 1] = m.end;
        nm++;
        i = m.end;
    }
    Py_ssize_t removed = 0;
    for (Py_ssize_t a = 0; a < nm; a++)
        removed += spans[2 * a + 1] - spans[2 * a];
    Py_ssize_t epochs = nm;  /* each match holds one "Training Epoch: "; the rest: counted in the gaps */
    if (nm == 0) {
        rest = arg;
        Py_INCREF(rest);
        epochs = count_lit(p, n, "Training Epoch: ", 16);
    } else {
        if (!(rest = PyUnicode_New(n - removed, 127)))
            goto error;
        unsigned char *out = PyUnicode_1BYTE_DATA(rest);
        Py_ssize_t from = 0, o = 0;
        for (Py_ssize_t a = 0; a <= nm; a++) {
            Py_ssize_t to = a < nm ? spans[2 * a] : n;
            memcpy(out + o, p + from, (size_t)(to - from));
            o += to - from;
            if (a < nm)
                from = spans[2 * a + 1];
        }
        /* an occurrence may straddle a removed span in the rest: count in the original gaps */
        from = 0;
        for (Py_ssize_t a = 0; a <= nm; a++) {
            Py_ssize_t to = a < nm ? spans[2 * a] : n;
            epochs += count_lit(p + from, to - from, "Training Epoch: ", 16);
            if (a < nm)
                from = spans[2 * a + 1];
        }
    }
    PyMem_Free(spans);
    return Py_BuildValue("(NnNNN)", rest, epochs, steps, ts, losses);
fallback:
    PyMem_Free(spans);
    return fail(steps, ts, losses);
error:
    PyMem_Free(spans);
    Py_DECREF(steps);
    Py_DECREF(ts);
    Py_DECREF(losses);
    return NULL;
}

/* which(text, literals): bit i set when literals[i] occurs in the ASCII text, or None (not ASCII); the
 * literals: ASCII, 2 to 255 characters, at most 63. Per literal, memchr for its least common character
 * (the logs' tqdm text and numbers hold few of them), compared in full where found: the rest of a block
 * is searched for PyTorch's literals and every crash hint in one call (what `literal in text` gives). */
#define MAX_LITERALS 63

static int
commonness(unsigned char c)
{
    static const char common[] = " 0te:s1ra6ni.24_o3598l/\n|7p,g[]I%<#cdum=hbkfwxTFvLEAR'P";
    const char *f = c ? strchr(common, (int)c) : NULL;
    return f ? (int)(sizeof common - (size_t)(f - common)) : 0;
}

static int
occurs(const unsigned char *p, Py_ssize_t n, const unsigned char *lit, Py_ssize_t len)
{
    Py_ssize_t off = 0;
    for (Py_ssize_t q = 1; q < len; q++)
        if (commonness(lit[q]) < commonness(lit[off]))
            off = q;
    for (Py_ssize_t j = off; j + (len - off) <= n;) {
        const unsigned char *f = memchr(p + j, lit[off], (size_t)(n - (len - off) - j + 1));
        if (!f)
            return 0;
        j = f - p;
        if (memcmp(p + j - off, lit, (size_t)len) == 0)
            return 1;
        j++;
    }
    return 0;
}

static PyObject *
which(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *text, *lits;
    if (!PyArg_ParseTuple(args, "UO!:which", &text, &PyTuple_Type, &lits))
        return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(lits);
    if (k > MAX_LITERALS) {
        PyErr_SetString(PyExc_ValueError, "which(): at most 63 literals");
        return NULL;
    }
    for (Py_ssize_t a = 0; a < k; a++) {
        PyObject *s = PyTuple_GET_ITEM(lits, a);
        if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s) || PyUnicode_GET_LENGTH(s) < 2
                || PyUnicode_GET_LENGTH(s) > 255) {
            PyErr_SetString(PyExc_ValueError, "which(): each literal is an ASCII str of 2 to 255 characters");
            return NULL;
        }
    }
    if (!PyUnicode_IS_ASCII(text))
        Py_RETURN_NONE;
    const unsigned char *p = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    uint64_t found = 0;
    for (Py_ssize_t a = 0; a < k; a++) {
        PyObject *s = PyTuple_GET_ITEM(lits, a);
        if (occurs(p, n, PyUnicode_1BYTE_DATA(s), PyUnicode_GET_LENGTH(s)))
            found |= (uint64_t)1 << a;
    }
    return PyLong_FromUnsignedLongLong(found);
}

/* text(data, after_cr) -> (text, newlines): a log piece's bytes as an ASCII str, what LogStream.feed's
 * Python path makes of them in several passes: tqdm's block glyphs (the UTF-8 of U+2580-U+259F) read as
 * '#', "\r\n" and a lone "\r" read as "\n", a "\n" first dropped when after_cr (the piece before ended
 * in "\r": its "\r\n" was cut in two); and how many "\n" the text holds (str.count). None when any other
 * non-ASCII byte occurs (a glyph cut at the end included): the caller then decodes the piece itself. */
static int
glyph_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t j)
{
    return p[j] == 0xe2 && j + 2 < n && p[j + 1] == 0x96 && p[j + 2] >= 0x80 && p[j + 2] <= 0x9f;
}

/* lines(text, literal): each line of the ASCII text that holds the literal, once, in order: what
 * LogStream.lines_with yields (its texts), found with memchr on the literal's least common character
 * instead of one str.find per line. None when the text is not ASCII. */
static PyObject *
lines(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *text, *lit;
    if (!PyArg_ParseTuple(args, "UU:lines", &text, &lit))
        return NULL;
    if (!PyUnicode_IS_ASCII(lit) || PyUnicode_GET_LENGTH(lit) < 2) {
        PyErr_SetString(PyExc_ValueError, "lines(): the literal is an ASCII str of at least 2 characters");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(text))
        Py_RETURN_NONE;
    const unsigned char *p = PyUnicode_1BYTE_DATA(text), *l = PyUnicode_1BYTE_DATA(lit);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), len = PyUnicode_GET_LENGTH(lit), off = 0;
    for (Py_ssize_t q = 1; q < len; q++)
        if (commonness(l[q]) < commonness(l[off]))
            off = q;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t j = off; j + (len - off) <= n;) {
        const unsigned char *f = memchr(p + j, l[off], (size_t)(n - (len - off) - j + 1));
        if (!f)
            break;
        j = f - p;
        if (memcmp(p + j - off, l, (size_t)len) != 0) {
            j++;
            continue;
        }
        Py_ssize_t pos = j - off, start = pos, end;
        while (start > 0 && p[start - 1] != '\n')
            start--;
        const unsigned char *nl = memchr(p + pos, '\n', (size_t)(n - pos));
        end = nl ? nl - p : n - 1;  /* no newline: block[start:-1], as str.find's -1 slices */
        if (!append_steal(out, PyUnicode_Substring(text, start, end < start ? start : end))) {
            Py_DECREF(out);
            return NULL;
        }
        if (!nl)
            break;
        j = end + off;  /* the search goes on from the line's end */
    }
    return out;
}

/* 8 bytes of p[j..] hold no byte >= 0x80 and no '\r' */
static int
plain8(const unsigned char *p, Py_ssize_t j)
{
    uint64_t w;
    memcpy(&w, p + j, 8);
    uint64_t cr = w ^ 0x0d0d0d0d0d0d0d0dULL;
    return ((w | ((cr - 0x0101010101010101ULL) & ~cr)) & 0x8080808080808080ULL) == 0;
}

static PyObject *
text(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer buf;
    int after_cr;
    if (!PyArg_ParseTuple(args, "y*p:text", &buf, &after_cr))
        return NULL;
    const unsigned char *p = buf.buf;
    Py_ssize_t n = buf.len, j = after_cr && n > 0 && p[0] == '\n';
    PyObject *out = PyUnicode_New(n - j, 127);
    if (out == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    unsigned char *o = PyUnicode_1BYTE_DATA(out), *o0 = o;
    Py_ssize_t newlines = 0;
    while (j < n) {
        if (j + 8 <= n && plain8(p, j)) {
            uint64_t w, y, lf;
            memcpy(&w, p + j, 8);
            y = w ^ 0x0a0a0a0a0a0a0a0aULL;  /* a zero byte where w has '\n' */
            lf = ~(((y & 0x7f7f7f7f7f7f7f7fULL) + 0x7f7f7f7f7f7f7f7fULL) | y | 0x7f7f7f7f7f7f7f7fULL);
            newlines += __builtin_popcountll(lf);  /* exactly one high bit per zero byte */
            memcpy(o, p + j, 8);
            o += 8;
            j += 8;
            continue;
        }
        unsigned char c = p[j];
        if (c >= 0x80) {
            if (!glyph_at(p, n, j)) {
                PyBuffer_Release(&buf);
                Py_DECREF(out);
                Py_RETURN_NONE;
            }
            c = '#';
            j += 2;
        } else if (c == '\r') {
            if (j + 1 < n && p[j + 1] == '\n') {
                j++;
                continue;
            }
            c = '\n';
        }
        newlines += c == '\n';
        *o++ = c;
        j++;
    }
    PyBuffer_Release(&buf);
    Py_ssize_t size = o - o0;
    if (size < PyUnicode_GET_LENGTH(out) && PyUnicode_Resize(&out, size) < 0)
        return NULL;
    return Py_BuildValue("(Nn)", out, newlines);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "scan(block) -> (rest, epochs, steps, timestamps, losses) or None (use the Python path)"},
    {"which", which, METH_VARARGS, "which(text, literals) -> bit mask of the literals that occur, or None (non-ASCII)"},
    {"lines", lines, METH_VARARGS, "lines(text, literal) -> the lines holding literal, or None (non-ASCII)"},
    {"text", text, METH_VARARGS, "text(data, after_cr) -> (the bytes as an ASCII str: glyphs '#', newlines '\\n'; its newlines) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cdll", "DLE PyTorch BERT step lines in one pass.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cdll(void) { return PyModule_Create(&module); }
