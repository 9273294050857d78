/* test_util.h — the EXPECT macro the CPU tests share: counts the check,
 * records a failure with file:line and a message and lets the test go on, so
 * one run lists every failing case. Each test returns fails ? 1 : 0 at the end. */
#ifndef H3_TEST_UTIL_H
#define H3_TEST_UTIL_H

#include <stdio.h>

static int fails = 0, checks = 0;
#define EXPECT(c, ...)                                    \
    do {                                                  \
        checks++;                                         \
        if (!(c)) {                                       \
            fails++;                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);   \
            printf(__VA_ARGS__);                          \
            printf("\n");                                 \
        }                                                 \
    } while (0)

#endif
