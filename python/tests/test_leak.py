"""10,000 acquire/release cycles through Python keep the RSS flat."""
import os

import pytest


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# (make check-quick: SQLite's only, the quickest)
@pytest.mark.parametrize("backend", ["sqlite"] if os.environ.get("DBLOCK_TEST_QUICK")
                         else ["sqlite", "postgres", "mysql"])
def test_no_leak_over_10000_cycles(url, name, clients):
    c = clients(url)
    for _ in range(2000):  # (warm: pools, caches, the allocator's arenas)
        with c.lock(name, wait=0):
            pass
    before = rss()
    for _ in range(10000):
        with c.lock(name, wait=0) as lk:
            assert lk.fence
    grew = rss() - before
    print("RSS grew %d KiB over 10,000 cycles" % (grew // 1024))
    assert c.stats().grants == 12000
    assert grew < 2 * 1024 * 1024, "RSS grew %d KiB over 10,000 cycles" % (grew // 1024)
