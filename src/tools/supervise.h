/*
 * supervise.h — how `dblock run` runs its command: in a process group of
 * its own led by a guardian (so nothing of it outlives dblock), with
 * dblock's signals forwarded to the group, the terminal handed over to an
 * interactive command, and ^Z followed. What to do about the lock stays
 * with the caller (cmd_run.c).
 */
#ifndef DBLOCK_TOOLS_SUPERVISE_H
#define DBLOCK_TOOLS_SUPERVISE_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

/* The signals forwarded to the command: SIGTERM, SIGINT, SIGHUP, SIGQUIT,
 * SIGUSR1, SIGUSR2. */
#define SUP_NFORWARDED 6

/* A running command (between sup_start and sup_finish). */
typedef struct sup_child {
  pid_t pid;   /* the command */
  pid_t group; /* its process group: the guardian's pid */
  int guard_fd; /* the write end of the guardian's pipe */
  struct sigaction saved[SUP_NFORWARDED]; /* the forwarded signals' handlers before */
} sup_child;

/* Starts argv (looked up in PATH) with vars ("KEY=value", NULL-ended:
 * DBLOCK_NAME, DBLOCK_FENCE, DBLOCK_CHECK_SQL; an inherited value of
 * any of these is dropped) in its environment, in a new process group led by a
 * guardian, with the terminal when dblock has it, and forwards the
 * signals above to that group from now until sup_finish. Returns 0, or
 * (after a message on stderr, with everything undone) 126 when it cannot
 * start the guardian or the command, 127 when the command is not found. */
int sup_start(sup_child *c, char *const *argv, char *const *vars);

/* One turn of the wait: sends on the signals that came before the command
 * ran, and follows a stop of an interactive command (^Z). Returns 1 when
 * the command has exited (not reaped yet, so its pid and group cannot be
 * recycled under a signal) or the wait failed, 0 while it runs. */
int sup_exited(sup_child *c);

/* After sup_exited: reaps the command, SIGKILLs what is left of its group
 * (background jobs; the guardian), takes the terminal back and restores
 * the forwarded signals' handlers. Returns the command's wait status. */
int sup_finish(sup_child *c);

#endif
