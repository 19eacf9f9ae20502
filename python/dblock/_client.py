"""Client and Lock: the binding's whole API over the C library.

How a wait behaves in Python (the parts the C API cannot do alone):
  - The GIL is released for every C call (ctypes.CDLL), so other threads
    run while one waits.
  - Ctrl-C: while the main thread waits inside C, Python's own SIGINT
    handler cannot run. For the length of such a wait the interpreter's
    signal wake-up fd is pointed at a pipe that a watcher thread reads; a
    signal there cancels that wait (dblock_client_cancel), the wait
    returns within milliseconds, the pending Python handler runs (and
    raises KeyboardInterrupt), and a handler that raises nothing lets the
    wait go on with the time it has left, as PEP 475 does for system calls.
  - dblock_client_cancel cancels every wait of a C client. So that one
    wait can be cancelled alone, the client counts the cancels it asked
    for on behalf of one wait; any other wait that was cut by them waits
    for the cancel to end and then goes on with the time it has left.
  - asyncio: each acquire runs on a thread of its own that then keeps the
    hold until it is released (the C library ties a hold to the thread that
    took it: an executor thread reused by another task would count as the
    same owner, a reentrant hold). Cancelling the task cancels that wait
    alone; a grant that won the race is released before CancelledError
    propagates.
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import ctypes
import datetime
import logging
import os
import queue
import select
import signal
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from . import _errors
from ._errors import Error, InvalidArgument
from ._native import (LOG_FN, LOST_FN, NAME_MAX, OPTIONS_VERSION, STATS_WAIT_BOUNDS_MS,
                      ErrorInfo, Finding as _CFinding, LockInfo as _CLockInfo, Options,
                      Stats as _CStats, lib, libc)

_ECANCELED = _errors.Canceled.code
_EBUSY = _errors.Busy.code
_UTC = datetime.timezone.utc
_log = logging.getLogger("dblock")


# ---- helpers ---------------------------------------------------------------

def _raise_last(rc: int) -> None:
    """Raises the exception for rc with the calling thread's last error
    (dblock_last_error is per thread: call right after the failing call)."""
    info = ErrorInfo()
    lib.dblock_last_error(ctypes.byref(info))
    if info.code == rc and info.message:
        msg = info.message.decode("utf-8", "replace")
        raise _errors.from_code(rc, msg, info.sqlstate.decode("ascii", "replace"), info.native)
    raise _errors.from_code(rc, lib.dblock_strerror(rc).decode())


def _check(rc: int) -> None:
    if rc != 0:
        _raise_last(rc)


def _name_bytes(name: Any) -> bytes:
    """A lock name as the C library takes it: 1..255 bytes of UTF-8, no NUL."""
    if not isinstance(name, str):
        raise InvalidArgument("lock name must be a str, not %s" % type(name).__name__,
                              InvalidArgument.code)
    try:
        b = name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgument("lock name is not valid UTF-8: %s" % e, InvalidArgument.code) from None
    if not b or len(b) > NAME_MAX or b"\0" in b:
        raise InvalidArgument("lock name must be 1..%d bytes of UTF-8 without NUL (got %d bytes)"
                              % (NAME_MAX, len(b)), InvalidArgument.code)
    return b


def _ms(value: Any, what: str, *, zero_ok: bool) -> int:
    """Seconds (int or float) to whole milliseconds, refusing what C would
    read otherwise (negative, NaN, bool, a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InvalidArgument("%s must be a number of seconds, not %r" % (what, value),
                              InvalidArgument.code)
    if value < 0 or (value == 0 and not zero_ok):
        raise InvalidArgument("%s must be %s seconds, not %r"
                              % (what, ">= 0" if zero_ok else "> 0", value), InvalidArgument.code)
    if value > 10 ** 9:
        raise InvalidArgument("%s is too large: %r seconds" % (what, value), InvalidArgument.code)
    ms = int(round(value * 1000))
    return ms if ms > 0 or value == 0 else 1


def _when(us: int) -> Optional[datetime.datetime]:
    return datetime.datetime.fromtimestamp(us / 1e6, tz=_UTC) if us else None


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


_check_signals = ctypes.pythonapi.PyErr_CheckSignals
_check_signals.argtypes = []
_check_signals.restype = ctypes.c_int


# ---- results ---------------------------------------------------------------

@dataclass(frozen=True)
class LockInfo:
    """What the database knows about a name (Client.inspect, Client.list)."""
    name: str
    strategy: str
    held: bool
    owner_host: str
    owner_pid: int
    owner_thread: int
    owner_token: str
    hold_count: int
    fence: int
    acquired_at: Optional[datetime.datetime]
    expires_at: Optional[datetime.datetime]  # None: no lease (for_update)

    @classmethod
    def _from_c(cls, c: _CLockInfo) -> "LockInfo":
        return cls(_text(c.name), _text(c.strategy), bool(c.held), _text(c.owner_host),
                   c.owner_pid, c.owner_thread, _text(c.owner_token), c.hold_count, c.fence,
                   _when(c.acquired_at_us), _when(c.expires_at_us))


@dataclass(frozen=True)
class Finding:
    """One finding of Client.doctor(): severity is "ok", "info", "warn" or
    "unsafe"; advice is "" when there is nothing to do."""
    severity: str
    topic: str
    text: str
    advice: str


_SEVERITIES = ("ok", "info", "warn", "unsafe")


@dataclass(frozen=True)
class Stats:
    """What a client has done since it was opened (Client.stats()).
    wait_ms counts grants by wait: <= 1, 10, 100, 1000, 10000 ms, more."""
    grants: int
    busy: int
    timeouts: int
    cancelled: int
    failures: int
    waited: int
    renewals: int
    renewal_failures: int
    losses: int
    connects: int
    disconnects: int
    wait_ms: Tuple[int, ...]
    wait_ms_sum: int
    wakeups: int
    notified: int

    WAIT_BOUNDS_MS = STATS_WAIT_BOUNDS_MS


# ---- the main thread's signals during a wait in C ---------------------------

class _SignalWatch:
    """Points the interpreter's signal wake-up fd at a pipe while the main
    thread waits in C, and calls back on every signal that has a Python
    handler. Bytes are passed on to the fd that was set before (asyncio's,
    say), so nobody else misses a signal."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._r = self._w = -1
        self._old = -1
        self._on: Optional[Callable[[], None]] = None
        self._thread: Optional[threading.Thread] = None

    def start(self, on_signal: Callable[[], None]) -> bool:
        """From the main thread only; False when signals cannot be watched
        (another thread, a subinterpreter)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        with self._mu:
            if self._r < 0:
                self._r, self._w = os.pipe()
                os.set_blocking(self._r, False)
                os.set_blocking(self._w, False)
            if self._thread is None or not self._thread.is_alive() or self._thread_pid != os.getpid():
                self._thread = threading.Thread(target=self._run, name="dblock-signals", daemon=True)
                self._thread_pid = os.getpid()
                self._thread.start()
        try:
            old = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            return False
        with self._mu:
            self._old = old if old != self._w else -1
            self._on = on_signal
        return True

    def stop(self) -> None:
        with self._mu:
            self._on = None
            old = self._old
        try:
            signal.set_wakeup_fd(old, warn_on_full_buffer=False)
        except (ValueError, OSError):
            pass

    def _run(self) -> None:
        while True:
            try:
                select.select([self._r], [], [])
                data = os.read(self._r, 512)
            except BlockingIOError:
                continue
            except OSError:
                return
            with self._mu:
                on, old = self._on, self._old
            if old >= 0:
                try:
                    os.write(old, data)
                except OSError:
                    pass
            if on is not None:
                on()


_SIGNALS = _SignalWatch()


class _Wait:
    """One acquire in progress: whether a cancel was asked for it alone."""
    __slots__ = ("requested", "by_signal")

    def __init__(self) -> None:
        self.requested = False
        self.by_signal = False


# ---- the lock --------------------------------------------------------------

class Lock:
    """One hold of a named lock: client.lock(name, ...).

    Use it as a context manager (``with``: acquire or raise Busy/Timeout,
    release at the end), in the threading style (``acquire(blocking=True,
    timeout=-1)`` returning True/False, then ``release()``), or with
    asyncio (``async with``). After a release the object can be acquired
    again. One Lock object is one hold: a second hold of the same name by
    the same thread (reentrant, counted by the database row) is a second
    client.lock(name).
    """

    def __init__(self, client: "Client", name: str, wait: Optional[float], lease: Optional[float],
                 on_lost: Optional[Callable[["Lock"], Any]], cancel_on_lost: bool) -> None:
        self._client = client
        self._bname = _name_bytes(name)
        self._name = name
        self._wait_ms = -1 if wait is None else _ms(wait, "wait", zero_ok=True)
        self._lease_ms = 0 if lease is None else _ms(lease, "lease", zero_ok=False)
        self._on_lost = on_lost
        self._cancel_on_lost = bool(cancel_on_lost)
        self._h: Optional[int] = None
        self._fence = 0
        self._holder: Optional[_Holder] = None
        self._task: Optional[Tuple[asyncio.AbstractEventLoop, asyncio.Task]] = None  # type: ignore[type-arg]
        self._lost_told = False

    def __repr__(self) -> str:
        state = "held, fence %d" % self._fence if self._h else "not held"
        return "<dblock.Lock %r %s>" % (self._name, state)

    # -- properties
    @property
    def name(self) -> str:
        """The lock's name."""
        return self._name

    @property
    def fence(self) -> int:
        """The grant's fencing token (0 before the first acquire)."""
        return self._fence

    @property
    def held(self) -> bool:
        """True between a successful acquire and its release (lost or not)."""
        return self._h is not None

    @property
    def lost(self) -> bool:
        """True once the hold is known lost: its loss deadline passed
        (by this host's monotonic clock) or a call found it gone."""
        h = self._h
        if h is None:
            return self._lost_told
        self._client._check_pid()
        return bool(lib.dblock_lock_is_lost(h))

    @property
    def hold_count(self) -> int:
        """This owner's holds on the name (1 + reentrant holds)."""
        h = self._need_handle()
        return int(lib.dblock_lock_hold_count(h))

    @property
    def expires_at(self) -> Optional[datetime.datetime]:
        """The lease's end by the server's clock as last granted or renewed;
        None for for_update (no lease)."""
        h = self._need_handle()
        return _when(lib.dblock_lock_expires_at(h))

    def check(self, cursor: Any) -> None:
        """A fenced write's check, in the caller's own transaction:
        runs ``SELECT dblock_check(name, fence)`` (``<table>_check`` for
        another table) on a DB-API cursor of the application's connection
        to the same PostgreSQL or MariaDB database (psycopg, PyMySQL,
        mysqlclient: paramstyle format/pyformat). The database raises
        SQLSTATE DBL01 unless this grant still holds the name, and keeps
        the lock row until the transaction ends: roll the transaction back
        on any error (docs/fenced-writes.md)."""
        if self._h is None:
            raise _errors.NotHeld("lock %r is not held by this Lock object" % self._name,
                                  _errors.NotHeld.code)
        root = type(cursor).__module__.split(".")[0]
        style = getattr(__import__("sys").modules.get(root), "paramstyle", None)
        if style not in ("format", "pyformat"):
            raise _errors.Unsupported(
                "Lock.check needs a DB-API cursor with paramstyle format or pyformat (psycopg, "
                "PyMySQL, mysqlclient); %s has %r" % (root, style), _errors.Unsupported.code)
        cursor.execute("SELECT %s(%%s, %%s)" % self._client._check_fn, (self._name, self._fence))
        cursor.fetchall()

    # -- the threading style
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquires; True when granted, False when the name stayed busy
        (blocking=False: one try; timeout=-1: the wait given to
        client.lock, forever by default; timeout >= 0: up to that long).
        Other failures raise dblock.Error subclasses."""
        if not blocking:
            if timeout != -1:
                raise InvalidArgument("can't specify a timeout for a non-blocking acquire",
                                      InvalidArgument.code)
            wait_ms = 0
        elif timeout == -1:
            wait_ms = self._wait_ms
        else:
            wait_ms = _ms(timeout, "timeout", zero_ok=True)
        try:
            self._acquire(wait_ms)
        except (_errors.Busy, _errors.Timeout):
            return False
        return True

    def release(self) -> None:
        """Releases the hold. Raises Lost if it had been lost (the handle is
        freed all the same), NotHeld if this object holds nothing."""
        h = self._need_handle(not_held=True)
        self._call_owner(lambda: self._release_handle(h))

    def renew(self) -> None:
        """Extends the lease by the lease it was acquired with (for_update:
        checks the session is alive). Raises Lost if the lock is gone."""
        h = self._need_handle()
        self._call_owner(lambda: _check(lib.dblock_lock_renew(h)))

    # -- context managers
    def __enter__(self) -> "Lock":
        self._acquire(self._wait_ms)
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        self._exit(et)

    def _exit(self, et: Any) -> None:
        if self._h is None:
            return
        try:
            self.release()
        except Error:
            # The body's own exception matters more; a clean body learns
            # that its work ran without the lock (Lost) or that the release
            # failed.
            if et is None:
                raise

    async def __aenter__(self) -> "Lock":
        await self.acquire_async()
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        if self._h is None:
            return
        try:
            await self.release_async()
        except Error:
            if et is None:
                raise

    async def acquire_async(self, timeout: Optional[float] = -1) -> None:
        """asyncio acquire: waits without blocking the event loop; raises
        Busy/Timeout like ``async with``. timeout=-1: the wait given to
        client.lock; None: forever. Cancelling the awaiting task cancels
        the wait and holds nothing."""
        if timeout == -1:
            wait_ms = self._wait_ms
        elif timeout is None:
            wait_ms = -1
        else:
            wait_ms = _ms(timeout, "timeout", zero_ok=True)
        if self._h is not None:
            raise _errors.Error("this Lock object is held already; take another client.lock(name) "
                                "for a reentrant hold", InvalidArgument.code)
        self._client._check_pid()
        loop = asyncio.get_running_loop()
        w = _Wait()
        holder = _Holder(self, wait_ms, w)
        holder.start()
        fut = asyncio.wrap_future(holder.granted)
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            self._client._cancel_wait(w)
            # (wait for the wait to end, whatever further cancels come: a
            # grant that won the race must be released, not leaked)
            while not fut.done():
                try:
                    await asyncio.shield(fut)
                except asyncio.CancelledError:
                    pass
                except BaseException:
                    break
            if not fut.cancelled() and fut.exception() is None:
                await asyncio.wrap_future(holder.submit(lambda: self._release_handle(self._h)))
            raise
        self._holder = holder
        if self._cancel_on_lost:
            self._task = (loop, asyncio.current_task())  # type: ignore[assignment]

    async def release_async(self) -> None:
        """asyncio release (the round trip runs off the event loop)."""
        h = self._need_handle(not_held=True)
        holder = self._holder
        if holder is None:
            await asyncio.get_running_loop().run_in_executor(None, lambda: self._release_handle(h))
        else:
            await asyncio.wrap_future(holder.submit(lambda: self._release_handle(h)))

    # -- internals
    def _need_handle(self, not_held: bool = False) -> int:
        h = self._h
        if h is None:
            if not_held:
                raise _errors.NotHeld("lock %r is not held by this Lock object" % self._name,
                                      _errors.NotHeld.code)
            raise _errors.Error("lock %r is not held by this Lock object" % self._name,
                                InvalidArgument.code)
        self._client._check_pid()
        return h

    def _call_owner(self, fn: Callable[[], Any]) -> Any:
        holder = self._holder
        if holder is None or threading.current_thread() is holder:
            return fn()
        return holder.submit(fn).result()

    def _acquire(self, wait_ms: int, w: Optional[_Wait] = None) -> None:
        """Acquires on the calling thread or raises. The handle is stored
        before anything else can raise (a KeyboardInterrupt between the
        grant and the store would leak a renewed hold)."""
        if self._h is not None:
            raise _errors.Error("this Lock object is held already; take another client.lock(name) "
                                "for a reentrant hold", InvalidArgument.code)
        box = ctypes.c_void_p()
        try:
            self._client._acquire(box, self._bname, wait_ms, self._lease_ms, w or _Wait())
            self._h = box.value
            self._fence = int(lib.dblock_lock_fence(self._h))
            self._lost_told = False
            self._client._held_add(self)
        except BaseException:
            if box.value and self._h is None:
                lib.dblock_lock_release(box.value)
            raise

    def _release_handle(self, h: Optional[int]) -> None:
        if h is None or self._h != h:
            raise _errors.NotHeld("lock %r is not held by this Lock object" % self._name,
                                  _errors.NotHeld.code)
        rc = lib.dblock_lock_release(h)
        if rc != _errors.Deadlock.code:  # (EDEADLK: from on_lost; the handle stays)
            self._h = None
            self._client._held_discard(self)
            holder, self._holder, self._task = self._holder, None, None
            if holder is not None:
                holder.finish()
        _check(rc)

    def _told_lost(self) -> None:
        """From the client's on_lost, on a C worker thread."""
        self._lost_told = True
        if self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:
                _log.exception("dblock: the on_lost callback of %r raised", self)
        task = self._task
        if task is not None:
            loop, t = task
            try:
                loop.call_soon_threadsafe(t.cancel)
            except RuntimeError:
                pass  # (the loop is closed)


class _Holder(threading.Thread):
    """The thread that takes an asyncio acquire's hold and keeps it: it
    waits in C for the grant, then runs the hold's owner calls (renew,
    release) until the release, so the hold's thread id cannot be reused
    by another acquire while it lasts."""

    def __init__(self, lk: Lock, wait_ms: int, w: _Wait) -> None:
        super().__init__(name="dblock-hold:" + lk.name, daemon=True)
        self._lk = lk
        self._wait_ms = wait_ms
        self._w = w
        self.granted: concurrent.futures.Future = concurrent.futures.Future()  # type: ignore[type-arg]
        self._calls: "queue.SimpleQueue[Optional[Tuple[Callable[[], Any], concurrent.futures.Future]]]" = \
            queue.SimpleQueue()  # type: ignore[type-arg]

    def run(self) -> None:
        try:
            self._lk._acquire(self._wait_ms, self._w)
        except BaseException as e:
            self.granted.set_exception(e)
            return
        self.granted.set_result(None)
        while True:
            item = self._calls.get()
            if item is None:
                return
            fn, f = item
            try:
                f.set_result(fn())
            except BaseException as e:
                f.set_exception(e)

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:  # type: ignore[type-arg]
        f: concurrent.futures.Future = concurrent.futures.Future()  # type: ignore[type-arg]
        self._calls.put((fn, f))
        return f

    def finish(self) -> None:
        self._calls.put(None)


# ---- the client ------------------------------------------------------------

_open_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # (before the interpreter goes away: a C worker must not call back
    # into a finalizing interpreter)
    for c in list(_open_clients):
        c.close()


class Client:
    """A connection pool and its threads (watchdog, renewals) for one
    database: dblock_client_open. Thread-safe: share one per process.

    url       postgres://..., mysql://... (mariadb://), sqlite:///path; None:
              the DBLOCK_URL environment variable
    strategy  "insert" (default), "for_update", "optimistic"
    lease     the lease in seconds, renewed while held (30)
    on_lost   called as on_lost(name, fence) when a held lock is lost, on one
              of the client's threads; dblock calls that talk to the
              database raise Deadlock from inside it
    reentrant False: a second acquire of a held name by the same thread
              raises Deadlock at once
    The other keywords are dblock_options' fields in seconds or as named
    (docs/python.md). C log lines go to the "dblock" logger.
    """

    def __init__(self, url: Optional[str] = None, *, strategy: str = "insert",
                 lease: float = 30.0, table: Optional[str] = None,
                 on_lost: Optional[Callable[[str, int], Any]] = None, reentrant: bool = True,
                 fair: bool = False, read_only: bool = False, pool_size: Optional[int] = None,
                 connect_timeout: Optional[float] = None, call_timeout: Optional[float] = None,
                 loss_margin: Optional[float] = None, owner_host: Optional[str] = None,
                 reaper_interval: Optional[float] = None, reaper_grace: Optional[float] = None,
                 backoff_min: Optional[float] = None, backoff_max: Optional[float] = None) -> None:
        self._c: Optional[int] = None
        self._pid = os.getpid()
        o = Options()
        o.version = OPTIONS_VERSION
        st = ctypes.c_int()
        if not isinstance(strategy, str) or lib.dblock_strategy_parse(
                ctypes.byref(st), strategy.encode()) != 0:
            raise InvalidArgument("unknown strategy %r (insert, for_update, optimistic)" % (strategy,),
                                  InvalidArgument.code)
        o.strategy = st.value
        o.lease_ms = _ms(lease, "lease", zero_ok=False)
        for field, value in (("connect_timeout_ms", connect_timeout),
                             ("call_timeout_ms", call_timeout), ("loss_margin_ms", loss_margin),
                             ("reaper_interval_ms", reaper_interval),
                             ("backoff_min_ms", backoff_min), ("backoff_max_ms", backoff_max)):
            if value is not None:
                setattr(o, field, _ms(value, field[:-3], zero_ok=False))
        if reaper_grace is not None:
            o.reaper_grace_ms = _ms(reaper_grace, "reaper_grace", zero_ok=True)
        if pool_size is not None:
            if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
                raise InvalidArgument("pool_size must be an int >= 1, not %r" % (pool_size,),
                                      InvalidArgument.code)
            o.pool_size = pool_size
        self._keep = []  # (strings and callbacks C points at: alive as long as the client)
        for field, value in (("table", table), ("owner_host", owner_host)):
            if value is not None:
                if not isinstance(value, str):
                    raise InvalidArgument("%s must be a str" % field, InvalidArgument.code)
                b = ctypes.create_string_buffer(value.encode())
                self._keep.append(b)
                setattr(o, field, ctypes.cast(b, ctypes.c_char_p))
        o.non_reentrant = 0 if reentrant else 1
        o.fair = 1 if fair else 0
        o.read_only = 1 if read_only else 0
        # (the SQL function of dblock_check for this lock table)
        self._check_fn = table + "_check" if table and table != "dblock_locks" else "dblock_check"
        self._user_on_lost = on_lost
        self._held: Dict[Tuple[bytes, int], "weakref.WeakSet[Lock]"] = {}
        me = weakref.ref(self)

        def lost_cb(name: bytes, fence: int, reason: int, arg: Any) -> None:
            c = me()
            if c is not None:
                c._lost(name, fence)

        def log_cb(level: int, msg: bytes, arg: Any) -> None:
            _log.log(logging.WARNING if level <= 1 else logging.INFO, "%s", _text(msg))

        self._lost_fn = LOST_FN(lost_cb)
        self._log_fn = LOG_FN(log_cb)
        o.on_lost = self._lost_fn
        o.log = self._log_fn
        o.log_level = 2 if _log.isEnabledFor(logging.INFO) else 1
        if url is not None and not isinstance(url, str):
            raise InvalidArgument("url must be a str or None", InvalidArgument.code)
        # (the cancel bookkeeping: see the module's comment)
        self._cx = threading.Condition(threading.Lock())
        self._active: Set[_Wait] = set()
        self._pending = 0
        self._user_cancel = False
        box = ctypes.c_void_p()
        _check(lib.dblock_client_open(ctypes.byref(box), url.encode() if url else None,
                                      ctypes.byref(o)))
        self._c = box.value
        _open_clients.add(self)

    def __repr__(self) -> str:
        if self._c is None:
            return "<dblock.Client closed>"
        return "<dblock.Client %s %s>" % (self.backend, self.strategy)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Frees the client (dblock_client_free): leased locks still held
        expire, for_update ones end with their sessions; their Lock
        objects become unusable. Losses not yet told are told first.
        Calling it again does nothing."""
        c, self._c = self._c, None
        if c is None:
            return
        _open_clients.discard(self)
        with self._cx:
            held = [lk for locks in self._held.values() for lk in locks]
            self._held.clear()
        for lk in held:
            lk._h = None
            holder, lk._holder = lk._holder, None
            if holder is not None:
                holder.finish()  # (its thread ends: nothing left to serve)
        lib.dblock_client_free(c)

    # -- properties
    @property
    def backend(self) -> str:
        """"postgres", "mysql" or "sqlite"."""
        return lib.dblock_client_backend(self._handle()).decode()

    @property
    def strategy(self) -> str:
        """"insert", "for_update" or "optimistic"."""
        return lib.dblock_strategy_name(lib.dblock_client_strategy(self._handle())).decode()

    @property
    def round_trips(self) -> int:
        """Statements sent to the server so far (for tests and benchmarks)."""
        return int(lib.dblock_client_round_trips(self._handle()))

    # -- locks
    def lock(self, name: str, *, wait: Optional[float] = None, lease: Optional[float] = None,
             on_lost: Optional[Callable[[Lock], Any]] = None,
             cancel_on_lost: bool = False) -> Lock:
        """A Lock for name (nothing is acquired yet).

        wait            None: wait forever (the default); 0: try once; seconds
        lease           None: the client's lease, renewed while held;
                        seconds: an explicit lease, not renewed (lk.renew())
        on_lost         called as on_lost(lock) when this hold is lost
        cancel_on_lost  asyncio: cancel the task that holds it when it is lost
        """
        self._handle()
        return Lock(self, name, wait, lease, on_lost, cancel_on_lost)

    def migrate(self) -> int:
        """Applies pending migrations; returns how many were applied now."""
        n = ctypes.c_int()
        _check(lib.dblock_migrate(self._handle(), ctypes.byref(n)))
        return n.value

    def inspect(self, name: str) -> Optional[LockInfo]:
        """What the database knows about name; None when it has no row."""
        info = _CLockInfo()
        rc = lib.dblock_lock_inspect(ctypes.byref(info), self._handle(), _name_bytes(name))
        if rc == _errors.NotHeld.code:
            return None
        _check(rc)
        return LockInfo._from_c(info)

    def list(self, limit: int = 0) -> List[LockInfo]:
        """Every lock row (at most limit when limit > 0)."""
        arr = ctypes.POINTER(_CLockInfo)()
        n = ctypes.c_size_t()
        _check(lib.dblock_lock_list(ctypes.byref(arr), ctypes.byref(n), self._handle(), int(limit)))
        try:
            return [LockInfo._from_c(arr[i]) for i in range(n.value)]
        finally:
            libc.free(arr)

    def doctor(self) -> List[Finding]:
        """Whether the server keeps dblock's promises (dblock_doctor)."""
        arr = ctypes.POINTER(_CFinding)()
        n = ctypes.c_size_t()
        _check(lib.dblock_doctor(ctypes.byref(arr), ctypes.byref(n), self._handle()))
        try:
            return [Finding(_SEVERITIES[f.severity] if 0 <= f.severity < 4 else str(f.severity),
                            _text(f.topic), _text(f.text), _text(f.advice))
                    for f in (arr[i] for i in range(n.value))]
        finally:
            libc.free(arr)

    def stats(self) -> Stats:
        """The client's counters since it was opened (dblock_client_stats)."""
        s = _CStats()
        _check(lib.dblock_client_stats(self._handle(), ctypes.byref(s), ctypes.sizeof(s)))
        v = {f: getattr(s, f) for f, _ in _CStats._fields_}
        v["wait_ms"] = tuple(s.wait_ms)
        return Stats(**v)

    def force_unlock(self, name: str) -> int:
        """Frees name whoever holds it; returns the advanced fence."""
        f = ctypes.c_int64()
        _check(lib.dblock_force_unlock(self._handle(), _name_bytes(name), ctypes.byref(f)))
        return f.value

    def forget(self, name: str) -> None:
        """Deletes the row of a name nobody holds (NotHeld: no row; Busy: held)."""
        _check(lib.dblock_forget(self._handle(), _name_bytes(name)))

    def reap(self, grace: float = 0.0) -> int:
        """One reaper pass; returns how many expired rows were deleted."""
        n = ctypes.c_int64()
        _check(lib.dblock_reap(self._handle(), _ms(grace, "grace", zero_ok=True), 0, ctypes.byref(n)))
        return n.value

    def cancel(self) -> None:
        """Cancels every wait of this client, now and until cancel_clear():
        they raise dblock.Canceled. Held locks are untouched."""
        with self._cx:
            self._user_cancel = True
            lib.dblock_client_cancel(self._handle())

    def cancel_clear(self) -> None:
        """Ends the cancelled state of cancel()."""
        with self._cx:
            self._user_cancel = False
            if self._pending == 0:
                lib.dblock_client_cancel_clear(self._handle())
            self._cx.notify_all()

    # -- internals
    def _check_pid(self) -> None:
        if self._pid != os.getpid():
            raise InvalidArgument(
                "this dblock.Client was opened in process %d and cannot be used in a forked child "
                "(process %d): open a new Client in the child" % (self._pid, os.getpid()),
                InvalidArgument.code)

    def _handle(self) -> int:
        self._check_pid()
        if self._c is None:
            raise InvalidArgument("the dblock.Client is closed", InvalidArgument.code)
        return self._c

    def _held_add(self, lk: Lock) -> None:
        with self._cx:
            self._held.setdefault((lk._bname, lk._fence), weakref.WeakSet()).add(lk)

    def _held_discard(self, lk: Lock) -> None:
        with self._cx:
            s = self._held.get((lk._bname, lk._fence))
            if s is not None:
                s.discard(lk)
                if not s:
                    del self._held[(lk._bname, lk._fence)]

    def _lost(self, name: bytes, fence: int) -> None:
        """The C on_lost, on one of the client's threads."""
        with self._cx:
            locks = list(self._held.get((name, fence), ()))
        for lk in locks:
            lk._told_lost()
        if self._user_on_lost is not None:
            try:
                self._user_on_lost(_text(name), fence)
            except Exception:
                _log.exception("dblock: the client's on_lost callback raised")

    def _cancel_wait(self, w: _Wait, by_signal: bool = False) -> None:
        """Cancels the one wait w (if it is still waiting)."""
        with self._cx:
            if w not in self._active or w.requested or self._c is None:
                return
            w.requested = True
            w.by_signal = by_signal
            self._pending += 1
            lib.dblock_client_cancel(self._c)

    def _wait_end(self, w: _Wait) -> None:
        with self._cx:
            self._active.discard(w)
            if w.requested:
                self._pending -= 1
                if self._pending == 0 and not self._user_cancel and self._c is not None:
                    lib.dblock_client_cancel_clear(self._c)
                    self._cx.notify_all()

    def _acquire(self, box: ctypes.c_void_p, bname: bytes, wait_ms: int, lease_ms: int,
                 w: _Wait) -> None:
        """dblock_lock_acquire with the Python side of waiting (see the
        module's comment). On return box holds the handle; raises
        otherwise."""
        c = self._handle()
        deadline = None if wait_ms < 0 else time.monotonic() + wait_ms / 1000
        watched = wait_ms != 0 and _SIGNALS.start(lambda: self._cancel_wait(w, by_signal=True))
        try:
            while True:
                if deadline is None:
                    left = -1
                else:
                    left = max(0, int((deadline - time.monotonic()) * 1000))
                    if left == 0 and wait_ms != 0:
                        left = 1  # (a retried wait whose time is up: one last short try)
                with self._cx:
                    self._active.add(w)
                    w.requested = w.by_signal = False
                try:
                    rc = lib.dblock_lock_acquire(ctypes.byref(box), c, bname, left, lease_ms)
                    if rc != 0:
                        info = ErrorInfo()
                        lib.dblock_last_error(ctypes.byref(info))
                finally:
                    self._wait_end(w)
                if rc == 0:
                    return
                if rc == _ECANCELED and w.requested:
                    if not w.by_signal:
                        raise _errors.Canceled("the wait for %r was cancelled" % _text(bname),
                                               _ECANCELED)
                    if _check_signals() != 0:  # (raises what the handler raised)
                        raise KeyboardInterrupt
                    continue  # a handler that raised nothing: wait on
                if rc == _ECANCELED and not self._user_cancel:
                    # another wait's cancel cut this one: wait it out, go on
                    with self._cx:
                        self._cx.wait_for(lambda: self._pending == 0 or self._user_cancel,
                                          None if deadline is None else
                                          max(0.05, deadline - time.monotonic()))
                    continue
                if rc == _EBUSY and wait_ms != 0:
                    rc = _errors.Timeout.code  # (the retried wait's last try)
                    info.code = 0
                if info.code == rc and info.message:
                    raise _errors.from_code(rc, _text(info.message),
                                            info.sqlstate.decode("ascii", "replace"), info.native)
                raise _errors.from_code(rc, lib.dblock_strerror(rc).decode())
        finally:
            if watched:
                _SIGNALS.stop()
