// agent_checks.h - what test_agent_proc, test_mcp and test_agent share: at their end, no fd of the
// process left open and no child left unreaped; and a main that writes a fake MCP server script
// into a temporary folder first.
#ifndef RG_TEST_AGENT_CHECKS_H
#define RG_TEST_AGENT_CHECKS_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

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

// Makes dir (a mkdtemp template), writes script there as fake_mcp_server.py (its path into path[cap]), runs the
// cases and removes both.
static inline int agent_test_main(int argc, char **argv, const rg_test_case *cases, char *dir, const char *script,
                           char *path, size_t cap) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, cap, "%s/fake_mcp_server.py", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(script, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    agent_fds_at_start = agent_count_fds();
    int rc = rg_test_run(argc, argv, cases);
    unlink(path);
    rmdir(dir);
    return rc;
}

#endif
