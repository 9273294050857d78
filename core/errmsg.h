/* errmsg.h — h3_seterr: the one-line message a failing core function leaves
 * in its caller's err buffer (err may be NULL or errlen 0: then nothing). */
#ifndef H3_ERRMSG_H
#define H3_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Returns -1, so that "return h3_seterr(err, errlen, ...);" reports and fails in one. */
static inline int h3_seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int h3_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif
