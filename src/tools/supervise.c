/*
 * supervise.c — the process supervisor of `dblock run` (supervise.h):
 * the guardian, signal forwarding, terminal handover, job control.
 */
#include "supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dblock_cli.h"

extern char **environ;

static const int FORWARDED[SUP_NFORWARDED] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NFORWARDED SUP_NFORWARDED

/* The command's process group once it runs (0 before and after). A
 * signal that arrives before (or races with) its start is kept in
 * g_pending, one bit per signal number, and sent on by the wait loop.
 * Signal handlers may run in any thread, including the library's, so both
 * are atomics. Signals go to the whole group: a pipeline `a | b` run by a
 * shell is stopped as a whole. */
static atomic_int g_group;
static atomic_uint g_pending;

/* The handler of the forwarded signals: to the group, or kept for later. */
static void forward_signal(int sig) {
  int saved = errno;
  pid_t pg = (pid_t)atomic_load(&g_group);
  if (pg > 0) kill(-pg, sig);
  else atomic_fetch_or(&g_pending, 1u << sig);
  errno = saved;
}

/* Sends the signals kept in g_pending to group pg (and forgets them). */
static void forward_pending(pid_t pg) {
  unsigned bits = atomic_exchange(&g_pending, 0);
  for (int sig = 1; bits && sig < 32; sig++)
    if (bits & (1u << sig)) kill(-pg, sig);
}

/* Starts the guardian: a small process that leads the command's own
 * process group and holds the read end of a pipe whose only write end is
 * ours (close-on-exec, so the command never has it). When dblock dies for
 * any reason — SIGKILL, the OOM killer — the pipe reads end-of-file and the
 * guardian SIGKILLs the whole group, itself included: no part of the
 * command outlives its supervisor (and its lock). It ignores the signals
 * dblock forwards to the group. Returns its pid (= the group id) and the
 * write end in *wfd, or -1 with errno set. */
static pid_t start_guardian(int *wfd) {
  int p[2];
  pid_t g;
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  g = fork();
  if (g == 0) {
    /* A fork of a threaded process: async-signal-safe calls only. */
    struct sigaction ign;
    char b;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    setpgid(0, 0);
    for (size_t i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &ign, NULL);
    /* Keep nothing but the pipe: no database socket, no terminal. */
    if (dup2(p[0], 0) < 0) _exit(1);
    if (syscall(SYS_close_range, 1u, ~0u, 0u) != 0)
      for (int fd = 1; fd < 1024; fd++) close(fd);
    while (read(0, &b, 1) < 0 && errno == EINTR) {
    }
    kill(0, SIGKILL);
    _exit(0);
  }
  close(p[0]);
  if (g < 0) {
    close(p[1]);
    return -1;
  }
  setpgid(g, g); /* also here, so the group exists before the spawn */
  *wfd = p[1];
  return g;
}

/* Gives the terminal to process group pg when dblock runs in the
 * terminal's foreground (so an interactive command reads it and gets ^C
 * itself), or back to dblock's own group (pg = 0). While the command has
 * it, dblock ignores SIGTTOU, so a message it writes (with `stty tostop`)
 * never stops it. Returns 1 if it moved the terminal (either way). */
static int hand_terminal(pid_t pg) {
  static int moved;
  static struct sigaction old_ttou;
  struct sigaction ign;
  sigset_t ttou, old;
  if (pg > 0 && (!isatty(STDIN_FILENO) || tcgetpgrp(STDIN_FILENO) != getpgrp())) return moved = 0;
  if (pg == 0 && !moved) return 0;
  /* A background group changing the terminal's group gets SIGTTOU. */
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  pthread_sigmask(SIG_BLOCK, &ttou, &old);
  if (tcsetpgrp(STDIN_FILENO, pg > 0 ? pg : getpgrp()) == 0) {
    if (pg > 0 && !moved) {
      memset(&ign, 0, sizeof ign);
      ign.sa_handler = SIG_IGN;
      sigaction(SIGTTOU, &ign, &old_ttou);
    } else if (pg == 0) {
      sigaction(SIGTTOU, &old_ttou, NULL);
    }
    moved = pg > 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 1;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return 0;
}

/* Job control for an interactive command (^Z): when it stops, dblock takes
 * the terminal back and stops too, so the shell sees its job stopped; when
 * the shell continues dblock (fg, bg), the command is continued (with the
 * terminal again for fg). The lock stays held and renewed meanwhile. */
static void follow_stop(pid_t pid, pid_t group) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid(P_PID, (id_t)pid, &si, WSTOPPED | WNOHANG) != 0 || si.si_pid != pid) return;
  if (!hand_terminal(0)) return; /* not interactive: a stop is someone's choice */
  kill(getpid(), SIGSTOP);
  hand_terminal(group);
  kill(-group, SIGCONT);
}

/* The environment variables dblock run sets: the command never sees an
 * inherited one of these. */
