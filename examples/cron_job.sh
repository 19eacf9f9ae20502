#!/bin/sh
# cron_job.sh — run a job on many hosts, once per schedule, with `dblock run`.
#
#   cron_job.sh NAME CMD [ARGS...]
#
# Put the same line in every host's crontab (cron's PATH is short: give
# absolute paths, or set DBLOCK to the dblock binary):
#
#   0 3 * * * DBLOCK_URL=postgres://locks@db/app /opt/app/cron_job.sh nightly-report /opt/app/report.sh
#
# The first host to start takes the lock NAME and runs CMD with DBLOCK_NAME
# and DBLOCK_FENCE in its environment; the lease is renewed while CMD runs,
# and CMD is killed if the lock is lost. The lock is held at least MIN_HOLD
# (default 50m, a little shorter than the schedule's period) even when CMD
# ends sooner, so hosts whose clock or cron starts a few seconds later find
# it busy and skip: the job runs once per schedule, not once per host.
#
# Exit status: CMD's; 0 when another host has the lock (skipped); dblock's
# own status otherwise (1 database error, 2 usage error, 4 lock lost while
# CMD ran: see dblock(1)).
set -u
DBLOCK=${DBLOCK:-dblock}
MIN_HOLD=${MIN_HOLD:-50m}
if [ "$#" -lt 2 ]; then
  echo "usage: $0 NAME CMD [ARGS...]   (DBLOCK_URL must be set)" >&2
  exit 2
fi
name=$1
shift
# --wait 0: never queue behind another host (it is running the job now).
"$DBLOCK" run "$name" --wait 0 --min-hold "$MIN_HOLD" -- "$@"
rc=$?
if [ "$rc" -eq 3 ]; then # busy: dblock's exit status for "held elsewhere"
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $(hostname): $name is running elsewhere: skipped"
  exit 0
fi
exit "$rc"
