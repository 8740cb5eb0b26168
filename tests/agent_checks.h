// agent_checks.h - what test_agent_proc and test_mcp both check at their end: no fd of the
// process left open and no child left unreaped.
#ifndef RG_TEST_AGENT_CHECKS_H
#define RG_TEST_AGENT_CHECKS_H

#include <dirent.h>
#include <errno.h>
#include <sys/wait.h>

#include "rg_test.h"

static int agent_count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

// The fds open at the start, counted by main before the first case.
static int agent_fds_at_start = -1;

static void test_no_leaks(void) {
    int now = agent_count_fds();
    RG_CHECK(now == agent_fds_at_start, "%d fds open now, %d at the start", now, agent_fds_at_start);
    errno = 0;
    pid_t p = waitpid(-1, NULL, WNOHANG);
    RG_CHECK(p == -1 && errno == ECHILD, "a child is left (waitpid gave %d)", (int)p);
}

#endif