static int ours(const char *kv) {
  static const char *const keys[] = {"DBLOCK_NAME=", "DBLOCK_FENCE=", "DBLOCK_CHECK_SQL="};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (strncmp(kv, keys[i], strlen(keys[i])) == 0) return 1;
  return 0;
}

/* Frees what child_env made (its copies and the array; the rest is
 * environ's). NULL is fine. */
static void free_env(char **env) {
  if (!env) return;
  for (char **e = env; *e; e++)
    if (ours(*e)) free(*e);
  free(env);
}

/* environ without our variables, plus copies of vars ("KEY=value", a
 * NULL-ended list of ours). */
static char **child_env(char *const *vars) {
  size_t n = 0, k = 0, nv = 0;
  char **env;
  for (char **e = environ; e && *e; e++) n++;
  while (vars[nv]) nv++;
  if (!(env = calloc(n + nv + 1, sizeof *env))) return NULL;
  for (char **e = environ; e && *e; e++)
    if (!ours(*e)) env[k++] = *e;
  for (size_t i = 0; i < nv; i++)
    if (!(env[k++] = strdup(vars[i]))) {
      free_env(env); /* (the list ends at the failed copy: calloc) */
      return NULL;
    }
  return env;
}


int sup_start(sup_child *c, char *const *argv, char *const *vars) {
  char **env;
  sigset_t fwd, old;
  struct sigaction sa;
  posix_spawnattr_t attr;
  int rc;

  /* From here the forwarded signals go to the child. Block them until it
   * exists, so none is lost or acted on by us in between. */
  sigemptyset(&fwd);
  for (size_t i = 0; i < NFORWARDED; i++) sigaddset(&fwd, FORWARDED[i]);
  pthread_sigmask(SIG_BLOCK, &fwd, &old);
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  /* A signal our caller ignores (nohup, background jobs) stays ignored,
   * for us and for the child, as shells do. */
  for (size_t i = 0; i < NFORWARDED; i++) {
    sigaction(FORWARDED[i], NULL, &c->saved[i]);
    if (c->saved[i].sa_handler != SIG_IGN) sigaction(FORWARDED[i], &sa, NULL);
  }

  env = child_env(vars);
  c->guard_fd = -1;
  if ((c->group = start_guardian(&c->guard_fd)) < 0) {
    fprintf(stderr, "%s: run: cannot start the process-group guardian: %s\n", PROG,
            strerror(errno));
    for (size_t i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &c->saved[i], NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    free_env(env);
    return 126;
  }
  posix_spawnattr_init(&attr);
  {
    sigset_t def;
    sigemptyset(&def);
    for (size_t i = 0; i < NFORWARDED; i++)
      if (c->saved[i].sa_handler != SIG_IGN) sigaddset(&def, FORWARDED[i]);
    sigaddset(&def, SIGTTOU); /* (dblock may ignore it: the command must not) */
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setsigmask(&attr, &old);
    /* The command runs in the guardian's process group (see above). */
    posix_spawnattr_setpgroup(&attr, c->group);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETPGROUP);
  }
  hand_terminal(c->group);
  rc = env ? posix_spawnp(&c->pid, argv[0], NULL, &attr, argv, env) : ENOMEM;
  posix_spawnattr_destroy(&attr);
  free_env(env);
  if (rc != 0) {
    fprintf(stderr, "%s: run: cannot run '%s': %s\n", PROG, argv[0], strerror(rc));
    hand_terminal(0);
    kill(-c->group, SIGKILL);
    close(c->guard_fd);
    while (waitpid(c->group, NULL, 0) < 0 && errno == EINTR) {
    }
    for (size_t i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &c->saved[i], NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc == ENOENT ? 127 : 126;
  }
  atomic_store(&g_group, c->group);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return 0;
}

int sup_exited(sup_child *c) {
  siginfo_t si;
  int w;
  forward_pending(c->group);
  follow_stop(c->pid, c->group);
  /* WNOWAIT: the command stays unreaped, so a forwarded signal can never
   * hit a recycled pid. */
  memset(&si, 0, sizeof si);
  w = waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT);
  if (w == 0 && si.si_pid == c->pid) return 1;
  if (w < 0 && errno != EINTR) return 1;
  return 0;
}

int sup_finish(sup_child *c) {
  int status = 0;
  atomic_store(&g_group, 0);
  while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
  }
  /* The command is done: what it left running in its group (background
   * jobs) must not go on outside the lock, and the guardian's work is over. */
  hand_terminal(0);
  kill(-c->group, SIGKILL);
  close(c->guard_fd);
  while (waitpid(c->group, NULL, 0) < 0 && errno == EINTR) {
  }
  /* The child is gone: signals act on us again as before (e.g. SIGTERM
   * during the release ends dblock; the lease then runs out). */
  for (size_t i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &c->saved[i], NULL);
  atomic_store(&g_pending, 0);
  return status;
}
