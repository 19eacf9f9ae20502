"""Waits that behave in Python: the GIL is released, Ctrl-C interrupts a
blocking acquire within 100 ms holding nothing, asyncio cancellation
cancels the wait alone, a forked child gets an error instead of a hang."""
import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import dblock

def readline_within(proc, seconds):
    """The child's next output line, or "" when none comes in time (a
    broken binding must fail the test, not hang it)."""
    import select
    r, _, _ = select.select([proc.stdout], [], [], seconds)
    return proc.stdout.readline() if r else ""


PYTHON_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_other_threads_run_while_one_waits(url, name, clients):
    """A thread blocked in C does not hold the GIL: a pure-Python loop on
    the main thread keeps counting during the whole wait."""
    holder = clients(url)
    waiter = clients(url)
    with holder.lock(name):
        done = threading.Event()
        t = threading.Thread(target=lambda: (waiter.lock(name).acquire(timeout=10), done.set()))
        t.start()
        time.sleep(0.2)  # (the thread is in its wait)
        n, end = 0, time.monotonic() + 0.3
        while time.monotonic() < end:
            n += 1
        assert not done.is_set(), "the wait ended before the count did: nothing measured"
    t.join()
    assert n > 50000, "only %d iterations in 0.3 s while another thread waited" % n


CHILD = r"""
import signal, sys, time
# (a shell's background job starts with SIGINT ignored, and Python then
# leaves it so: run-suites.sh runs the shards that way)
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, %(pydir)r)
import dblock
c = dblock.Client(%(url)r, strategy=%(strategy)r)
lk = c.lock(%(name)r)
print("waiting", flush=True)
try:
    lk.acquire()
    print("granted", flush=True)
except KeyboardInterrupt:
    t = time.monotonic()
    print("interrupted %%.6f held=%%s grants=%%d" %% (t, lk.held, c.stats().grants), flush=True)
    sys.stdin.readline()  # (stay alive, holding nothing, until the parent has looked)
"""


def test_ctrl_c_interrupts_a_blocking_acquire(pair, pair_url, name, clients):
    """SIGINT to a process blocked in acquire() raises KeyboardInterrupt
    within 100 ms (CLOCK_MONOTONIC is system-wide: the child's reading
    minus the parent's at the kill), and the child holds nothing: the name
    is free for another client at once after the holder releases."""
    holder = clients(pair_url, strategy=pair[1])
    other = clients(pair_url, strategy=pair[1])
    lk = holder.lock(name)
    lk.acquire()
    child = subprocess.Popen([sys.executable, "-c", CHILD % dict(
        pydir=PYTHON_DIR, url=pair_url, strategy=pair[1], name=name)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert readline_within(child, 10).strip() == "waiting"
        time.sleep(0.2)  # (in its wait in C by now)
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        line = readline_within(child, 5).split()
        assert line and line[0] == "interrupted", line
        took = float(line[1]) - t0
        print("KeyboardInterrupt %.1f ms after SIGINT" % (took * 1000))
        assert took < 0.100, "KeyboardInterrupt came %.0f ms after SIGINT" % (took * 1000)
        assert line[2:] == ["held=False", "grants=0"]
        lk.release()
        # (not a try: on MariaDB for_update the cancelled waiter's statement,
        # cut on the client's side, may still take the row for a moment
        # before the server sees its connection closed)
        assert other.lock(name).acquire(timeout=2.0) is True
    finally:
        child.stdin.close()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()


def test_a_signal_whose_handler_returns_lets_the_wait_go_on(url, name, clients):
    """PEP 475: a signal whose Python handler raises nothing does not end
    the wait; it is granted when the holder releases."""
    holder = clients(url)
    waiter = clients(url)
    seen = []
    old = signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))
    try:
        lk = holder.lock(name)
        lk.acquire()
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        threading.Timer(0.8, lk.release).start()
        t0 = time.monotonic()
        with waiter.lock(name, wait=10.0):
            took = time.monotonic() - t0
        assert seen == [signal.SIGUSR1]
        assert took >= 0.7, "granted after %.2f s, before the holder released" % took
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_asyncio_lock(url, name, clients):
    c = clients(url)

    async def main():
        async with c.lock(name, wait=5.0) as lk:
            assert lk.held and lk.fence > 0
            inner = c.inspect(name)
            assert inner.held and inner.fence == lk.fence
            await asyncio.sleep(0.05)
        assert not lk.held
        return lk.fence

    assert asyncio.run(main()) > 0
    assert not c.inspect(name).held


def test_asyncio_cancel_cancels_the_wait_alone(pair, pair_url, name, clients):
    """Cancelling a task waiting in `async with` ends it within 100 ms,
    holding nothing; a thread waiting meanwhile on the same client for
    another name is not disturbed (the C cancel is per client) and gets its
    lock when that name is released."""
    if pair == ("sqlite", "for_update"):
        pytest.skip("SQLite for_update holds one lock per file at a time; this test holds two")
    holder = clients(pair_url, strategy=pair[1])
    c = clients(pair_url, strategy=pair[1])
    lk1 = holder.lock(name)
    lk2 = holder.lock(name + "-2")
    lk1.acquire()
    lk2.acquire()
    got = []

    def other_wait():
        with c.lock(name + "-2", wait=10.0) as l2:
            got.append(l2.fence)

    t = threading.Thread(target=other_wait)
    t.start()

    async def main():
        entered = []

        async def body():
            async with c.lock(name):
                entered.append(1)

        task = asyncio.create_task(body())
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        took = time.monotonic() - t0
        assert done, "the cancelled task still waits after 5 s"
        with pytest.raises(asyncio.CancelledError):
            await task
        return took, entered

    took, entered = asyncio.run(main())
    print("task cancelled in %.1f ms" % (took * 1000))
    assert took < 0.100 and entered == []
    assert c.stats().grants == 0
    time.sleep(0.1)
    assert t.is_alive() and not got, "the other thread's wait was ended by the cancel"
    lk2.release()
    t.join(10)
    assert got and got[0] > lk2.fence
    lk1.release()
    assert holder.lock(name).acquire(timeout=2.0) is True  # (not a try: see above)


def test_cancel_ends_every_wait_until_cleared(url, name, clients):
    holder = clients(url)
    c = clients(url)
    with holder.lock(name):
        errs = []
        t = threading.Thread(target=lambda: errs.append(
            pytest.raises(dblock.Canceled, c.lock(name, wait=10.0).__enter__)))
        t.start()
        time.sleep(0.3)
        c.cancel()
        t.join(5)
        assert errs and not t.is_alive()
        with pytest.raises(dblock.Canceled):
            c.lock(name + "-free").acquire()
        c.cancel_clear()
    with c.lock(name, wait=5.0):
        pass


def _child_uses_parent_client(c, name, q):
    try:
        c.lock(name).acquire(blocking=False)
        q.put("no error")
    except dblock.Error as e:
        q.put("%s: %s" % (type(e).__name__, e))


def test_forked_child_gets_an_error_not_a_hang(url, name, clients):
    c = clients(url)
    with c.lock(name + "-held"):  # (the client's threads run in the parent)
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_child_uses_parent_client, args=(c, name, q))
        p.start()
        p.join(10)
        assert p.exitcode == 0, "the child hung or died (exit code %r)" % p.exitcode
        msg = q.get(timeout=1)
    assert msg.startswith("InvalidArgument") and "forked child" in msg, msg
    assert c.inspect(name) is None
