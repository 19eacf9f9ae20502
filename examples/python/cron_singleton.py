#!/usr/bin/env python3
"""A cron job that must run on one machine of the fleet at a time.

Every host's crontab starts it at the same minute; the first to take the
lock runs the job, the others see it busy and exit 0 at once. The lease is
renewed while the job runs; if this process dies, the lock is free when
its lease ends (insert, optimistic) or at once (for_update).

    DBLOCK_URL=postgres://app@db/app python3 cron_singleton.py [seconds]
"""
import os
import socket
import sys
import time

import dblock


def nightly_report(lock: dblock.Lock, seconds: float) -> None:
    # The real work goes here. Pass lock.fence along with any write to a
    # resource that can check it (docs/fenced-writes.md).
    time.sleep(seconds)


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    with dblock.Client() as client:  # the URL from DBLOCK_URL
        client.migrate()  # (once per database; here so the example runs alone)
        try:
            with client.lock("nightly-report", wait=0) as lock:
                print("%s pid %d: running the report, fence %d"
                      % (socket.gethostname(), os.getpid(), lock.fence), flush=True)
                nightly_report(lock, seconds)
        except dblock.Busy:
            print("%s pid %d: another process runs the report; nothing to do"
                  % (socket.gethostname(), os.getpid()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
