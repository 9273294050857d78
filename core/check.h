/* check.h — CHECK(cond, fmt, ...): an internal error that says what and
 * where: the failing expression, file:line and the message, then exit(1).
 * User errors are reported by the CLI with exit 2 instead and do not go
 * through here; the CUDA and cuBLAS forms are runtime/cuda_check.h's. */
#ifndef H3_CHECK_H
#define H3_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

#endif
