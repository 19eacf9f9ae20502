"""The lost-lock signal through Python: on_lost on the client and on the
lock, lk.lost, Lost at release, and an asyncio task cancelled on loss."""
import asyncio
import threading
import time

import pytest

import dblock


def test_on_lost_after_force_unlock(pair, pair_url, name, clients):
    if pair == ("sqlite", "for_update"):
        pytest.skip("SQLite for_update: a live process's lock cannot be taken, so it is never lost")
    told = []
    ev = threading.Event()
    c = clients(pair_url, strategy=pair[1], lease=1.5,
                on_lost=lambda n, f: (told.append((n, f)), ev.set()))
    admin = clients(pair_url, strategy=pair[1])
    mine = []
    lk = c.lock(name, on_lost=mine.append)
    lk.acquire()
    assert not lk.lost
    t0 = time.monotonic()
    new = admin.force_unlock(name)
    assert new > lk.fence
    assert ev.wait(10), "on_lost not called within 10 s"
    print("on_lost %.2f s after the force-unlock" % (time.monotonic() - t0))
    assert told == [(name, lk.fence)]
    assert mine == [lk] and lk.lost
    with pytest.raises(dblock.Lost):
        lk.release()
    assert not lk.held and lk.lost
    assert c.stats().losses == 1


def test_asyncio_task_cancelled_on_loss(url, name, clients):
    """cancel_on_lost=True: the task holding the lock is cancelled when the
    lock is lost; its `async with` then ends without masking that."""
    c = clients(url, lease=1.5)
    admin = clients(url)
    state = {}

    async def worker():
        async with c.lock(name, cancel_on_lost=True) as lk:
            state["lk"] = lk
            threading.Timer(0.2, admin.force_unlock, (name,)).start()
            await asyncio.sleep(30)

    async def main():
        t0 = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(asyncio.ensure_future(worker())), 10)
        return time.monotonic() - t0

    took = asyncio.run(main())
    lk = state["lk"]
    assert lk.lost and not lk.held
    assert took < 5, "the task ran %.1f s after its lock was lost" % took
