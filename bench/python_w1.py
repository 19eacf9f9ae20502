#!/usr/bin/env python3
"""W1 from Python (BENCH.md): one client, one name, back-to-back
acquire + release cycles for a window; prints one JSON line.

    python_w1.py --subject dblock|tooz|redis-py --url URL [--strategy S]
                 [--warmup MS] [--window MS]

dblock: this binding (DBLOCK_LIBRARY, PYTHONPATH=python); tooz: OpenStack
tooz's coordinator lock (Debian's python3-tooz; PostgreSQL and MySQL
drivers); redis-py: redis.Redis.lock (Debian's python3-redis).
"""
import argparse
import json
import sys
import time
import uuid


def dblock_cycle(url, strategy):
    import dblock
    c = dblock.Client(url, strategy=strategy)
    c.migrate()
    lk = c.lock("bench-py-" + uuid.uuid4().hex[:8], wait=0)

    def cycle():
        lk.acquire(blocking=False) or sys.exit("dblock: busy")
        lk.release()
    return cycle


def tooz_cycle(url, strategy):
    from tooz import coordination
    url = url.replace("postgres://", "postgresql://", 1)
    coord = coordination.get_coordinator(url, uuid.uuid4().hex.encode())
    coord.start()
    lk = coord.get_lock(("bench-py-" + uuid.uuid4().hex[:8]).encode())

    def cycle():
        lk.acquire(blocking=False) or sys.exit("tooz: busy")
        lk.release()
    return cycle


def redis_cycle(url, strategy):
    import redis
    r = redis.Redis.from_url(url)
    lk = r.lock("bench-py-" + uuid.uuid4().hex[:8], timeout=30)

    def cycle():
        lk.acquire(blocking=False) or sys.exit("redis-py: busy")
        lk.release()
    return cycle


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--subject", required=True, choices=("dblock", "tooz", "redis-py"))
    ap.add_argument("--url", required=True)
    ap.add_argument("--strategy", default="insert")
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--window", type=int, default=10000)
    a = ap.parse_args()
    make = {"dblock": dblock_cycle, "tooz": tooz_cycle, "redis-py": redis_cycle}[a.subject]
    cycle = make(a.url, a.strategy)
    end = time.monotonic() + a.warmup / 1000
    while time.monotonic() < end:
        cycle()
    n, lat = 0, []
    start = time.monotonic()
    end = start + a.window / 1000
    while True:
        t = time.monotonic()
        if t >= end:
            break
        cycle()
        lat.append(time.monotonic() - t)
        n += 1
    took = time.monotonic() - start
    lat.sort()
    print(json.dumps({"subject": a.subject, "strategy": a.strategy, "workload": "W1",
                      "grants_per_s": round(n / took, 1),
                      "cycle_p50_ms": round(lat[len(lat) // 2] * 1000, 3),
                      "cycle_p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3),
                      "check": "ok" if n > 0 else "FAIL"}, separators=(",", ":")))


if __name__ == "__main__":
    main()
