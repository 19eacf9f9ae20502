/*
 * test_cli.c — runs the real dblock and dblock-reaper binaries (from
 * $DBLOCK_TEST_TREE, default "build") against SQLite, PostgreSQL and
 * MariaDB and checks what issue 5 asks them to show, plus the reaper's exit
 * codes (issue 4):
 *
 *   - migrate; two (three) `dblock run` on one name never overlap; with
 *     --wait 0 the second exits at once with 3 (or the -E code);
 *   - a child running 3x the lease keeps the lock, and its DBLOCK_FENCE is
 *     the fence `dblock status --json` shows (for_update on PostgreSQL and
 *     SQLite: only a positive fence, as a held for_update row is invisible
 *     to other sessions there);
 *   - force-unlock from another process: the child gets SIGTERM and
 *     `dblock run` exits 4 (for_update: not on SQLite, where the
 *     force-unlock is refused with 1 and the holder keeps the lock);
 *   - `list --json` is valid JSON (json-c, strict: see cli_harness.c) and
 *     names the holder (host, pid, fence);
 *   - every usage error exits 2 with one line on stderr;
 *   - dblock-reaper: --once, bad URL, closed port, missing table, read-only
 *     role, no mode, --every stopping within 3 s of SIGTERM, and a pass with
 *     a for_update lock held among expired rows (kept; the others deleted).
 *
 * Every process runs in its own process group with a deadline; the per-test
 * teardown kills whatever a failed test left behind (cli_harness.c runs the
 * programs). The lock table is cli_locks, so other suites never see these
 * rows. The tests are registered from the table at the end, per backend
 * (and strategy) as it says. DBLOCK_TEST_FILTER=GLOB runs only the
 * matching tests.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "cli_harness.h"

/* ---- tests: migrate ----------------------------------------------------- */

static void t_migrate(const char *be) {
  const tu_backend *b = backend(be, NULL);
  migrate(b);
  /* Again: nothing left to apply. */
  if (migrate(b) != 0) fail_msg("a second `dblock migrate` applied migrations again");
}

/* ---- tests: two runs never overlap; --wait 0 is busy at once ------------ */

#define OVERLAP_RUNS 3

/* Starts OVERLAP_RUNS `dblock run NAME -- sh -c '...'` at once; each child
 * appends "start NS PID" and "end NS PID" to one file around a 200 ms nap.
 * The file must show the intervals one after the other. */
static void t_no_overlap(const char *be) {
  const tu_backend *b = migrated(be);
  for (int s = 0; s < NSTRATEGIES; s++) {
    const char *st = STRATEGIES[s], *name = tname("overlap"), *log = tpath("overlap");
    proc p[OVERLAP_RUNS];
    long long last_end = 0, start_pid = 0;
    char *text, *line, *save = NULL;
    int lines = 0;
    for (int k = 0; k < OVERLAP_RUNS; k++) {
      cmdv c = dblock_cmd(b->url, st);
      cv_addl(&c, "run", name, "--",  "sh", "-c",
              "echo \"start $(date +%s%N) $$\" >> \"$1\"; sleep 0.2; "
              "echo \"end $(date +%s%N) $$\" >> \"$1\"",
              "sh", log, NULL);
      p[k] = start(&c);
    }
    for (int k = 0; k < OVERLAP_RUNS; k++) {
      result r = finish(&p[k], 30000);
      if (r.code != 0)
        fail_msg("[%s %s] `%s` exited %d; stderr: %s", be, st, p[k].cmd, r.code, r.err);
    }
    if (!(text = slurp(log))) fail_msg("[%s %s] the children wrote nothing", be, st);
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save), lines++) {
      char what[8];
      long long ns, pid;
      if (sscanf(line, "%7s %lld %lld", what, &ns, &pid) != 3)
        fail_msg("[%s %s] bad line '%s' in %s", be, st, line, slurp(log));
      if (strcmp(what, lines % 2 == 0 ? "start" : "end") != 0)
        fail_msg("[%s %s] two runs overlapped: '%s' at line %d:\n%s", be, st, line, lines + 1,
                 slurp(log));
      if (lines % 2 == 0) {
        if (ns < last_end)
          fail_msg("[%s %s] a run started (%lld) before the previous one ended (%lld):\n%s", be,
                   st, ns, last_end, slurp(log));
        start_pid = pid;
      } else {
        if (pid != start_pid) fail_msg("[%s %s] interleaved runs:\n%s", be, st, slurp(log));
        last_end = ns;
      }
    }
    if (lines != 2 * OVERLAP_RUNS)
      fail_msg("[%s %s] expected %d lines, got %d:\n%s", be, st, 2 * OVERLAP_RUNS, lines,
               slurp(log));
  }
}

/* While a `dblock run` holds NAME: --wait 0 exits 3 at once without
 * running its command, -E 9 makes it 9, --wait 500ms times out with 3. */
static void t_busy(const char *be) {
  const tu_backend *b = migrated(be);
  for (int s = 0; s < NSTRATEGIES; s++) {
    const char *st = STRATEGIES[s], *name = tname("busy");
    holder h = hold(b, st, name, NULL, NULL, HOLD_SCRIPT);
    cmdv c;
    result r = try_run(b, st, name, "0", NULL, &c);
    expect_code(&r, &c, 3);
    expect_one_line(&r, &c, "dblock", NULL);
    if (r.ms > 3000) fail_msg("[%s %s] `%s` took %lld ms: not at once", be, st, cmdline(&c),
                              (long long)r.ms);
    r = try_run(b, st, name, "0", "9", &c);
    expect_code(&r, &c, 9);
    r = try_run(b, st, name, "500ms", NULL, &c);
    expect_code(&r, &c, 3);
    if (r.ms < 450 || r.ms > 5000)
      fail_msg("[%s %s] `%s` gave up after %lld ms", be, st, cmdline(&c), (long long)r.ms);
    unhold(&h);
    /* Free again: a try-once run gets it. */
    r = try_run(b, st, name, "0", NULL, &c);
    expect_code(&r, &c, 0);
  }
}

/* dblock(1)'s shell idiom for a lock across steps: when the name is busy
 * the script stops (exit 3) and the step after it never runs; when free it
 * runs with $fence set. (A bare eval "$(dblock acquire ...)" evaluated an
 * empty string and went on, also under set -e.) */
static const char *IDIOM =
    "lock=$(\"$1\" --url \"$2\" --table \"$4\" acquire \"$3\" --lease 5s) || exit 3\n"
    "eval \"$lock\"\n"
    "echo \"ran with fence $fence\"\n";

static void t_acquire_idiom(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("idiom");
  cmdv c = dblock_cmd(b->url, NULL), sh = {{NULL}, 0};
  result r, held;
  cv_addl(&c, "acquire", name, "--lease", "10s", NULL);
  held = run(&c, 15000);
  expect_code(&held, &c, 0);
  cv_addl(&sh, "/bin/sh", "-ec", IDIOM, "sh", tfmt("%s/dblock", tu_tree()), b->url, name, TABLE, NULL);
  r = run(&sh, 15000);
  {
    /* Busy with --json: one object on stdout, ok false, exit 3. */
    cmdv j = dblock_cmd(b->url, NULL);
    result jr;
    json_object *v;
    cv_addl(&j, "acquire", name, "--lease", "5s", "--json", NULL);
    jr = run(&j, 15000);
    expect_code(&jr, &j, 3);
    v = jparse(jr.out, cmdline(&j));
    if (jbool(v, "ok", jr.out) || !strstr(jstr(v, "message", jr.out), "held by another owner"))
      fail_msg("`%s`: expected ok false and the reason: %s", cmdline(&j), jr.out);
  }
  if (r.code != 3 || strstr(r.out, "ran with") || !strstr(r.err, "held by another owner"))
    fail_msg("[%s] the idiom on a busy name: exit %d, stdout '%s', stderr '%s' (expected busy, "
             "exit 3, no step)", be, r.code, r.out, r.err);
  {
    /* Released: the idiom takes it and the step runs with the fence. */
    cmdv rel = dblock_cmd(b->url, NULL);
    const char *tok = strstr(held.out, "token=");
    char token[200];
    if (!tok) fail_msg("no token in: %s", held.out);
    snprintf(token, sizeof token, "%.*s", (int)strcspn(tok + 6, "\n"), tok + 6);
    cv_addl(&rel, "release", name, "--token", token, NULL);
    r = run(&rel, 15000);
    expect_code(&r, &rel, 0);
  }
  /* (tfmt's buffers rotate: build the command again.) */
  sh.n = 0;
  cv_addl(&sh, "/bin/sh", "-ec", IDIOM, "sh", tfmt("%s/dblock", tu_tree()), b->url, name, TABLE, NULL);
  r = run(&sh, 15000);
  if (r.code != 0 || !strstr(r.out, "ran with fence ") || strstr(r.out, "ran with fence \n"))
    fail_msg("[%s] the idiom on a free name: exit %d, stdout '%s', stderr '%s'", be, r.code, r.out, r.err);
}

