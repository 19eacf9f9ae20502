"""Every exception: one class per DBLOCK_E... code of dblock.h, and each
that a test can provoke provoked for real, carrying code, message and
SQLSTATE."""
import os
import re
import threading
import time

import pytest

import dblock
from dblock import _errors

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "dblock.h")


def test_every_code_of_the_header_has_its_class():
    codes = {name: int(v) for name, v in re.findall(r"#define (DBLOCK_E[A-Z]+) \((-\d+)\)",
                                                       open(HEADER).read())}
    assert len(codes) == 18
    for name, code in codes.items():
        cls = _errors.BY_CODE.get(code)
        assert cls is not None, "no exception class for %s" % name
        e = _errors.from_code(code, "m", "XX000", 7)
        assert isinstance(e, dblock.Error) and type(e) is cls
        assert (e.code, e.message, e.sqlstate, e.native) == (code, "m", "XX000", 7)
        assert getattr(dblock, cls.__name__) is cls
    assert issubclass(dblock.InvalidArgument, ValueError)


def test_every_public_name_has_a_docstring():
    import inspect
    missing = []
    for n in dblock.__all__:
        o = getattr(dblock, n)
        if not (o.__doc__ or "").strip():
            missing.append(n)
        if inspect.isclass(o) and not issubclass(o, BaseException):
            for k, v in vars(o).items():
                f = v.fget if isinstance(v, property) else v
                if not k.startswith("_") and callable(f) and not (f.__doc__ or "").strip():
                    missing.append(n + "." + k)
    assert not missing, missing


def test_busy_timeout_notheld_deadlock(url, name, clients):
    a = clients(url)
    b = clients(url, reentrant=False)
    with a.lock(name):
        with pytest.raises(dblock.Busy) as e:
            b.lock(name, wait=0).__enter__()
        assert e.value.code == -1 and e.value.message
        t0 = time.monotonic()
        with pytest.raises(dblock.Timeout):
            b.lock(name, wait=0.3).__enter__()
        assert time.monotonic() - t0 >= 0.29
    with b.lock(name):
        with pytest.raises(dblock.Deadlock):
            b.lock(name, wait=0).__enter__()
    lk = a.lock(name)
    with pytest.raises(dblock.NotHeld):
        lk.release()


def test_lost_after_force_unlock(url, name, clients):
    a = clients(url)
    admin = clients(url)
    lk = a.lock(name)
    lk.acquire()
    new = admin.force_unlock(name)
    assert new > lk.fence
    with pytest.raises(dblock.Lost):
        lk.release()
    assert not lk.held


def test_connection_error():
    with pytest.raises(dblock.ConnectionError) as e:
        dblock.Client("postgres://u:p@127.0.0.1:1/db", connect_timeout=2)
    assert e.value.code == -6 and e.value.message


@pytest.mark.parametrize("backend", ["postgres", "mysql"])  # (SQLite has no credentials)
def test_auth_error_carries_the_sqlstate(backend, url):
    bad = re.sub(r"://([^:]+):[^@]+@", r"://\1:wrong-password@", url)
    with pytest.raises(dblock.AuthError) as e:
        dblock.Client(bad)
    assert "wrong-password" not in str(e.value)
    if backend == "postgres":
        assert e.value.sqlstate == "28P01"
    else:
        assert e.value.native == 1045


def test_schema_error_without_migration(url, name):
    with dblock.Client(url, table="py_never_migrated") as c:
        with pytest.raises(dblock.SchemaError) as e:
            c.lock(name).acquire()
        assert "migrate" in str(e.value)


def test_permission_error_for_a_read_only_client(url, name, clients):
    clients(url)  # (migrated)
    with dblock.Client(url, read_only=True) as c:
        with pytest.raises(dblock.PermissionError):
            c.lock(name).acquire()
        assert c.inspect(name) is None


def test_mismatch_across_strategies(url, name, clients):
    a = clients(url, strategy="insert")
    b = clients(url, strategy="for_update")
    with a.lock(name):
        pass
    with pytest.raises(dblock.Mismatch):
        b.lock(name).acquire()


@pytest.mark.parametrize("backend", ["sqlite", "mysql"])  # (fair waiting is PostgreSQL's)
def test_unsupported_fair_outside_postgres(backend, url):
    with pytest.raises(dblock.Unsupported):
        dblock.Client(url, fair=True)


def test_deadlock_inside_on_lost(url, name, clients):
    """From inside on_lost, a call that talks to the database raises
    Deadlock instead of waiting on its own thread."""
    seen = []
    ev = threading.Event()

    def on_lost(n, fence):
        try:
            c.inspect(n)
        except dblock.Deadlock as e:
            seen.append(e)
        ev.set()

    c = clients(url, lease=1.0, on_lost=on_lost)
    admin = clients(url)
    lk = c.lock(name)
    lk.acquire()
    admin.force_unlock(name)
    assert ev.wait(10), "on_lost was not called within 10 s"
    assert seen and isinstance(seen[0], dblock.Deadlock)
    with pytest.raises(dblock.Lost):
        lk.release()


def test_the_loader_names_what_it_tried(tmp_path):
    import subprocess
    import sys
    env = dict(os.environ, DBLOCK_LIBRARY=str(tmp_path / "missing" / "libdblock.so.0"))
    r = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r); import dblock"
                        % os.path.join(os.path.dirname(HEADER), "..", "python")],
                       env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "LibraryNotFound" in r.stderr and str(tmp_path / "missing") in r.stderr
    assert "make install" in r.stderr
