/* _cnum.h: the exact fast path of Python's float() for a plain decimal, shared by the compiled
 * scanners (_cdll.c: DLE timestamps and losses, _cmxbert.c: gluon-nlp latencies).
 *
 * exact_decimal(s, n, &out): s[0:n] is "-?[0-9]*(\.[0-9]*)?" holding 1 to 15 digits. Then the
 * value is M / 10**k with M < 2**53 and 10**k (k <= 15) exact doubles, and one IEEE division is
 * correctly rounded, the double float() gives: *out set, 1. Anything else (another form, more
 * digits, a platform that evaluates doubles in extended precision): 0, and the caller asks CPython's
 * own PyOS_string_to_double. */
#ifndef DLPERF_CNUM_H
#define DLPERF_CNUM_H

#include <Python.h>
#include <float.h>
#include <stdint.h>

static inline int
exact_decimal(const char *s, Py_ssize_t n, double *out)
{
#if FLT_EVAL_METHOD == 0
    static const double tens[16] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7,
                                    1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    int neg = n > 0 && s[0] == '-', dot = 0, digits = 0, decimals = 0;
    uint64_t m = 0;
    for (Py_ssize_t j = neg; j < n; j++) {
        unsigned char c = (unsigned char)s[j];
        if (c >= '0' && c <= '9') {
            if (++digits > 15)
                return 0;
            m = m * 10 + (uint64_t)(c - '0');
            decimals += dot;
        } else if (c == '.' && !dot) {
            dot = 1;
        } else {
            return 0;
        }
    }
    if (digits == 0)
        return 0;
    double v = (double)m / tens[decimals];
    *out = neg ? -v : v;
    return 1;
#else
    (void)s;
    (void)n;
    (void)out;
    return 0;
#endif
}

#endif