/* ---- tests: a child running 3x the lease keeps the lock ----------------- */

static void t_keeps_lock(const char *be, const char *st) {
  const tu_backend *b = migrated(be);
  const char *name = tname("keep");

  int fu_any = strcmp(st, "for_update") == 0;
  /* (--kill-after 0: run's loss margin is then 250 ms, not half the
   * lease, so each renewal — every 667 ms — has 1,083 ms to be confirmed
   * instead of 333. With a 1 s lease it had 417 ms; the watchdog test's
   * renewals failed with 700 ms on a loaded run, and this one's has no
   * more to spare.) */
  holder h = hold(b, st, name, "2s", "0",
                  READY "sleep 7");
  int64_t t_ready = tu_now_ms();
  long long last_expiry = 0;
  result r;
  cmdv c;
  for (int check = 0; check < 3; check++) {
    int64_t now_us;
    status_info si;
    /* Right away, then after ~1.2 and ~2.4 leases. */
    if (check) {
      int64_t at = t_ready + 2400 * check;
      if (tu_now_ms() < at) tu_sleep_ms(at - tu_now_ms());
    }
    if (exited(&h.p))
      fail_msg("[%s %s] `%s` ended early; stderr: %s", be, st, h.p.cmd, slurp(h.p.err_path));
    now_us = wall_us();
    si = status_json(b, st, name);
    if (!si.held) fail_msg("[%s %s] status says not held after %lld ms", be, st,
                           (long long)(tu_now_ms() - t_ready));
    if (strcmp(si.strategy, st) != 0)
      fail_msg("[%s %s] status shows strategy %s", be, st, si.strategy);
    if (si.fence != h.fence)
      fail_msg("[%s %s] DBLOCK_FENCE=%lld but `dblock status` shows fence %lld", be, st,
               h.fence, si.fence);
    if (!fu_any) {
      if (si.expires_us <= now_us)
        fail_msg("[%s %s] status shows the lease expired (%lld us <= now %lld us)", be, st,
                 si.expires_us, (long long)now_us);
      if (check && si.expires_us <= last_expiry)
        fail_msg("[%s %s] the lease was not renewed: expires_at_us %lld then %lld", be, st,
                 last_expiry, si.expires_us);
      last_expiry = si.expires_us;
    }
    expect_busy(b, st, name);
  }
  r = finish(&h.p, 15000);
  if (r.code != 0)
    fail_msg("[%s %s] `%s` exited %d (expected 0: the child kept the lock); stderr: %s", be, st,
             h.p.cmd, r.code, r.err);
  if (r.ms < 6000) fail_msg("[%s %s] the child ran only %lld ms", be, st, (long long)r.ms);
  /* Released at the end. */
  r = try_run(b, st, name, "0", NULL, &c);
  expect_code(&r, &c, 0);
}

/* ---- tests: force-unlock while `dblock run` holds the lock -------------- */

static void t_force_unlock(const char *be, const char *st) {
  const tu_backend *b = migrated(be);
  const char *name = tname("force");
  int refused = strcmp(st, "for_update") == 0 && strcmp(be, "sqlite") == 0;
  /* (2 s: with 1 s the acquire had 500 ms to answer, the margin being
   * half the lease) */
  holder h = hold(b, st, name, "2s", NULL, TRAP_SCRIPT);
  cmdv c = dblock_cmd(b->url, st);
  result r;
  cv_addl(&c, "force-unlock", name, NULL);
  r = run(&c, 15000);
  if (refused) {
    /* Documented: a held for_update lock cannot be force-unlocked on
     * SQLite. Refused with 1, and the holder keeps its lock. */
    expect_code(&r, &c, 1);
    expect_one_line(&r, &c, "dblock", NULL);
    tu_sleep_ms(700);
    if (exists(h.marker))
      fail_msg("[%s %s] the child got SIGTERM although force-unlock was refused", be, st);
    if (exited(&h.p))
      fail_msg("[%s %s] `%s` ended although force-unlock was refused; stderr: %s", be, st,
               h.p.cmd, slurp(h.p.err_path));
    expect_busy(b, st, name);
    unhold(&h);
    return;
  }
  expect_code(&r, &c, 0);
  {
    long long nf = 0;
    int len = 0;
    if (sscanf(r.out, "fence=%lld\n%n", &nf, &len) != 1 || (size_t)len != strlen(r.out))
      fail_msg("`%s`: expected 'fence=N', got: %s", cmdline(&c), r.out);
    if (nf <= h.fence)
      fail_msg("[%s %s] force-unlock gave fence %lld, not above the holder's %lld", be, st, nf,
               h.fence);
    r = finish(&h.p, 10000);
    if (r.code != 4)
      fail_msg("[%s %s] `%s`: expected exit 4 (lock lost) after force-unlock, got %d; stderr: %s",
               be, st, h.p.cmd, r.code, r.err);
    {
      char *m = slurp(h.marker);
      if (!m || strcmp(m, "TERM\n") != 0)
        fail_msg("[%s %s] the child did not get SIGTERM (marker: %s)", be, st, m ? m : "none");
    }
    /* The name is free; the next grant's fence is above the forced one. */
    h = hold(b, st, name, NULL, NULL, HOLD_SCRIPT);
    if (h.fence <= nf)
      fail_msg("[%s %s] fence after force-unlock %lld is not above %lld", be, st, h.fence, nf);
    unhold(&h);
  }
}

/* ---- tests: `dblock run` supervises a process group ---------------------- */

/* The child records its process group ($1.pg), then runs a pipeline whose
 * members are not the shell itself: the case where signalling only the
 * shell leaves work running outside the lock. */
#define PGREC "cut -d' ' -f5 /proc/$$/stat > \"$1.pg\"; "
static const char GROUP_SCRIPT[] = PGREC READY "sleep 100 | cat";

/* Live (not zombie) processes whose process group is pg. */
static int group_members(long pg) {
  DIR *d = opendir("/proc");
  struct dirent *de;
  int n = 0;
  if (!d) fail_msg("cannot read /proc");
  while ((de = readdir(d)) != NULL) {
    char path[300], buf[512], *rp, state;
    long pgrp;
    FILE *f;
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
    if (!(f = fopen(path, "r"))) continue;
    if (fgets(buf, sizeof buf, f) && (rp = strrchr(buf, ')')) &&
        sscanf(rp + 2, "%c %*d %ld", &state, &pgrp) == 2 && pgrp == pg && state != 'Z')
      n++;
    fclose(f);
  }
  closedir(d);
  return n;
}

/* Waits up to ms for process group pg to be empty; returns what is left. */
static int group_gone_within(long pg, int64_t ms) {
  int64_t end = tu_now_ms() + ms;
  int n;
  while ((n = group_members(pg)) > 0 && tu_now_ms() < end) tu_sleep_ms(20);
  return n;
}

/* The command's process group, once its pipeline runs (sh, sleep, cat:
 * at least 3 members besides the guardian that leads it). */
