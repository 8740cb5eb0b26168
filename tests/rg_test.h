// rg_test.h - the smallest test harness that does the job.
//
// Each test binary defines test functions and lists them in a table:
//
//   static void test_roundtrip(void) { RG_CHECK(x == y, "x=%d y=%d", x, y); }
//   static const rg_test_case cases[] = { RG_TEST(test_roundtrip), {0} };
//   int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
//
// A case passes when none of its checks fail. Each binary prints one line per
// case and ends with "N passed, N failed"; scripts/test.sh sums those lines.
// A case may call RG_SKIP("why") instead: it is printed as SKIP and counted as
// neither passed nor failed.
#ifndef RG_TEST_H
#define RG_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rg_test_case {
    const char *name;
    void (*fn)(void);
} rg_test_case;

#define RG_TEST(f) {#f, f}

static int rg_test_failures_ = 0;  // checks failed in the current case
static int rg_test_skipped_ = 0;   // current case skipped

static inline void rg_test_fail_(const char *file, int line, const char *cond, const char *fmt, ...) {
    rg_test_failures_++;
    if (rg_test_failures_ > 20) return;  // one broken case must not flood the log
    fprintf(stdout, "    %s:%d: check failed: %s: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
}

// RG_CHECK(cond, fmt, ...): record a failure with a message when cond is false.
#define RG_CHECK(cond, ...) \
    do { if (!(cond)) rg_test_fail_(__FILE__, __LINE__, #cond, __VA_ARGS__); } while (0)
// RG_REQUIRE: like RG_CHECK but returns from the test function on failure.
#define RG_REQUIRE(cond, ...) \
    do { if (!(cond)) { rg_test_fail_(__FILE__, __LINE__, #cond, __VA_ARGS__); return; } } while (0)
#define RG_SKIP(...) \
    do { rg_test_skipped_ = 1; fprintf(stdout, "    skip: "); fprintf(stdout, __VA_ARGS__); fputc('\n', stdout); return; } while (0)

// Runs every case (or those whose name contains argv[1]); returns 0 when none failed.
static inline int rg_test_run(int argc, char **argv, const rg_test_case *cases) {
    int passed = 0, failed = 0, skipped = 0;
    const char *filter = argc > 1 ? argv[1] : NULL;
    for (const rg_test_case *c = cases; c->name; c++) {
        if (filter && !strstr(c->name, filter)) continue;
        rg_test_failures_ = 0;
        rg_test_skipped_ = 0;
        fflush(stdout);
        c->fn();
        if (rg_test_failures_) {
            printf("FAIL %s (%d checks failed)\n", c->name, rg_test_failures_);
            failed++;
        } else if (rg_test_skipped_) {
            printf("SKIP %s\n", c->name);
            skipped++;
        } else {
            printf("PASS %s\n", c->name);
            passed++;
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

#endif
