// proc_spawn.h - what proc.c and proc_child.c share (not a public API).
#ifndef RG_AGENT_PROC_SPAWN_H
#define RG_AGENT_PROC_SPAWN_H

#include <sys/types.h>

#include "retrograd.h"

// Starts argv with fd_in, fd_out, fd_err as its stdin, stdout, stderr (see proc.h for the rest).
rg_status rg_proc_spawn(const char *const *argv, const char *cwd, const char *const *env, int fd_in, int fd_out,
                        int fd_err, pid_t *pid, rg_error *err);
// write(2) that reports a closed pipe as EPIPE and never raises SIGPIPE.
ssize_t rg_proc_write_nosigpipe(int fd, const void *buf, size_t n);
// Closes *fd when open and sets it to -1.
void rg_proc_close_fd(int *fd);

#endif
