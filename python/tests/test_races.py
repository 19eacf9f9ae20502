"""Interleavings a hostile review found (each failed, or crashed the
interpreter, on the binding before its fix): a client closed while
another thread waits, a handle read while another thread releases it, one
Lock object raced by two threads, signals in rapid fire, a task's cancel
arriving between two C calls, a release from inside on_lost, a task
cancelled after its grant. One backend each (the default strategy) is
enough: the races are the binding's own; they are spread over the three
so that the suite's shards take about as long as one another."""
import asyncio
import os
import random
import signal
import threading
import time

import pytest

import dblock


def on(backend):
    return pytest.mark.parametrize("backend", [backend])


@on('postgres')
def test_close_while_another_thread_waits(url, name, clients):
    holder = clients(url)
    c = dblock.Client(url)
    out = []
    with holder.lock(name):
        def wait():
            try:
                c.lock(name).acquire()
                out.append("granted")
            except dblock.Error as e:
                out.append(type(e).__name__)
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.2)
        c.close()  # (crashed the interpreter: the waiter used the freed client)
        t.join(5)
    assert out == ["Canceled"]
    with pytest.raises(dblock.InvalidArgument):
        c.lock(name)


@on('sqlite')
def test_read_a_handle_while_its_owner_releases(url, name, clients):
    c = clients(url)
    lk = c.lock(name)
    stop = threading.Event()

    wrong = []

    def poll():
        while not stop.is_set():
            try:
                lk.lost
                lk.expires_at
            except dblock.NotHeld:
                pass
            except dblock.Error as e:  # (anything else: the test has failed)
                wrong.append(e)

    import sys
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)  # (the threads interleave often, and no GIL wait is 5 ms)
    t = threading.Thread(target=poll)
    t.start()
    try:
        for _ in range(1500):  # (a use after free crashed within a few hundred)
            lk.acquire()
            lk.release()
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    assert not wrong, wrong[:3]


@on('mysql')
def test_one_lock_object_raced_by_two_threads(url, name, clients):
    """The second thread is refused; no hold is left behind."""
    c = clients(url)
    other = clients(url)
    lk = c.lock(name)
    errors = []
    barrier = threading.Barrier(2)

    def use():
        barrier.wait()
        for _ in range(200):
            try:
                with lk:
                    pass
            except dblock.InvalidArgument as e:
                errors.append(e)

    ts = [threading.Thread(target=use) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors and "another thread" in str(errors[0])
    assert not lk.held
    assert other.lock(name).acquire(blocking=False) is True, "a hold was left behind"


@on('sqlite')
def test_rapid_signals_never_wedge_the_client(url, name, clients):
    """SIGINT every few ms while the main thread keeps waiting: afterwards
    the client's waits still work (a lost count once left it cancelled for
    good: every wait then spun or hung)."""
    holder = clients(url)
    c = clients(url)
    holder.lock(name).acquire()
    armed = [True]

    def handler(s, f):
        if armed[0]:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, handler)
    stop = threading.Event()

    def killer():
        while not stop.is_set():
            time.sleep(random.random() * 0.003)
            os.kill(os.getpid(), signal.SIGINT)

    k = threading.Thread(target=killer, daemon=True)
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    k.start()
    interrupted = 0
    try:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            try:
                try:
                    c.lock(name, wait=0.01).acquire()
                except KeyboardInterrupt:
                    interrupted += 1
            except KeyboardInterrupt:
                interrupted += 1
    finally:
        armed[0] = False
        stop.set()
        k.join()
        signal.signal(signal.SIGINT, old)
    assert interrupted > 10
    assert signal.set_wakeup_fd(fd) == fd, "the wake-up fd was left changed"
    t0 = time.monotonic()
    assert c.lock(name).acquire(timeout=0.3) is False
    assert time.monotonic() - t0 < 1.5
    assert c.lock(name + "-free").acquire(blocking=False) is True


@on('mysql')
def test_a_tasks_cancel_between_two_c_calls_is_kept(url, name, clients):
    """Cancelling task A cuts B's wait in C too (the C cancel is per
    client); B's own cancel, arriving while B is between two C calls, must
    still end B at once."""
    holder = clients(url)
    c = clients(url)
    holder.lock(name).acquire()

    async def main():
        slow = 0
        for _ in range(80):
            ta = asyncio.ensure_future(c.lock(name, wait=3).acquire_async())
            tb = asyncio.ensure_future(c.lock(name, wait=3).acquire_async())
            await asyncio.sleep(0.03)
            t0 = time.monotonic()
            ta.cancel()
            await asyncio.sleep(0)
            time.sleep(random.random() * 0.004)
            tb.cancel()
            for t in (ta, tb):
                try:
                    await t
                except BaseException:
                    pass
            if time.monotonic() - t0 > 1:
                slow += 1
        return slow

    assert asyncio.run(main()) == 0


