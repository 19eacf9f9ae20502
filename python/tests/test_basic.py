"""The basic contract through Python, on every backend x strategy pair."""
import datetime
import threading

import pytest

import dblock


def test_exclusion_fence_release(pair, pair_url, name, clients):
    """A held name is busy for another client; its release frees it; the
    next grant's fence is greater."""
    a = clients(pair_url, strategy=pair[1])
    b = clients(pair_url, strategy=pair[1])
    assert (a.backend, a.strategy) == pair
    with a.lock(name, wait=0) as lk:
        assert lk.held and lk.name == name and not lk.lost and lk.fence > 0
        first = lk.fence
        with pytest.raises(dblock.Busy):
            with b.lock(name, wait=0):
                pass
        assert b.lock(name).acquire(blocking=False) is False
        assert b.lock(name).acquire(timeout=0.2) is False
    assert not lk.held
    with b.lock(name, wait=0) as lk2:
        assert lk2.fence > first


def test_inspect_list_while_held(pair, pair_url, name, clients):
    c = clients(pair_url, strategy=pair[1])
    with c.lock(name) as lk:
        info = c.inspect(name)
        assert isinstance(info, dblock.LockInfo)
        assert info.held and info.name == name and info.strategy == pair[1]
        assert info.fence == lk.fence and info.hold_count == 1
        assert info.owner_pid == __import__("os").getpid()
        assert isinstance(info.acquired_at, datetime.datetime)
        if pair[1] == "for_update":
            assert info.expires_at is None and lk.expires_at is None
        else:
            assert info.expires_at > info.acquired_at
            assert lk.expires_at is not None
        assert name in [i.name for i in c.list()]
    assert c.inspect("py-never-used-" + name) is None


def test_reentrant_holds_count(pair, pair_url, name, clients):
    """Two holds by one thread share the grant; the name is free after both."""
    c = clients(pair_url, strategy=pair[1])
    other = clients(pair_url, strategy=pair[1])
    with c.lock(name) as outer:
        with c.lock(name, wait=0) as inner:
            assert inner.fence == outer.fence
            assert inner.hold_count == 2
        assert other.lock(name).acquire(blocking=False) is False
    assert other.lock(name).acquire(blocking=False) is True


def test_threading_style_and_reuse(url, name, clients):
    """acquire()/release() like threading.Lock; a Lock object can be taken
    again after its release; releasing it twice is NotHeld."""
    c = clients(url)
    lk = c.lock(name)
    assert lk.acquire() is True
    lk.release()
    with pytest.raises(dblock.NotHeld):
        lk.release()
    assert lk.acquire(timeout=1.0) is True
    lk.renew()
    lk.release()


def test_wait_gets_the_lock_when_released(pair, pair_url, name, clients):
    """A blocking wait is granted soon after the holder releases."""
    a = clients(pair_url, strategy=pair[1])
    b = clients(pair_url, strategy=pair[1])
    lk = a.lock(name)
    lk.acquire()
    threading.Timer(0.3, lk.release).start()
    with b.lock(name, wait=10.0) as got:
        assert got.fence > lk.fence


def test_migrate_stats_doctor(url, clients):
    c = clients(url)
    assert c.migrate() == 0  # (applied already: a no-op)
    with c.lock("py-stats-" + url[-6:].replace("/", "_")):
        pass
    s = c.stats()
    assert s.grants >= 1 and s.connects >= 1 and len(s.wait_ms) == 6
    f = c.doctor()
    assert f and all(x.severity in ("ok", "info", "warn", "unsafe") for x in f)
    assert any(x.topic == "schema" for x in f)


def test_bad_input_is_refused(url, clients, name):
    """Clear errors, nothing changed: InvalidArgument is also a ValueError."""
    c = clients(url)
    for bad in ("", "x" * 256, "a\0b", 42, "\ud800"):
        with pytest.raises(dblock.InvalidArgument) as e:
            c.lock(bad)
        assert isinstance(e.value, ValueError)
    for kw in ({"wait": -1}, {"wait": "5"}, {"lease": 0}, {"lease": float("nan")}, {"wait": True}):
        with pytest.raises(dblock.InvalidArgument):
            c.lock(name, **kw)
    with pytest.raises(dblock.InvalidArgument):
        dblock.Client(url, strategy="nope")
    with pytest.raises(dblock.InvalidArgument):
        dblock.Client(url, lease=-3)
    with pytest.raises(dblock.InvalidArgument):
        dblock.Client(url, pool_size=0)
    with pytest.raises(dblock.InvalidArgument):
        dblock.Client(url, table="Bad-Table")
    with pytest.raises(dblock.InvalidArgument):
        c.lock(name).acquire(blocking=False, timeout=3)
    assert c.inspect(name) is None


def test_url_from_environment(url, monkeypatch):
    monkeypatch.setenv("DBLOCK_URL", url)
    with dblock.Client() as c:
        assert c.backend == url.split(":")[0].replace("postgresql", "postgres")