static long holder_group(const holder *h) {
  char *s = wait_file(tfmt("%s.pg", h->ready), &h->p, 5000);
  long pg = strtol(s, NULL, 10);
  int64_t end = tu_now_ms() + 5000;
  if (pg <= 1) fail_msg("bad process group '%s'", s);
  while (group_members(pg) < 3 && tu_now_ms() < end) tu_sleep_ms(10);
  if (group_members(pg) < 3) {
    /* Say what became of `dblock run` (a supervisor that died takes the
     * group with it, by its guardian). */
    const char *err = slurp(h->p.err_path);
    fail_msg("expected sh, sleep and cat in group %ld (%d there); `dblock run` %s; its stderr: %s",
             pg, group_members(pg), exited(&h->p) ? "has exited" : "still runs",
             err ? err : "(none)");
  }
  return pg;
}

/* The lock is lost (force-unlock) while `dblock run` runs a pipeline: the
 * whole process group gets SIGTERM, so no member survives (exit 4). */
static void t_run_group_lost(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("group");
  /* (a lease of 6 s: the loss is seen at the next renewal, at most 2 s
   * away. `dblock run` declares its lock lost half a lease after the last
   * confirmation, a renewal goes out every third of one: with 1 s, a
   * renewal 167 ms late lost the lock on a loaded TSan run before the
   * pipeline was counted; with 6 s it may be 1 s late) */
  holder h = hold(b, "insert", name, "6s", NULL, GROUP_SCRIPT);
  long pg = holder_group(&h);
  cmdv c = dblock_cmd(b->url, "insert");
  result r;
  int left;
  cv_addl(&c, "force-unlock", name, NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  r = finish(&h.p, 10000);
  if (r.code != 4) fail_msg("`%s`: expected exit 4 (lost), got %d; stderr: %s", h.p.cmd, r.code, r.err);
  if ((left = group_gone_within(pg, 3000)) != 0)
    fail_msg("[%s] %d process(es) of the command's group still run 3 s after the lock was lost", be,
             left);
}

/* `dblock run` itself is SIGKILLed (OOM killer): every process of its
 * command is gone within 3 s. for_update, where the name is free the
 * moment the supervisor's session dies: another run gets it, and by then
 * nothing of the first command may still run. */
static void t_run_supervisor_killed(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("orphan");
  holder h = hold(b, "for_update", name, NULL, NULL, GROUP_SCRIPT);
  long pg = holder_group(&h);
  int left;
  cmdv c;
  result r;
  kill(h.p.pid, SIGKILL);
  /* (an orphan would run on for good: 3 s leaves a loaded host room to
   * schedule the guardian and deliver its signals) */
  if ((left = group_gone_within(pg, 3000)) != 0)
    fail_msg("[%s] %d process(es) of the command outlived `dblock run` by 3 s", be, left);
  c = dblock_cmd(b->url, "for_update");
  cv_addl(&c, "run", "--wait", "5s", name, "--", "true", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
}

/* A `dblock run --wait forever` waiting for a busy name ends on SIGINT
 * (exit 130) and SIGTERM (exit 143) within 3 s (the bug waited for good;
 * a sanitizer build's exit alone can take a few hundred ms), without running its
 * command and without taking the name from its holder: polling (insert)
 * and waiting in the server (for_update). (It used to die by the signal,
 * leaving nothing to tell the caller it held nothing.) */
static void t_run_wait_interrupted(const char *be) {
  static const char *const st[] = {"insert", "for_update"};
  static const int sigs[] = {SIGINT, SIGTERM};
  const tu_backend *b = migrated(be);
  for (int k = 0; k < 2; k++) {
    const char *name = tname("intr");
    holder h = hold(b, st[k], name, NULL, NULL, HOLD_SCRIPT);
    for (int i = 0; i < 2; i++) {
      const char *ran = tpath("ran");
      cmdv c = dblock_cmd(b->url, st[k]);
      proc p;
      result r;
      int64_t t0;
      cv_addl(&c, "run", name, "--wait", "forever", "--", "sh", "-c", "touch \"$1\"", "sh", ran,
              NULL);
      p = start(&c);
      await_handler(p.pid, sigs[i], 10000); /* (set just before the acquire) */
      tu_sleep_ms(700); /* connected and waiting */
      if (exited(&p)) fail_msg("[%s %s] `%s` ended before the signal", be, st[k], p.cmd);
      t0 = tu_now_ms();
      kill(p.pid, sigs[i]);
      r = finish(&p, 5000);
      expect_code(&r, &c, 128 + sigs[i]);
      if (tu_now_ms() - t0 > 3000)
        fail_msg("[%s %s] `%s` took %lld ms to end after signal %d", be, st[k], p.cmd,
                 (long long)(tu_now_ms() - t0), sigs[i]);
      if (exists(ran)) fail_msg("[%s %s] `%s` ran its command after the signal", be, st[k], p.cmd);
      if (!strstr(r.err, "interrupted"))
        fail_msg("[%s %s] `%s`: stderr does not say it was interrupted: %s", be, st[k], p.cmd, r.err);
    }
    unhold(&h); /* the holder kept the name throughout */
  }
}

/* `run --min-hold`: host A's job ends at once but keeps the name for the
 * minimum hold, so host B's copy of the job scheduled a moment later
 * (--wait 0, as cron jobs on several hosts) is busy and does not run;
 * after the hold B's runs. A exits with its command's status, no sooner
 * than the hold. (Without --min-hold B ran the job a second time.) */
static void t_min_hold(const char *be) {
  const tu_backend *b = migrated(be);
  for (int s = 0; s < NSTRATEGIES; s++) {
    const char *st = STRATEGIES[s], *name = tname("once"), *ran = tpath("ranA");
    cmdv c = dblock_cmd(b->url, st);
    proc pa;
    result r;
    cmdv cb = dblock_cmd(b->url, st);
    const char *ranb = tpath("ranB");
    result rb;
    /* (B's run and the status after it must both fit in the hold: each
     * starts a program, which takes a while in the sanitizer trees) */
    int64_t min_ms = tu_bound(TB_CLI_HOLD);
    const char *min_hold = tfmt("%llds", (long long)(min_ms / 1000));
    cv_addl(&c, "--owner-host", "host-a", "run", name, "--wait", "0", "--min-hold", min_hold, "--",
            "sh", "-c", "touch \"$1\"; exit 7", "sh", ran, NULL);
    pa = start(&c);
    wait_file(ran, &pa, 15000);
    tu_sleep_ms(200); /* A's command has ended */
    /* host B's copy of the job, a moment later: busy, does not run */
    cv_addl(&cb, "--owner-host", "host-b", "run", name, "--wait", "0", "--", "sh", "-c",
            "touch \"$1\"", "sh", ranb, NULL);
    rb = run(&cb, 15000);
    expect_code(&rb, &cb, 3);
    if (exists(ranb)) fail_msg("[%s %s] host B ran the job during A's minimum hold", be, st);
    {
      status_info si = status_json(b, st, name);
      if (!si.held || strcmp(si.owner_host, "host-a") != 0)
        fail_msg("[%s %s] during A's minimum hold: held %d by '%s' (want host-a)", be, st, si.held,
                 si.owner_host);
    }
    r = finish(&pa, 15000);
    expect_code(&r, &c, 7);
    if (r.ms < min_ms)
      fail_msg("[%s %s] `%s` ended after %lld ms, before its %s minimum hold", be, st, pa.cmd,
               (long long)r.ms, min_hold);
    {
      cmdv c2;
      result r2 = try_run(b, st, name, "0", NULL, &c2);
      expect_code(&r2, &c2, 0);
    }
  }
}

/* `dblock stats`: a held lock shows in the gauges, as JSON and as
 * OpenMetrics text (the held line for its strategy, "# EOF" last). */
static void t_stats(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("stats");
  holder h = hold(b, "optimistic", name, NULL, NULL, HOLD_SCRIPT);
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  json_object *v, *bys, *opt;
  long long held, rows;
  char *line, *end;
  cv_addl(&c, "stats", "--json", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  v = jparse(r.out, cmdline(&c));
  rows = jint(v, "rows", r.out);
  held = jint(v, "held", r.out);
  if (held < 1 || rows < held || jint(v, "free", r.out) != rows - held)
    fail_msg("`%s`: inconsistent counts: %s", cmdline(&c), r.out);
  if (!(bys = jget(v, "by_strategy")) || !(opt = jget(bys, "optimistic")) ||
      jint(opt, "held", r.out) < 1)
    fail_msg("`%s`: the held optimistic lock is not counted: %s", cmdline(&c), r.out);
  if (jint(v, "max_fence", r.out) < h.fence) fail_msg("`%s`: max_fence below %lld", cmdline(&c), h.fence);
  c = dblock_cmd(b->url, NULL);
  cv_addl(&c, "stats", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  line = strstr(r.out, "dblock_locks{table=\"" TABLE "\",strategy=\"optimistic\",state=\"held\"} ");
  if (!line || strtoll(strchr(line, '}') + 2, &end, 10) < 1 || *end != '\n')
    fail_msg("`%s`: no held optimistic gauge >= 1 in:\n%s", cmdline(&c), r.out);
  if (strlen(r.out) < 6 || strcmp(r.out + strlen(r.out) - 6, "# EOF\n") != 0)
    fail_msg("`%s`: OpenMetrics text must end with # EOF:\n%s", cmdline(&c), r.out);
  unhold(&h);
}

/* Applies golang-migrate file dir/NNNNNN_*.<dir_suffix>.sql through the
 * test's own connection: what another migration tool would do. */
static void apply_file(const tu_backend *b, const char *dir, int version, const char *kind) {
  DIR *d = opendir(dir);
  struct dirent *de;
  char prefix[16], suffix[16];
  const char *path = NULL;
  snprintf(prefix, sizeof prefix, "%06d_", version);
  snprintf(suffix, sizeof suffix, ".%s.sql", kind);
  if (!d) fail_msg("cannot open %s", dir);
  while ((de = readdir(d)) != NULL) {
    size_t n = strlen(de->d_name);
    if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 && n > strlen(suffix) &&
        strcmp(de->d_name + n - strlen(suffix), suffix) == 0)
      path = tfmt("%s/%s", dir, de->d_name);
  }
  closedir(d);
  if (!path) fail_msg("no %s%s in %s", prefix, suffix, dir);
  tu_sql(b->url, slurp(path), NULL);
}

/* Another tool applied dblock's migrations (the golang-migrate layout,
 * written for this table by tools/export-migrations.sh, as `make` does for
 * the default one): `migrate --baseline` adopts what is there without
 * running it, `migrate` applies the rest, and locks work. On an empty
 * database --baseline refuses (exit 1) and creates nothing. The downs undo
 * everything. (Before, `dblock migrate` failed on such a schema: "table
 * already exists".) */
/* How many migrations the tree ships for backend be. */
static int migration_count(const char *be) {
  glob_t g;
  int n;
  if (glob(tfmt("migrations/%s/0*.sql", be), 0, NULL, &g) != 0) fail_msg("no migrations for %s", be);
  n = (int)g.gl_pathc;
  globfree(&g);
  return n;
}

static void t_baseline(const char *be) {
  const tu_backend *b = backend(be, NULL);
  const char *t = tfmt("bl_%d_%d", (int)getpid(), next_seq()), *dir = tpath("mig");
  const char *gm = tfmt("%s/golang-migrate/%s", dir, be);
  cmdv c;
  result r;
  json_object *v;
  int rc, total = migration_count(be);
  rc = system(tfmt("sh tools/export-migrations.sh migrations '%s' '%s' >/dev/null", dir, t));
  if (rc != 0) fail_msg("tools/export-migrations.sh failed (%d)", rc);
  if (!exists(tfmt("%s/flyway/%s/V1__lock_table.sql", dir, be)))
    fail_msg("no Flyway layout under %s", dir);
  c = table_cmd(b, t);
  cv_addl(&c, "migrate", "--baseline", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 1);
  if (!strstr(r.err, "dblock migrate")) fail_msg("`%s`: unclear error: %s", cmdline(&c), r.err);
  c = table_cmd(b, t);
  cv_addl(&c, "migrate", "--status", "--json", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (strstr(r.out, "true")) fail_msg("`%s`: a refused baseline recorded something: %s", cmdline(&c), r.out);

  apply_file(b, gm, 1, "up");
  apply_file(b, gm, 2, "up");
  c = table_cmd(b, t);
  cv_addl(&c, "migrate", "--baseline", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (strncmp(r.out, "recorded 2 migrations", 21) != 0)
    fail_msg("`%s`: expected 2 recorded: %s", cmdline(&c), r.out);
  c = table_cmd(b, t);
  cv_addl(&c, "migrate", "--status", "--json", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  v = jget(jparse(r.out, cmdline(&c)), "migrations");
  if (!json_object_is_type(v, json_type_array) || (int)jlen(v) != total ||
      !jbool(jat(v, 0), "applied", r.out) || !jbool(jat(v, 1), "applied", r.out) ||
      jbool(jat(v, 2), "applied", r.out) || !jbool(jat(v, 0), "checksum_ok", r.out))
    fail_msg("`%s`: expected 1, 2 applied (checksums ok) and 3..%d pending: %s", cmdline(&c),
             total, r.out);
  c = table_cmd(b, t);
  cv_add(&c, "migrate");
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (strncmp(r.out, tfmt("applied %d migration", total - 2), strlen(tfmt("applied %d migration", total - 2))) != 0)
    fail_msg("`%s`: expected the %d pending migrations applied: %s", cmdline(&c), total - 2, r.out);
  c = table_cmd(b, t);
  cv_addl(&c, "run", "--wait", "0", "baseline-job", "--", "true", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  /* the downs, newest first, leave no lock table */
  for (int k = total; k >= 1; k--) apply_file(b, gm, k, "down");
  c = table_cmd(b, t);
  cv_addl(&c, "status", "baseline-job", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 1);
  if (!strstr(r.err, "migrate")) fail_msg("`%s`: after the downs: %s", cmdline(&c), r.err);
  tu_sql(b->url, tfmt("DROP TABLE %s_migrations", t), NULL);
}

/* A name used with for_update, then wanted with insert: the wrong
 * --strategy exits 2 (a usage problem, not a database error) and the
 * message says `dblock forget`; forget hands the free name over, and a
 * held one is refused with 3. (It used to exit 1, with no way out but
 * deleting the row by hand.) */
static void t_forget(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("handover");
  cmdv c = dblock_cmd(b->url, "for_update");
  result r;
  holder h;
  cv_addl(&c, "run", name, "--", "true", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  r = try_run(b, "insert", name, "0", NULL, &c);
  expect_code(&r, &c, 2);
  if (!strstr(r.err, "dblock forget")) fail_msg("`%s`: no hint: %s", cmdline(&c), r.err);
  h = hold(b, "for_update", name, NULL, NULL, HOLD_SCRIPT);
  c = dblock_cmd(b->url, NULL);
  cv_addl(&c, "forget", name, NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 3);
  unhold(&h);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  r = try_run(b, "insert", name, "0", NULL, &c);
  expect_code(&r, &c, 0);
}

/* No database connection of the supervisor leaks into the command. */
static void t_run_no_socket(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("fds");
  const char *out = tpath("fds");
  cmdv c = dblock_cmd(b->url, "for_update");
  result r;
  char *fds;
  cv_addl(&c, "run", name, "--", "sh", "-c", "ls -l /proc/$$/fd/ > \"$1\"", "sh", out, NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  fds = slurp(out);
  if (!fds) fail_msg("no fd list from the child");
  if (strstr(fds, "socket:"))
    fail_msg("[%s] the command inherited a socket from dblock run:\n%s", be, fds);
}

/* ---- tests: list --json ------------------------------------------------- */

/* dblock doctor --json on a stand-alone test server: valid JSON, ok, and
 * the findings an operator needs: topology ok, the schema fully applied.
 * The replicated topologies' findings are in test_topology. */
static void t_doctor(const char *be) {
  const tu_backend *b = migrated(be);
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  json_object *v, *f;
  int topo = 0, schema = 0, conns = 0, server = strcmp(be, "sqlite") != 0;
  cv_addl(&c, "doctor", "--json", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  v = jparse(r.out, cmdline(&c));
  if (!jbool(v, "ok", r.out)) fail_msg("`%s`: not ok: %s", cmdline(&c), r.out);
  if (!json_object_is_type(f = jget(v, "findings"), json_type_array) || jlen(f) < 4)
    fail_msg("`%s`: no findings array: %s", cmdline(&c), r.out);
  for (size_t k = 0; k < jlen(f); k++) {
    const char *topic = jstr(jat(f, k), "topic", r.out), *sev = jstr(jat(f, k), "severity", r.out);
    topo |= strcmp(topic, "topology") == 0 && strcmp(sev, "ok") == 0;
    schema |= strcmp(topic, "schema") == 0 && strcmp(sev, "ok") == 0 &&
              strstr(jstr(jat(f, k), "text", r.out), "migrations applied") != NULL;
    /* (the sizing rule against the server's limit: docs/waiting.md) */
    conns |= strcmp(topic, "connections") == 0 &&
             strstr(jstr(jat(f, k), "text", r.out), "of max_connections") != NULL &&
             strstr(jstr(jat(f, k), "text", r.out), "pool_size") != NULL;
  }
  if (!topo || !schema)
    fail_msg("`%s`: expected an ok topology and an ok schema finding: %s", cmdline(&c), r.out);
  if (conns != server)
    fail_msg("`%s`: expected %s connections finding: %s", cmdline(&c), server ? "a" : "no",
             r.out);
}

static void t_list_json(const char *be) {
  const tu_backend *b = migrated(be);
  /* Quote, backslash, tab and non-ASCII: the JSON must escape them. */
  const char *name = tfmt("%s \"q\" \\b\\\t\xc3\xa9\xe2\x9c\x93", tname("list"));
  holder h = hold(b, NULL, name, NULL, NULL, HOLD_SCRIPT);
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  json_object *v, *mine = NULL;
  cv_addl(&c, "list", "--json", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  v = jparse(r.out, cmdline(&c));
  /* (every --json output is an object whose first key is the version) */
  static const char lead[] = "{\"version\":\"" DBLOCK_VERSION_STRING "\",";
  if (strncmp(r.out, lead, sizeof lead - 1) != 0)
    fail_msg("`%s`: no leading \"version\" key: %s", cmdline(&c), r.out);
  v = jget(v, "locks");
  if (!json_object_is_type(v, json_type_array))
    fail_msg("`%s`: no \"locks\" array: %s", cmdline(&c), r.out);
  for (size_t k = 0; k < jlen(v); k++) {
    json_object *row = jat(v, k), *nm = jget(row, "name");
    if (!json_object_is_type(row, json_type_object))
      fail_msg("`%s`: item %zu is not an object", cmdline(&c), k);
    if (json_object_is_type(nm, json_type_string) && strcmp(json_object_get_string(nm), name) == 0)
      mine = row;
  }
  if (!mine) fail_msg("`%s`: the held lock '%s' is not listed: %s", cmdline(&c), name, r.out);
  if (!jbool(mine, "held", "list"))
    fail_msg("`%s`: the held lock is listed as not held", cmdline(&c));
  if (strcmp(jstr(mine, "owner_host", "list"), host_name()) != 0)
    fail_msg("`%s`: owner_host '%s', expected '%s'", cmdline(&c), jstr(mine, "owner_host", "list"),
             host_name());
  if (jint(mine, "owner_pid", "list") != (long long)h.p.pid)
    fail_msg("`%s`: owner_pid %lld, expected %ld (the dblock run process)", cmdline(&c),
             jint(mine, "owner_pid", "list"), (long)h.p.pid);
  if (jint(mine, "fence", "list") != h.fence)
    fail_msg("`%s`: fence %lld, expected DBLOCK_FENCE %lld", cmdline(&c),
             jint(mine, "fence", "list"), h.fence);
  if (strcmp(jstr(mine, "strategy", "list"), "insert") != 0)
    fail_msg("`%s`: strategy %s", cmdline(&c), jstr(mine, "strategy", "list"));
  if (jint(mine, "hold_count", "list") != 1)
    fail_msg("`%s`: hold_count %lld", cmdline(&c), jint(mine, "hold_count", "list"));
  /* status --json of the same name parses too. */
  status_json(b, NULL, name);
  unhold(&h);
}

/* run --fair: on PostgreSQL with insert / optimistic a fair waiter queues
 * and is granted when the holder ends; everywhere else --fair is a usage
 * error (exit 2, one line naming --fair) and runs nothing. */
static void t_run_fair(const char *be) {
  const tu_backend *b = migrated(be);
  for (int s = 0; s < NSTRATEGIES; s++) {
    const char *st = STRATEGIES[s], *name = tname("fair"), *ran = tpath("fair-ran");
    cmdv c = dblock_cmd(b->url, st);
    cv_addl(&c, "run", name, "--fair", "--", "sh", "-c", "touch \"$1\"", "sh", ran, NULL);
    if (strcmp(be, "postgres") != 0 || strcmp(st, "for_update") == 0) {
      expect_usage(&c, "dblock", "--fair");
      if (exists(ran)) fail_msg("[%s %s] `%s` was refused but ran its command", be, st, cmdline(&c));
      continue;
    }
    {
      holder h = hold(b, st, name, NULL, NULL, HOLD_SCRIPT);
      proc p = start(&c);
      result r;
      tu_sleep_ms(300);
      if (exists(ran)) fail_msg("[%s %s] `%s` ran while the name was held", be, st, cmdline(&c));
      unhold(&h);
      r = finish(&p, 10000);
      expect_code(&r, &c, 0);
      if (!exists(ran)) fail_msg("[%s %s] `%s` exited 0 but did not run", be, st, cmdline(&c));
    }
  }
}

/* ---- tests: usage errors ------------------------------------------------ */

/* dblock ARGS... (after --url sqlite... when url) must be a usage error. */
static void usage_case(int with_url, const char *mention, ...) {
  cmdv c = {{NULL}, 0};
  va_list ap;
  const char *s;
  cv_add(&c, tfmt("%s/dblock", tu_tree()));
  if (with_url) cv_addl(&c, "--url", lite_url(), NULL);
  va_start(ap, mention);
  while ((s = va_arg(ap, const char *)) != NULL) cv_add(&c, s);
  va_end(ap);
  expect_usage(&c, "dblock", mention);
}

static void t_usage_unknown_command(void) {
  usage_case(1, "frobnicate", "frobnicate", NULL);
  usage_case(1, "frobnicate", "frobnicate", "NAME", NULL);
  usage_case(1, "frobnicate", "help", "frobnicate", NULL);
  usage_case(1, NULL, NULL); /* no command at all */
}

static void t_usage_unknown_option(void) {
  usage_case(1, "--frobnicate", "--frobnicate", "list", NULL);
  usage_case(1, "--frobnicate", "list", "--frobnicate", NULL);
  usage_case(1, "-x", "-x", "status", "n", NULL);
  usage_case(1, "--frobnicate", "run", "n", "--frobnicate", "--", "true", NULL);
  usage_case(1, "--token", "list", "--token", "x", NULL); /* not an option of list */
  usage_case(0, "--url", "list", "--url", NULL);          /* needs a value */
  usage_case(1, "abc", "-E", "abc", "run", "n", "--", "true", NULL);
}

static void t_usage_missing_name(void) {
  usage_case(1, NULL, "status", NULL);
  usage_case(1, NULL, "force-unlock", NULL);
  usage_case(1, NULL, "acquire", NULL);
  usage_case(1, NULL, "run", "--", "sh", "-c", "exit 0", NULL);
}

static void t_usage_run_without_dashdash(void) {
  const char *ran = tpath("ran");
  usage_case(1, "--", "run", "n", "touch", ran, NULL);
  usage_case(1, "--", "run", "n", NULL);
  usage_case(1, NULL, "run", "n", "--", NULL); /* nothing after "--" */
  if (exists(ran)) fail_msg("a usage error ran the command");
}

static void t_usage_bad_duration(void) {
  usage_case(1, "10parsecs", "--lease", "10parsecs", "run", "n", "--", "true", NULL);
  usage_case(1, "abc", "run", "n", "--wait", "abc", "--", "true", NULL);
  usage_case(1, "--wait", "acquire", "n", "--wait", "", NULL);
  usage_case(1, "--lease", "acquire", "n", "--lease", "-5", NULL);
  usage_case(1, "--lease", "run", "n", "--lease", "50ms", "--", "true", NULL); /* < 100ms */
  usage_case(1, "xyz", "run", "n", "--kill-after", "xyz", "--", "true", NULL);
}

static void t_usage_bad_strategy(void) {
  usage_case(1, "mutex", "--strategy", "mutex", "run", "n", "--", "true", NULL);
  usage_case(1, "mutex", "status", "n", "--strategy", "mutex", NULL);
  usage_case(1, "strategy", "--strategy", "", "list", NULL);
}

static void t_usage_no_url(void) {
  const char *ran = tpath("ran");
  if (getenv("DBLOCK_URL")) fail_msg("DBLOCK_URL should have been unset by main()");
  usage_case(0, "URL", "list", NULL);
  usage_case(0, "URL", "migrate", NULL);
  usage_case(0, "URL", "status", "n", NULL);
  usage_case(0, "URL", "run", "n", "--", "touch", ran, NULL);
  usage_case(0, "URL", "--url", "", "list", NULL);
  if (exists(ran)) fail_msg("run without a URL ran the command");
}

static void t_usage_bad_url(void) {
  usage_case(0, "bogus", "--url", "bogus://x", "list", NULL);
  usage_case(0, "port", "--url", "postgres://u:pw@127.0.0.1:notaport/db", "list", NULL);
  usage_case(0, "port", "--url", "mysql://u@127.0.0.1:99999/db", "status", "n", NULL);
}

/* ---- tests: dblock-reaper ---------------------------------------------- */

/* Parses "deleted N expired lock row(s) in X.XXX s\n". */
static long long reaper_count(const result *r, const cmdv *c) {
  long long n = -1;
  double secs = -1;
  int len = 0;
  if (sscanf(r->out, "deleted %lld expired lock row%*[s] in %lf s\n%n", &n, &secs, &len) != 2 &&
      sscanf(r->out, "deleted %lld expired lock row in %lf s\n%n", &n, &secs, &len) != 2)
    fail_msg("`%s`: expected 'deleted N expired lock rows in X s', got: %s", cmdline(c), r->out);
  if ((size_t)len != strlen(r->out) || n < 0 || secs < 0)
    fail_msg("`%s`: unexpected output: %s", cmdline(c), r->out);
  return n;
}

static void t_reaper_once(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("reap");
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  json_object *v;
  /* An expired row: acquired with a short lease that is never renewed.
   * (1 s: the acquire must answer before the lease's loss deadline, 900 ms
   * on; with 300 ms, 200 ms, which a loaded host can overrun.) */
  cv_addl(&c, "acquire", name, "--lease", "1s", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  if (strncmp(r.out, "fence=", 6) != 0 || !strstr(r.out, "\ntoken="))
    fail_msg("`%s`: unexpected output: %s", cmdline(&c), r.out);
  tu_sleep_ms(1300);

  c = reaper_cmd();
  cv_addl(&c, "--once", "--url", b->url, "--table", TABLE, NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (reaper_count(&r, &c) < 1) fail_msg("`%s` deleted nothing: %s", cmdline(&c), r.out);
  if (*r.err) fail_msg("`%s`: unexpected stderr: %s", cmdline(&c), r.err);

  /* The row is gone: the name is free. status answers (exit 0), and with
   * --json says there is no row. */
  c = dblock_cmd(b->url, NULL);
  cv_addl(&c, "status", name, NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  if (!strstr(r.out, "held:       no (no lock row"))
    fail_msg("`%s`: unexpected output: %s", cmdline(&c), r.out);
  c = dblock_cmd(b->url, NULL);
  cv_addl(&c, "status", name, "--json", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  v = jparse(r.out, cmdline(&c));
  if (jbool(v, "row", r.out) || jbool(v, "held", r.out))
    fail_msg("`%s`: expected row false, held false: %s", cmdline(&c), r.out);

  /* --json: one object per pass; --quiet: nothing on stdout. */
  c = reaper_cmd();
  cv_addl(&c, "--once", "--json", "--url", b->url, "--table", TABLE, NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  v = jparse(r.out, cmdline(&c));
  if (!jbool(v, "ok", r.out) || jint(v, "deleted", r.out) < 0)
    fail_msg("`%s`: unexpected output: %s", cmdline(&c), r.out);
  c = reaper_cmd();
  cv_addl(&c, "--once", "--quiet", "--url", b->url, "--table", TABLE, NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (*r.out) fail_msg("`%s` printed: %s", cmdline(&c), r.out);
}

/* A held for_update lock is never reaped, and must not stop the reaper from
 * deleting the expired rows around it. A table of its own, so that expired
 * rows are most of it (as after a crash of many holders): on MariaDB that
 * makes the DELETE scan the whole table, locked for_update row included. */
#define EXPIRED_ROWS 20
static void t_reaper_for_update_held(const char *be) {
  const tu_backend *b = backend(be, NULL);
  const char *table = "cli_reap_fu", *name = tname("reapfu");
  cmdv c = {{NULL}, 0};
  proc p[EXPIRED_ROWS];
  holder h;
  result r;
  long long n;
  cv_add(&c, tfmt("%s/dblock", tu_tree()));
  cv_addl(&c, "--url", b->url, "--table", table, "migrate", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  for (int k = 0; k < EXPIRED_ROWS; k++) {
    cmdv a = {{NULL}, 0};
    cv_add(&a, c.v[0]);
    cv_addl(&a, "--url", b->url, "--table", table, "acquire", tfmt("%s-exp%d", name, k),
            "--lease", "2s", NULL); /* (20 at once: 1.9 s to answer, see t_reaper_once) */
    p[k] = start(&a);
  }
  for (int k = 0; k < EXPIRED_ROWS; k++) {
    r = finish(&p[k], 30000);
    if (r.code != 0) fail_msg("`%s` exited %d; stderr: %s", p[k].cmd, r.code, r.err);
  }
  {
    /* The holder, in the same table. */
    cmdv hc = {{NULL}, 0};
    h.ready = tpath("ready");
    h.stop = tpath("stop");
    cv_add(&hc, c.v[0]);
    cv_addl(&hc, "--url", b->url, "--table", table, "--strategy", "for_update", "run", name, "--",
            "sh", "-c", HOLD_SCRIPT, "sh", h.ready, h.stop, tpath("marker"), NULL);
    h.p = start(&hc);
    wait_file(h.ready, &h.p, 20000);
  }
  tu_sleep_ms(2200); /* the 2 s leases are over */
  c = reaper_cmd();
  cv_addl(&c, "--once", "--url", b->url, "--table", table, NULL);
  r = run(&c, 30000);
  if (r.code != 0)
    fail_msg("[%s] `%s` with a for_update lock held and %d expired rows: expected exit 0 "
             "(expired rows deleted, the held row kept), got %d after %lld ms\n  stdout: %s\n"
             "  stderr: %s",
             be, cmdline(&c), EXPIRED_ROWS, r.code, (long long)r.ms, r.out, r.err);
  n = reaper_count(&r, &c);
  if (n < EXPIRED_ROWS)
    fail_msg("[%s] `%s` deleted %lld rows, expected at least %d", be, cmdline(&c), n,
             EXPIRED_ROWS);
  if (exited(&h.p))
    fail_msg("[%s] the for_update holder ended during the reap; stderr: %s", be,
             slurp(h.p.err_path));
  {
    cmdv t = {{NULL}, 0};
    cv_add(&t, tfmt("%s/dblock", tu_tree()));
    cv_addl(&t, "--url", b->url, "--table", table, "--strategy", "for_update", "run", name,
            "--wait", "0", "--", "true", NULL);
    r = run(&t, 15000);
    expect_code(&r, &t, 3); /* still held */
  }
  unhold(&h);
}

static void t_reaper_missing_schema(const char *be) {
  const tu_backend *b = backend(be, NULL);
  cmdv c = reaper_cmd();
  result r;
  cv_addl(&c, "--once", "--url", b->url, "--table", "never_made", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 1);
  expect_one_line(&r, &c, "dblock-reaper", "never_made");
}

/* A TCP port on 127.0.0.1 that refuses connections: bound (so nobody else
 * takes it meanwhile) but not listening. */
static int closed_port(int *fd) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (*fd < 0 || bind(*fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(*fd, (struct sockaddr *)&a, &len) != 0)
    fail_msg("cannot bind a socket: %s", strerror(errno));
  return ntohs(a.sin_port);
}

static void t_reaper_unreachable(const char *be) {
  cmdv c = reaper_cmd();
  result r;
  int fd = -1;
  if (strcmp(be, "sqlite") == 0) {
    cv_addl(&c, "--once", "--url", tfmt("sqlite://%s/no-such-dir/x.db", scratch_dir()), NULL);
  } else {
    int port = closed_port(&fd);
    cv_addl(&c, "--once", "--url",
            tfmt("%s://dblock:secret-pw@127.0.0.1:%d/dblock",
                 strcmp(be, "postgres") == 0 ? "postgres" : "mysql", port),
            NULL);
  }
  r = run(&c, 30000);
  if (fd >= 0) close(fd);
  expect_code(&r, &c, 1);
  expect_one_line(&r, &c, "dblock-reaper", NULL);
}

/* A role that may only read: the reaper fails (exit 1, one line). There
 * is an expired row to delete: MariaDB checks the DELETE privilege only
 * when a DELETE runs, and with nothing expired the pass deletes nothing and
 * succeeds (the test once depended on rows other tests left behind). */
static void t_reaper_permission(const char *be) {
  const tu_backend *b = migrated(be);
  const char *ro = env_or_fail(strcmp(be, "postgres") == 0 ? "DBLOCK_TEST_PG_RO_URL"
                                                           : "DBLOCK_TEST_MY_RO_URL");
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  cv_addl(&c, "acquire", tname("reap-ro"), "--lease", "1s", NULL); /* (see t_reaper_once) */
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  tu_sleep_ms(1300);
  c = reaper_cmd();
  cv_addl(&c, "--once", "--url", ro, "--table", TABLE, NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 1);
  expect_one_line(&r, &c, "dblock-reaper", NULL);
}

static void reaper_usage(const char *mention, ...) {
  cmdv c = reaper_cmd();
  va_list ap;
  const char *s;
  va_start(ap, mention);
  while ((s = va_arg(ap, const char *)) != NULL) cv_add(&c, s);
  va_end(ap);
  expect_usage(&c, "dblock-reaper", mention);
}

static void t_reaper_bad_url(void) {
  reaper_usage("bogus", "--once", "--url", "bogus://x", NULL);
  reaper_usage("port", "--once", "--url", "postgres://u:pw@127.0.0.1:notaport/db", NULL);
  reaper_usage("port", "--once", "--url", "mysql://u@127.0.0.1:99999/db", NULL);
  reaper_usage(NULL, "--once", "--url", "not a url", NULL);
  reaper_usage("URL", "--once", NULL); /* none at all (DBLOCK_URL unset) */
}

static void t_reaper_needs_once_or_every(void) {
  const char *url = lite_url();
  reaper_usage(NULL, "--url", url, NULL);
  reaper_usage(NULL, "--url", url, "--once", "--every", "1s", NULL);
  reaper_usage("0", "--url", url, "--every", "0", NULL);
  reaper_usage("abc", "--url", url, "--every", "abc", NULL);
  reaper_usage("--frobnicate", "--url", url, "--once", "--frobnicate", NULL);
}

/* --every 10s: stops within 3 s of the signal (not at the end of its 10 s
 * sleep), with exit 0. */
static void t_reaper_every_stops(const char *be, int sig) {
  const tu_backend *b = migrated(be);
  cmdv c = reaper_cmd();
  proc p;
  result r;
  int64_t t0, deadline;
  char *out;
  cv_addl(&c, "--every", "10s", "--url", b->url, "--table", TABLE, NULL);
  p = start(&c);
  deadline = tu_now_ms() + 20000;
  /* Wait for the first pass, then signal it mid-sleep. */
  while (!(out = slurp(p.out_path)) || !strstr(out, "deleted ")) {
    if (exited(&p)) fail_msg("`%s` exited early; stderr: %s", p.cmd, slurp(p.err_path));
    if (tu_now_ms() > deadline) fail_msg("`%s`: no pass reported in 20 s", p.cmd);
    tu_sleep_ms(10);
  }
  tu_sleep_ms(300);
  t0 = tu_now_ms();
  kill(p.pid, sig);
  r = finish(&p, 10000);
  expect_code(&r, &c, 0);
  if (tu_now_ms() - t0 > 3000)
    fail_msg("`%s` took %lld ms to stop after signal %d", p.cmd, (long long)(tu_now_ms() - t0),
             sig);
  if (*r.err) fail_msg("`%s`: unexpected stderr: %s", p.cmd, r.err);
}

/* ---- the JSON checker checks itself ------------------------------------- */

/* json-c in strict mode, plus the checks it leaves out (json_c_leaves_out
 * in cli_harness.c): the cases after "json-c lets through" are the ones
 * json-c 0.16 alone accepts. */
static void t_json_checker(void) {
  static const char *const good[] = {
      "{}", "[]", " [ ] ", "0", "-0.5e+3", "\"\"", "null", "true",
      "[1,-2,3.25,1e9,true,false,null,\"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"]",
      "{\"a\":{\"b\":[{}]},\"c\":\"\xc3\xa9\"}",
      "-0", "0.0e-0", "1E+5", "\"\\\\u00zz\"", "\"\\u0000\"", "\"\xf4\x8f\xbf\xbf\"", "{}\n",
  };
  static const char *const bad[] = {
      "", "{", "[1,]", "{\"a\":1,}", "[1 2]", "{\"a\" 1}", "{a:1}", "01", "1.", "-",
      "+1", ".5", "1e", "nul", "True", "'x'", "\"\x01\"", "\"\\x\"", "\"\\ud800\"",
      "\"\\udc00\"", "\"\xff\"", "\"\xc3\"", "{} x", "[] []", "\"abc", "[\"a\"\n",
      /* json-c lets through: */
      "[1.]", "-.5", "1.e5", "00", "-01", "NaN", "[Infinity]", "{\"a\":NaN}", "\"\t\"",
      "[\"\\ud800x\"]", "\"\\ud800\\u0041\"", "\"\xc0\x80\"", "\"\xed\xa0\x80\"",
      "\"\xf4\x90\x80\x80\"",
  };
  for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
    const char *why = NULL;
    size_t where = 0;
    json_object *v;
    if (json_strict_parse(good[k], &v, &why, &where) != 0)
      fail_msg("JSON checker rejected valid %s: %s", good[k], why);
  }
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    const char *why = NULL;
    size_t where = 0;
    json_object *v;
    if (json_strict_parse(bad[k], &v, &why, &where) == 0)
      fail_msg("JSON checker accepted invalid [%s]", bad[k]);
  }
  {
    json_object *v = jparse("{\"s\":\"a\\u00e9\\ud83d\\ude00\",\"n\":1795299847430286}", "self");
    if (strcmp(jstr(v, "s", "self"), "a\xc3\xa9\xf0\x9f\x98\x80") != 0) fail_msg("bad decoding");
    if (jint(v, "n", "self") != 1795299847430286LL) fail_msg("bad integer");
  }
}

static void t_reaper_every_SIGTERM(const char *be) { t_reaper_every_stops(be, SIGTERM); }
static void t_reaper_every_SIGINT(const char *be) { t_reaper_every_stops(be, SIGINT); }

/* A SQLite database this user cannot write (the file and its directory
 * read-only; run as user nobody — root writes anything): list, status
 * and doctor still answer, reading it as it is (no -shm file could be
 * made: read immutable); a write is refused naming the file and the
 * directory. Before, every command failed ("attempt to write a readonly
 * database"). */
#define RUNUSER "/usr/sbin/runuser" /* (util-linux, as root) */
static void t_read_only_file(const char *be) {
  char dir[] = "/tmp/dblock-ro-XXXXXX";
  const char *url, *db;
  static const char *const reads[][2] = {{"list", NULL}, {"status", "ro-held"}, {"doctor", NULL}};
  cmdv c;
  result r;
  (void)be;
  assert_non_null(mkdtemp(dir));
  assert_int_equal(chmod(dir, 0755), 0);
  db = tfmt("%s/locks.db", dir);
  url = tfmt("sqlite://%s", db);
  c = dblock_cmd(url, NULL);
  cv_addl(&c, "migrate", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  c = dblock_cmd(url, NULL);
  cv_addl(&c, "acquire", "ro-held", "--lease", "5m", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  assert_int_equal(chmod(db, 0444), 0);
  assert_int_equal(chmod(dir, 0555), 0);
  for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
    c = (cmdv){{NULL}, 0};
    cv_addl(&c, RUNUSER, "-u", "nobody", "--", tfmt("%s/dblock", tu_tree()), "--url", url, "--table", TABLE,
            reads[i][0], reads[i][1], NULL);
    r = run(&c, 15000);
    if (r.code != 0 || !strstr(r.out, reads[i][0][0] == 'd' ? "schema" : "ro-held"))
      fail_msg("`%s` on a read-only file: exit %d, stdout '%s', stderr '%s'", cmdline(&c),
               r.code, r.out, r.err);
  }
  c = (cmdv){{NULL}, 0};
  cv_addl(&c, RUNUSER, "-u", "nobody", "--", tfmt("%s/dblock", tu_tree()), "--url", url, "--table", TABLE,
          "acquire", "other", "--wait", "0", NULL);
  r = run(&c, 15000);
  print_message("write as nobody: exit %d: %s", r.code, r.err);
  if (r.code == 0 || !strstr(r.err, db) || !strstr(r.err, tfmt("directory '%s'", dir)))
    fail_msg("`%s` on a read-only file: exit %d, stderr '%s' (want a refusal naming the file "
             "and its directory)",
             cmdline(&c), r.code, r.err);
  chmod(dir, 0755);
  assert_int_equal(system(tfmt("rm -rf '%s'", dir)), 0);
}

/* dblock run exports DBLOCK_CHECK_SQL, the fence check for the command's
 * own transaction, with the name in a form no server setting misreads:
 * for a name with a quote, a backslash and a space, the statement the
 * command saw, run in a transaction of another connection while the
 * command holds the lock (on PostgreSQL with standard_conforming_strings
 * off), returns its fence (docs/fenced-writes.md). */
static void t_run_check_sql(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tfmt("%s o'k\\x", tname("check-sql"));
  /* (the statement goes to the marker's path + ".sql") */
  holder h = hold(b, NULL, name, NULL, NULL,
                  "printf '%s' \"$DBLOCK_CHECK_SQL\" > \"$3.sql\"; " READY LOOP);
  char *sql = slurp(tfmt("%s.sql", h.marker)), code[6], msg[512];
  tu_app *app = tu_app_open(b->url, TABLE);
  if (strncmp(sql, "SELECT ", 7) != 0 || !strstr(sql, TABLE "_check("))
    fail_msg("[%s] DBLOCK_CHECK_SQL='%s'", be, sql);
  /* (PostgreSQL: the hex form means the same with backslash escapes on) */
  if (strcmp(be, "postgres") == 0 &&
      tu_app_exec(app, "SET standard_conforming_strings = off", code, msg) != 0)
    fail_msg("[%s] %s", be, msg);
  if (tu_app_exec(app, "BEGIN", code, msg) != 0 || tu_app_exec(app, sql, code, msg) != 0)
    fail_msg("[%s] `%s` in a transaction: [%s] %s", be, sql, code, msg);
  print_message("[%s] DBLOCK_CHECK_SQL=%s: passed while held\n", be, sql);
  tu_app_exec(app, "ROLLBACK", NULL, NULL);
  tu_app_close(app);
  unhold(&h);
}

/* ---- the test table ----------------------------------------------------- */

/* The backends a test runs on, in this order. */
static const char *const BACKENDS[] = {"sqlite", "postgres", "mysql"};
enum { SQLITE = 1, POSTGRES = 2, MYSQL = 4, SERVERS = POSTGRES | MYSQL, ALL = 7 };

/* One row: a test run once (test_NAME), once per backend in `on`
 * (test_NAME_BACKEND), or per backend and strategy
 * (test_NAME_BACKEND_STRATEGY). */
typedef struct cli_test {
  const char *name;
  void (*once)(void);
  void (*per_backend)(const char *be);
  void (*per_strategy)(const char *be, const char *st);
  unsigned on;
} cli_test;

#define ONCE(fn) {#fn, t_##fn, NULL, NULL, 0}
#define EACH(fn, on) {#fn, NULL, t_##fn, NULL, on}
#define EACH_STRATEGY(fn) {#fn, NULL, NULL, t_##fn, ALL}

static const cli_test TESTS[] = {
    ONCE(json_checker),
    EACH(migrate, ALL),
    EACH(no_overlap, ALL),
    EACH(busy, ALL),
    EACH_STRATEGY(keeps_lock),
    EACH_STRATEGY(force_unlock),
    EACH(run_group_lost, ALL),
    EACH(run_supervisor_killed, ALL),
    EACH(run_wait_interrupted, ALL),
    EACH(min_hold, ALL),
    EACH(stats, ALL),
    EACH(baseline, ALL),
    EACH(forget, ALL),
    EACH(run_no_socket, SERVERS),
    EACH(list_json, ALL),
    EACH(doctor, ALL),
    EACH(acquire_idiom, ALL),
    EACH(run_check_sql, ALL),
    EACH(read_only_file, SQLITE),
    EACH(run_fair, ALL),
    ONCE(usage_unknown_command),
    ONCE(usage_unknown_option),
    ONCE(usage_missing_name),
    ONCE(usage_run_without_dashdash),
    ONCE(usage_bad_duration),
    ONCE(usage_bad_strategy),
    ONCE(usage_no_url),
    ONCE(usage_bad_url),
    EACH(reaper_once, ALL),
    EACH(reaper_for_update_held, SERVERS),
    EACH(reaper_missing_schema, ALL),
    EACH(reaper_unreachable, ALL),
    EACH(reaper_permission, SERVERS),
    ONCE(reaper_bad_url),
    ONCE(reaper_needs_once_or_every),
    EACH(reaper_every_SIGTERM, ALL),
    EACH(reaper_every_SIGINT, SQLITE),
};

/* What one registered cmocka test runs (its initial state). */
typedef struct cli_case {
  const cli_test *t;
  const char *be, *st;
  char name[64];
} cli_case;

static void run_case(void **state) {
  const cli_case *c = *state;
  if (c->t->per_strategy) c->t->per_strategy(c->be, c->st);
  else if (c->t->per_backend) c->t->per_backend(c->be);
  else c->t->once();
}

#define MAX_CASES 128

int main(void) {
  static cli_case cases[MAX_CASES];
  size_t n = 0;
  if (cli_init() != 0) return 1;
  for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++) {
    const cli_test *t = &TESTS[i];
    for (int be = 0; be < 3; be++) {
      if (t->once ? be > 0 : !(t->on & (1u << be))) continue;
      if (!tu_backend_wanted(t->once ? NULL : BACKENDS[be])) continue;
      for (int st = 0; st < (t->per_strategy ? NSTRATEGIES : 1); st++) {
        cli_case *c = &cases[n];
        if (n == MAX_CASES) {
          fprintf(stderr, "test_cli: more than %d tests: raise MAX_CASES\n", MAX_CASES);
          return 1;
        }
        c->t = t;
        c->be = t->once ? NULL : BACKENDS[be];
        c->st = t->per_strategy ? STRATEGIES[st] : NULL;
        if (t->once) snprintf(c->name, sizeof c->name, "test_%s", t->name);
        else if (!c->st) snprintf(c->name, sizeof c->name, "test_%s_%s", t->name, c->be);
        else snprintf(c->name, sizeof c->name, "test_%s_%s_%s", t->name, c->be, c->st);
        n++;
      }
    }
  }
  {
    struct CMUnitTest tests[n];
    for (size_t k = 0; k < n; k++)
      tests[k] = (struct CMUnitTest){.name = cases[k].name, .test_func = run_case,
                                     .teardown_func = cli_teardown, .initial_state = &cases[k]};
    return cmocka_run_group_tests_name("cli", tests, cli_group_setup, cli_group_teardown);
  }
}