@on('mysql')
def test_release_inside_on_lost_of_an_asyncio_lock(url, name, clients):
    """It raises Deadlock instead of hanging the client (the hold thread
    would wait in C for the callback that waits for it)."""
    seen = []
    c = clients(url, lease=1.0)
    admin = clients(url)

    def on_lost(lk):
        try:
            lk.release()
            seen.append("released")
        except dblock.Deadlock:
            seen.append("Deadlock")

    async def main():
        lk = c.lock(name, on_lost=on_lost)
        await lk.acquire_async()
        admin.force_unlock(name)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.05)
        with pytest.raises(dblock.Lost):
            await asyncio.wait_for(lk.release_async(), 5)

    asyncio.run(main())
    assert seen == ["Deadlock"]


@on('mysql')
def test_a_task_cancelled_after_its_grant_leaves_no_thread(url, name, clients):
    c = clients(url)

    def holds():
        return sum(t.name.startswith("dblock-hold") for t in threading.enumerate())

    before = holds()

    async def main():
        cancelled = 0
        for i in range(60):
            lk = c.lock("%s-%d" % (name, i))
            t = asyncio.ensure_future(lk.acquire_async())
            await asyncio.sleep(0.0005 * (i % 4))
            t.cancel()
            try:
                await t
            except asyncio.CancelledError:
                cancelled += 1
                assert not lk.held
            if lk.held:  # (granted before the cancel reached it: released here)
                await lk.release_async()
        assert cancelled > 0

    asyncio.run(main())
    time.sleep(0.3)
    assert holds() == before
    assert all(not i.held for i in c.list() if i.name.startswith(name))


@on('sqlite')
def test_options_that_c_would_read_otherwise(url):
    for kw in ({"table": "dblock_locks\0; DROP TABLE x"}, {"pool_size": 2 ** 32 + 1},
               {"owner_host": "a\0b"}, {"strategy": "\ud800"}):
        with pytest.raises(dblock.InvalidArgument):
            dblock.Client(url, **kw)
    with pytest.raises(dblock.InvalidArgument):
        dblock.Client(url + "\0x")
    with pytest.raises(dblock.InvalidArgument):
        dblock.Client("sqlite:///tmp/\ud800.db")


@on('postgres')
def test_a_wait_inside_a_signal_handler_keeps_the_wakeup_fd(url, name, clients):
    """A handler that itself waits (nested on the main thread) ends its
    wait; the outer wait goes on and is granted; the interpreter's wake-up
    fd is the one set before (asyncio's, say) afterwards."""
    holder = clients(url)
    c = clients(url)
    r, w = os.pipe()
    os.set_blocking(w, False)
    before = signal.set_wakeup_fd(w)
    inner = []
    old = signal.signal(signal.SIGUSR1,
                        lambda s, f: inner.append(c.lock(name + "-h").acquire(timeout=0.1)))
    try:
        with holder.lock(name + "-h"):
            lk = holder.lock(name)
            lk.acquire()
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            threading.Timer(0.6, lk.release).start()
            with c.lock(name, wait=10.0):
                pass
        assert inner == [False]
        assert signal.set_wakeup_fd(before) == w, "the wake-up fd set before was not restored"
    finally:
        signal.signal(signal.SIGUSR1, old)
        signal.set_wakeup_fd(before)
        os.close(r)
        os.close(w)


@on('sqlite')
def test_ctrl_c_during_a_release_leaves_no_freed_handle(url, name, clients, tmp_dir):
    """A KeyboardInterrupt right after the C release (held up here by a
    SQLite writer) once left the object pointing at the freed handle: the
    next property read or release crashed."""
    import sqlite3
    c = clients(url)
    other = clients(url)
    lk = c.lock(name)
    lk.acquire()
    db = sqlite3.connect(url[len("sqlite://"):], isolation_level=None, check_same_thread=False)
    db.execute("BEGIN IMMEDIATE")  # (the release waits for this writer)
    # (a background shard starts with SIGINT ignored: run-suites.sh)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        threading.Timer(0.5, db.commit).start()
        with pytest.raises(KeyboardInterrupt):
            lk.release()
            time.sleep(5)  # (the interrupt lands after the release returned)
    finally:
        signal.signal(signal.SIGINT, old)
    db.close()
    assert not lk.held
    with pytest.raises(dblock.NotHeld):
        lk.hold_count
    with pytest.raises(dblock.NotHeld):
        lk.release()
    assert other.lock(name).acquire(timeout=2.0) is True


