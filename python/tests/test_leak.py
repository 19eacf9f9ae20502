"""10,000 acquire/release cycles through Python keep the RSS flat.

On SQLite with synchronous=NORMAL (no fsync per commit): what could leak
here is the binding's — Python objects, ctypes buffers, handles — and the
fastest backend runs the 12,000 cycles in a few seconds. (The C library's
own leaks per backend are the ASan tree's to find: make check.)"""
import os

import pytest


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# (make check runs it; check-quick, for everyday work, leaves it out:
# conftest.py)
@pytest.mark.parametrize("backend", ["sqlite"])
def test_no_leak_over_10000_cycles(url, name, clients):
    c = clients(url + "?synchronous=normal")
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