@on('postgres')
def test_close_from_a_signal_handler_during_a_wait(url, name, clients):
    """The handler's close() cannot wait for the wait it interrupted: the
    wait ends (Canceled) and the last call to end frees the client."""
    holder = clients(url)
    c = dblock.Client(url)
    old = signal.signal(signal.SIGUSR1, lambda s, f: c.close())
    try:
        with holder.lock(name):
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            t0 = time.monotonic()
            with pytest.raises(dblock.Canceled):
                c.lock(name).acquire()
            assert time.monotonic() - t0 < 2
        assert c._c is None, "the client was not freed"
    finally:
        signal.signal(signal.SIGUSR1, old)


@on('postgres')
def test_close_from_another_thread_after_a_nested_wait(url, name, clients):
    """A wait inside a signal handler once hid the outer wait from close():
    close() gave up after 60 s and the outer wait was later granted on a
    closed client."""
    holder = clients(url)
    c = dblock.Client(url)
    inner = []
    old = signal.signal(signal.SIGUSR1,
                        lambda s, f: inner.append(c.lock(name + "-h").acquire(blocking=False)))
    try:
        with holder.lock(name):
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            closer = threading.Timer(0.5, c.close)
            closer.start()
            t0 = time.monotonic()
            with pytest.raises(dblock.Canceled):
                c.lock(name).acquire()
            closer.join(5)
            assert not closer.is_alive() and time.monotonic() - t0 < 3
        assert inner == [True] and c._c is None
    finally:
        signal.signal(signal.SIGUSR1, old)


@on('mysql')
def test_a_try_is_tried_while_other_waits_are_cancelled(url, name, clients):
    """Tries on a free name while another thread's asyncio loop keeps
    cancelling waiting tasks of the same client: every try is granted
    (they once failed, untried, 4 times in 5)."""
    holder = clients(url)
    c = clients(url)
    holder.lock(name).acquire()
    stop = threading.Event()

    def storm():
        async def main():
            while not stop.is_set():
                t = asyncio.ensure_future(c.lock(name).acquire_async())
                await asyncio.sleep(0.002)
                t.cancel()
                try:
                    await t
                except BaseException:
                    pass
        asyncio.run(main())

    th = threading.Thread(target=storm)
    th.start()
    try:
        granted = 0
        for i in range(300):
            lk = c.lock("%s-free" % name)
            if lk.acquire(blocking=False):
                granted += 1
                lk.release()
    finally:
        stop.set()
        th.join(10)
    assert granted == 300


@on('mysql')
def test_release_while_an_asyncio_acquire_fails(url, name, clients):
    """A release asked of a hold thread whose acquire then times out gets
    NotHeld instead of waiting for ever."""
    holder = clients(url)
    c = clients(url)
    out = []
    with holder.lock(name):
        lk = c.lock(name)

        async def main():
            t = asyncio.ensure_future(lk.acquire_async(timeout=0.5))
            await asyncio.sleep(0.1)
            th = threading.Thread(target=lambda: out.append(
                pytest.raises(dblock.NotHeld, lk.release)))
            th.start()
            with pytest.raises(dblock.Timeout):
                await t
            await asyncio.get_running_loop().run_in_executor(None, th.join, 5)
            return th.is_alive()

        assert asyncio.run(main()) is False
    assert out


def _child_releases(lk, q):
    try:
        lk.release()
        q.put("no error")
    except dblock.Error as e:
        q.put(type(e).__name__)


@on('sqlite')
def test_forked_child_releasing_an_asyncio_lock_gets_an_error(url, name, clients):
    import multiprocessing
    c = clients(url)
    lk = c.lock(name)

    async def take():
        await lk.acquire_async()

    asyncio.run(take())
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_releases, args=(lk, q))
    p.start()
    p.join(10)
    alive = p.is_alive()
    if alive:
        p.kill()
    assert not alive, "the child hung"
    assert q.get(timeout=1) == "InvalidArgument"
    lk.release()
