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
    wait can be cancelled alone, each wait carries its own request (a
    task's cancel, a signal), read by its loop before every C call and
    delivered by dblock_client_cancel while it is inside one; the C
    cancelled state ends (_settle) once no wait in C asked for it. Any
    other wait that was cut meanwhile waits for that and goes on with the
    time it has left.
  - A KeyboardInterrupt can be raised between almost any two bytecodes of
    the main thread, so the bookkeeping uses plain locks in `with` (a
    Python-level __enter__ could be interrupted after its acquire), never
    a Condition, and changes each count together with the flag that
    undoes it (Client._run); a grant separated from its Lock object by the
    interrupt is released (Lock._acquire).
  - close() refuses new calls, cancels the waits and waits for the calls
    in flight before it frees the C client (which does not wait for
    calls on other threads).
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
import re
import select
import signal
import sys
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
    _raise_info(rc, info)


def _check(rc: int) -> None:
    if rc != 0:
        _raise_last(rc)


def _name_bytes(name: Any) -> bytes:
    """A lock name as the C library takes it: 1..255 bytes of UTF-8, no NUL."""
    b = _c_string(name, "lock name")
    if not b or len(b) > NAME_MAX:
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
        # (nested waits on the main thread — one in a signal handler that
        # ran during another — stack; the innermost is the one in C)
        self._on: List[Callable[[], None]] = []
        self._thread: Optional[threading.Thread] = None
        self._thread_pid = 0

    def start(self, on_signal: Callable[[], None]) -> bool:
        """From the main thread only; False when signals cannot be watched
        (another thread, a subinterpreter). Each True is paired with one
        stop()."""
        if threading.current_thread() is not threading.main_thread():
            return False
        with self._mu:
            if self._r < 0 or self._thread_pid != os.getpid():
                self._r, self._w = os.pipe()
                os.set_blocking(self._r, False)
                os.set_blocking(self._w, False)
                self._on = []
                self._thread = threading.Thread(target=self._run, args=(self._r,),
                                                name="dblock-signals", daemon=True)
                self._thread_pid = os.getpid()
                self._thread.start()
            if self._on:
                self._on.append(on_signal)
                return True
        try:
            old = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            return False
        with self._mu:
            # (our own pipe: a stop() cut short by an interrupt; the fd set
            # before that is not known any more)
            self._old = -1 if old == self._w else old
            self._on.append(on_signal)
        return True

    def stop(self) -> None:
        with self._mu:
            if self._on:
                self._on.pop()
            if self._on:
                return
            old = self._old
        try:
            # (the flag it had is not readable: asyncio's, which sets one, uses False)
            signal.set_wakeup_fd(old, warn_on_full_buffer=False)
        except (ValueError, OSError):
            pass

    def _run(self, r: int) -> None:
        while True:
            try:
                select.select([r], [], [])
                data = os.read(r, 512)
            except BlockingIOError:
                continue
            except OSError:
                return
            with self._mu:
                on, old = (self._on[-1] if self._on else None), self._old
            if old >= 0 and old != self._w:
                try:
                    os.write(old, data)
                except OSError:
                    pass
            if on is not None:
                on()


_SIGNALS = _SignalWatch()


class _Wait:
    """One acquire in progress (see the module's comment). cancel: a
    cancel asked for it alone (an asyncio task's), sticky; signalled: a
    signal arrived during it (handled, then cleared); in_c: it is inside
    dblock_lock_acquire now, so a request needs the C cancel to reach it.
    All three are read and written under the client's _cx."""
    __slots__ = ("cancel", "signalled", "in_c", "tid")

    def __init__(self) -> None:
        self.cancel = False
        self.signalled = False
        self.in_c = False
        self.tid = 0


_tls = threading.local()


def _in_callback() -> bool:
    """Whether this thread is running the client's on_lost or log hook."""
    return getattr(_tls, "callback", 0) > 0


def _deadlock(what: str) -> _errors.Deadlock:
    return _errors.Deadlock("%s from inside on_lost or the log hook: note the loss and act on "
                            "the owning thread" % what, _errors.Deadlock.code)


# ---- the lock --------------------------------------------------------------

class Lock:
    """One hold of a named lock: client.lock(name, ...).

    Use it as a context manager (``with``: acquire or raise Busy/Timeout,
    release at the end), in the threading style (``acquire(blocking=True,
    timeout=-1)`` returning True/False, then ``release()``), or with
    asyncio (``async with``). After a release the object can be acquired
    again. One Lock object is one hold, taken by one thread or task at a
    time: another thread that wants the name takes its own
    client.lock(name) (a second acquire of an object that is held or being
    acquired raises InvalidArgument). A second hold of the same name by the
    same thread (reentrant, counted by the database row) is also a second
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
        # (_mu guards the handle: an accessor on one thread never uses a
        # handle a release on another has freed)
        self._mu = threading.Lock()
        self._h: Optional[int] = None
        self._busy = False  # an acquire is in progress
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
        if self._lost_told:  # (no lock taken: safe inside on_lost)
            return True
        return bool(self._with_handle(lambda h: lib.dblock_lock_is_lost(h), None, False))

    @property
    def hold_count(self) -> int:
        """This owner's holds on the name (1 + reentrant holds)."""
        return int(self._with_handle(lib.dblock_lock_hold_count, "hold_count"))

    @property
    def expires_at(self) -> Optional[datetime.datetime]:
        """The lease's end by the server's clock as last granted or renewed;
        None for for_update (no lease)."""
        return _when(self._with_handle(lib.dblock_lock_expires_at, "expires_at"))

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
            raise self._not_held()
        root = type(cursor).__module__.split(".")[0]
        style = getattr(sys.modules.get(root), "paramstyle", None)
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
            self._acquire_here(wait_ms)
        except (_errors.Busy, _errors.Timeout):
            return False
        return True

    def release(self) -> None:
        """Releases the hold. Raises Lost if it had been lost (the handle is
        freed all the same), NotHeld if this object holds nothing."""
        self._call_owner(self._release_now)

    def renew(self) -> None:
        """Extends the lease by the lease it was acquired with (for_update:
        checks the session is alive). Raises Lost if the lock is gone."""
        self._call_owner(lambda: _check(self._with_handle(lib.dblock_lock_renew, "renew")))

    # -- context managers
    def __enter__(self) -> "Lock":
        self._acquire_here(self._wait_ms)
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
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
        loop = asyncio.get_running_loop()
        self._begin()
        w = _Wait()
        holder = _Holder(self, wait_ms, w)
        self._holder = holder  # (before it can grant: a release finds it)
        try:
            holder.start()
        except BaseException:
            self._holder = None
            self._end(None)
            raise
        fut = asyncio.wrap_future(holder.granted)
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            self._client._request(w, by_signal=False)
            # (wait for the wait to end, whatever further cancels come: a
            # grant that won the race must be released, not leaked)
            while not fut.done():
                try:
                    await asyncio.shield(fut)
                except asyncio.CancelledError:
                    pass
                except BaseException:
                    break
            if self._h is not None:
                try:
                    await asyncio.wrap_future(holder.submit(self._release_now))
                except Exception:
                    _log.exception("dblock: releasing %r after its task was cancelled", self)
            raise
        if self._cancel_on_lost:
            task = asyncio.current_task()
            self._task = (loop, task)  # type: ignore[assignment]
            if self._lost_told and task is not None:  # (lost before the task resumed)
                loop.call_soon(task.cancel)

    async def release_async(self) -> None:
        """asyncio release (the round trip runs off the event loop)."""
        holder = self._holder
        if holder is None:
            await asyncio.get_running_loop().run_in_executor(None, self._release_now)
        else:
            await asyncio.wrap_future(holder.submit(self._release_now))

    # -- internals
    def _not_held(self) -> _errors.NotHeld:
        return _errors.NotHeld("lock %r is not held by this Lock object" % self._name,
                               _errors.NotHeld.code)

    def _begin(self) -> None:
        """Claims the object for one acquire (refusing a second)."""
        self._client._check_pid()
        with self._mu:
            if self._h is not None or self._busy:
                raise InvalidArgument(
                    "this dblock.Lock object for %r is %s; another thread or task takes its own "
                    "client.lock(name)" % (self._name, "held" if self._h is not None else
                                           "being acquired"), InvalidArgument.code)
            self._busy = True

    def _end(self, h: Optional[int], fence: int = 0) -> None:
        """Ends the acquire: the handle granted and its fence (or None)."""
        if h is None:
            self._busy = False
            return
        self._fence = fence
        self._lost_told = False
        self._client._held_add(self)  # (first: on_lost finds it once it is held)
        with self._mu:
            self._h = h
            self._busy = False

    def _acquire_here(self, wait_ms: int) -> None:
        self._begin()
        self._acquire(wait_ms, _Wait())

    def _acquire(self, wait_ms: int, w: _Wait) -> None:
        """Acquires on the calling thread (the object claimed by _begin)
        or raises holding nothing: a grant that an exception (a
        KeyboardInterrupt between two bytecodes) separates from the
        caller is released, else the watchdog would renew it for ever."""
        box = ctypes.c_void_p()
        done = False
        try:
            fence = self._client._acquire(box, self._bname, wait_ms, self._lease_ms, w)
            self._end(box.value, fence)
            done = True
        finally:
            if not done:
                # (the caller sees an exception, so it holds nothing: a
                # grant already handed to the object is taken back too)
                self._busy = False  # (first: a second interrupt must not leave it claimed)
                h = box.value
                if h:
                    with self._mu:
                        if self._h == h:
                            self._h = None
                    self._client._held_discard(self)
                    try:
                        self._client._run(lambda c: lib.dblock_lock_release(h))
                    except InvalidArgument:
                        pass  # (the client is closing: the hold ends with it)

    def _locked(self, fn: Callable[[], Any], what: str) -> Any:
        """fn() under the object's mutex; from inside on_lost only if no
        release holds it right now. (`with` on the C-level lock, not
        acquire + try: a KeyboardInterrupt between those would leave it
        held.)"""
        self._client._check_pid()  # (a mutex copied held by fork would hang the child)
        if _in_callback():  # (never the main thread: no KeyboardInterrupt here)
            if not self._mu.acquire(blocking=False):
                raise _deadlock("Lock.%s while another thread releases it" % what)
            try:
                return fn()
            finally:
                self._mu.release()
        with self._mu:
            return fn()

    def _with_handle(self, fn: Callable[[int], Any], what: Optional[str], none: Any = 0) -> Any:
        """fn(handle) under the object's mutex; NotHeld (or none, when what
        is None) if nothing is held."""
        def call() -> Any:
            h = self._h
            if h is None:
                if what is None:
                    return none
                raise self._not_held()
            return self._client._run(lambda c: fn(h))
        return self._locked(call, what or "lost")

    def _call_owner(self, fn: Callable[[], Any]) -> Any:
        self._client._check_pid()  # (a forked child has no hold thread to wait for)
        holder = self._holder
        if holder is None or threading.current_thread() is holder:
            return fn()
        if _in_callback():
            # (the hold thread would wait in C for this very callback)
            raise _deadlock("releasing or renewing an asyncio-held lock")
        return holder.submit(fn).result()

    def _release_now(self) -> None:
        info = ErrorInfo()

        def release(c: int) -> int:
            # (dropped before the call frees it: a KeyboardInterrupt right
            # after the call must not leave a freed handle behind)
            h, self._h = self._h, None
            rc = lib.dblock_lock_release(h)
            if rc != 0:
                lib.dblock_last_error(ctypes.byref(info))
            if rc == _errors.Deadlock.code:  # (EDEADLK: from on_lost; the handle stays)
                self._h = h
            return rc

        def locked() -> int:
            if self._h is None:
                raise self._not_held()
            return self._client._run(release)

        rc = self._locked(locked, "release")
        if rc == _errors.Deadlock.code:
            raise _deadlock("Lock.release")
        self._client._held_discard(self)
        holder, self._holder, self._task = self._holder, None, None
        if holder is not None:
            holder.finish()
        if rc != 0:
            _raise_info(rc, info)

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
    by another acquire while it lasts. A call submitted once it has ended
    (the acquire failed, the hold was released, the client closed) fails
    with NotHeld instead of waiting for ever."""

    def __init__(self, lk: Lock, wait_ms: int, w: _Wait) -> None:
        super().__init__(name="dblock-hold:" + lk.name, daemon=True)
        self._lk = lk
        self._wait_ms = wait_ms
        self._w = w
        self.granted: concurrent.futures.Future = concurrent.futures.Future()  # type: ignore[type-arg]
        self._mu = threading.Lock()
        self._ended = False
        self._calls: List[Tuple[Callable[[], Any], concurrent.futures.Future]] = []  # type: ignore[type-arg]
        self._more = threading.Semaphore(0)

    def run(self) -> None:
        try:
            self._lk._acquire(self._wait_ms, self._w)
        except BaseException as e:
            if self._lk._holder is self:
                self._lk._holder = None
            self.granted.set_exception(e)
            self._end()
            return
        self.granted.set_result(None)
        while True:
            self._more.acquire()
            with self._mu:
                if not self._calls:
                    break  # (finish())
                fn, f = self._calls.pop(0)
            try:
                f.set_result(fn())
            except BaseException as e:
                f.set_exception(e)
        self._end()

    def _end(self) -> None:
        """No more calls: those still queued fail."""
        with self._mu:
            self._ended = True
            left, self._calls = self._calls, []
        for _, f in left:
            f.set_exception(_errors.NotHeld("lock %r: its hold has ended" % self._lk.name,
                                            _errors.NotHeld.code))

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:  # type: ignore[type-arg]
        f: concurrent.futures.Future = concurrent.futures.Future()  # type: ignore[type-arg]
        with self._mu:
            if not self._ended:
                self._calls.append((fn, f))
                self._more.release()
                return f
        f.set_exception(_errors.NotHeld("lock %r: its hold has ended" % self._lk.name,
                                        _errors.NotHeld.code))
        return f

    def finish(self) -> None:
        """Ends the thread after the calls queued so far."""
        with self._mu:
            if not self._ended:
                self._ended = True
                self._more.release()


def _raise_info(rc: int, info: ErrorInfo) -> None:
    if info.code == rc and info.message:
        raise _errors.from_code(rc, _text(info.message), info.sqlstate.decode("ascii", "replace"),
                                info.native)
    raise _errors.from_code(rc, lib.dblock_strerror(rc).decode())


def _c_string(value: Any, what: str) -> bytes:
    """A str option as the C library takes it (UTF-8, no NUL)."""
    if not isinstance(value, str):
        raise InvalidArgument("%s must be a str, not %s" % (what, type(value).__name__),
                              InvalidArgument.code)
    try:
        b = value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("%s is not valid UTF-8" % what, InvalidArgument.code) from None
    if b"\0" in b:
        raise InvalidArgument("%s contains a NUL character" % what, InvalidArgument.code)
    return b


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
        if lib.dblock_strategy_parse(ctypes.byref(st), _c_string(strategy, "strategy")) != 0:
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
            if isinstance(pool_size, bool) or not isinstance(pool_size, int) or \
                    not 1 <= pool_size <= 10000:
                raise InvalidArgument("pool_size must be an int from 1 to 10000, not %r" % (pool_size,),
                                      InvalidArgument.code)
            o.pool_size = pool_size
        if table is not None and (not isinstance(table, str) or
                                  not re.fullmatch(r"[a-z_][a-z0-9_]{0,39}", table)):
            raise InvalidArgument("table must be a lowercase identifier [a-z_][a-z0-9_]* of at most "
                                  "40 bytes, not %r" % (table,), InvalidArgument.code)
        self._keep = []  # (strings and callbacks C points at: alive as long as the client)
        for field, value in (("table", table), ("owner_host", owner_host)):
            if value is not None:
                b = ctypes.create_string_buffer(_c_string(value, field))
                self._keep.append(b)
                setattr(o, field, ctypes.cast(b, ctypes.c_char_p))
        # (the SQL function of dblock_check for this lock table)
        self._check_fn = table + "_check" if table and table != "dblock_locks" else "dblock_check"
        o.non_reentrant = 0 if reentrant else 1
        o.fair = 1 if fair else 0
        o.read_only = 1 if read_only else 0
        self._user_on_lost = on_lost
        self._held: Dict[Tuple[bytes, int], "weakref.WeakSet[Lock]"] = {}
        me = weakref.ref(self)

        def lost_cb(name: bytes, fence: int, reason: int, arg: Any) -> None:
            c = me()
            if c is not None:
                _tls.callback = getattr(_tls, "callback", 0) + 1
                try:
                    c._lost(name, fence)
                finally:
                    _tls.callback -= 1

        def log_cb(level: int, msg: bytes, arg: Any) -> None:
            _tls.callback = getattr(_tls, "callback", 0) + 1
            try:
                _log.log(logging.WARNING if level <= 1 else logging.INFO, "%s", _text(msg))
            finally:
                _tls.callback -= 1

        self._lost_fn = LOST_FN(lost_cb)
        self._log_fn = LOG_FN(log_cb)
        o.on_lost = self._lost_fn
        o.log = self._log_fn
        o.log_level = 2 if _log.isEnabledFor(logging.INFO) else 1
        burl = None if url is None else _c_string(url, "url")
        # (the waits' and calls' bookkeeping: see the module's comment)
        # (a plain lock, never a Condition: a KeyboardInterrupt raised in a
        # Python-level __enter__ after the acquire would leave it held; the
        # few waits on it poll instead)
        self._cx = threading.Lock()
        self._waits: Set[_Wait] = set()  # (a set: waits nest on one thread, in a signal handler)
        self._c_cancelled = False  # dblock_client_cancel called, not yet cleared
        self._user_cancel = False
        self._closing = False
        self._calls: Dict[int, int] = {}  # C calls in flight on this client, by thread
        box = ctypes.c_void_p()
        _check(lib.dblock_client_open(ctypes.byref(box), burl, ctypes.byref(o)))
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
        """Frees the client (dblock_client_free) once the calls in flight on
        other threads have ended — waits are cancelled (they raise
        Canceled), other calls end within the call limit; called where a
        call of this thread is in flight (a signal handler), the last one
        to end frees it. Leased locks still held expire, for_update ones
        end with their sessions; their Lock objects become unusable. Losses
        not yet told are told first. Calling it again does nothing."""
        if self._pid != os.getpid() or getattr(self, "_cx", None) is None:
            return  # (a forked child's copy: the parent's to free; or never opened)
        if _in_callback():
            raise _deadlock("Client.close")
        me = threading.get_ident()
        with self._cx:
            if self._c is None:
                return
            self._closing = True  # (new calls refused; the last _run frees)
            if self._waits:
                self._c_cancelled = True
                lib.dblock_client_cancel(self._c)
        while True:  # (the calls in flight end: waits are cancelled, calls are bounded)
            with self._cx:
                if not self._calls:
                    break
                if set(self._calls) == {me}:
                    return  # (this thread's own calls: the last of them frees)
            time.sleep(0.002)
        self._free()

    def _free(self) -> None:
        """dblock_client_free, once: by close() or by the last call in
        flight after it."""
        with self._cx:
            c, self._c = self._c, None
            if c is None:
                return
            held = [lk for locks in self._held.values() for lk in locks]
            self._held.clear()
        _open_clients.discard(self)
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
        return self._run(lambda c: lib.dblock_client_backend(c).decode())

    @property
    def strategy(self) -> str:
        """"insert", "for_update" or "optimistic"."""
        return self._run(lambda c: lib.dblock_strategy_name(lib.dblock_client_strategy(c)).decode())

    @property
    def round_trips(self) -> int:
        """Statements sent to the server so far (for tests and benchmarks)."""
        return self._run(lambda c: int(lib.dblock_client_round_trips(c)))

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
        self._run(lambda c: None)
        return Lock(self, name, wait, lease, on_lost, cancel_on_lost)

    def migrate(self) -> int:
        """Applies pending migrations; returns how many were applied now."""
        n = ctypes.c_int()
        self._call(lib.dblock_migrate, ctypes.byref(n))
        return n.value

    def inspect(self, name: str) -> Optional[LockInfo]:
        """What the database knows about name; None when it has no row."""
        info = _CLockInfo()
        b = _name_bytes(name)
        rc = self._run(lambda c: lib.dblock_lock_inspect(ctypes.byref(info), c, b))
        if rc == _errors.NotHeld.code:
            return None
        _check(rc)  # (the per-thread last error: still this call's)
        return LockInfo._from_c(info)

    def list(self, limit: int = 0) -> List[LockInfo]:
        """Every lock row (at most limit when limit > 0)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= 2 ** 31 - 1:
            raise InvalidArgument("limit must be an int >= 0, not %r" % (limit,), InvalidArgument.code)
        arr = ctypes.POINTER(_CLockInfo)()
        n = ctypes.c_size_t()
        self._run(lambda c: _check(lib.dblock_lock_list(ctypes.byref(arr), ctypes.byref(n), c, limit)))
        try:
            return [LockInfo._from_c(arr[i]) for i in range(n.value)]
        finally:
            libc.free(arr)

    def doctor(self) -> List[Finding]:
        """Whether the server keeps dblock's promises (dblock_doctor)."""
        arr = ctypes.POINTER(_CFinding)()
        n = ctypes.c_size_t()
        self._run(lambda c: _check(lib.dblock_doctor(ctypes.byref(arr), ctypes.byref(n), c)))
        try:
            return [Finding(_SEVERITIES[f.severity] if 0 <= f.severity < 4 else str(f.severity),
                            _text(f.topic), _text(f.text), _text(f.advice))
                    for f in (arr[i] for i in range(n.value))]
        finally:
            libc.free(arr)

    def stats(self) -> Stats:
        """The client's counters since it was opened (dblock_client_stats)."""
        s = _CStats()
        self._run(lambda c: _check(lib.dblock_client_stats(c, ctypes.byref(s), ctypes.sizeof(s))))
        v = {f: getattr(s, f) for f, _ in _CStats._fields_}
        v["wait_ms"] = tuple(s.wait_ms)
        return Stats(**v)

    def force_unlock(self, name: str) -> int:
        """Frees name whoever holds it; returns the advanced fence."""
        f = ctypes.c_int64()
        self._call(lib.dblock_force_unlock, _name_bytes(name), ctypes.byref(f))
        return f.value

    def forget(self, name: str) -> None:
        """Deletes the row of a name nobody holds (NotHeld: no row; Busy: held)."""
        self._call(lib.dblock_forget, _name_bytes(name))

    def reap(self, grace: float = 0.0) -> int:
        """One reaper pass; returns how many expired rows were deleted."""
        n = ctypes.c_int64()
        self._call(lib.dblock_reap, _ms(grace, "grace", zero_ok=True), 0, ctypes.byref(n))
        return n.value

    def cancel(self) -> None:
        """Cancels every wait of this client, now and until cancel_clear():
        they raise dblock.Canceled. Held locks are untouched."""
        def cancel(c: int) -> None:
            with self._cx:
                self._user_cancel = True
                self._c_cancelled = True
                lib.dblock_client_cancel(c)
        self._run(cancel)

    def cancel_clear(self) -> None:
        """Ends the cancelled state of cancel()."""
        def clear(c: int) -> None:
            with self._cx:
                self._user_cancel = False
                self._settle()
        self._run(clear)

    # -- internals
    def _check_pid(self) -> None:
        if self._pid != os.getpid():
            raise InvalidArgument(
                "this dblock.Client was opened in process %d and cannot be used in a forked child "
                "(process %d): open a new Client in the child" % (self._pid, os.getpid()),
                InvalidArgument.code)

    def _run(self, fn: Callable[[int], Any]) -> Any:
        """fn(the C client), counted as a call in flight so that close()
        waits for it. (No context manager: a KeyboardInterrupt inside a
        Python-level __enter__ could count a call that never ends; here
        the count and the flag that undoes it change with nothing in
        between that can raise.)"""
        self._check_pid()
        me = threading.get_ident()
        counted = False
        try:
            with self._cx:
                if self._c is None or self._closing:
                    raise InvalidArgument("the dblock.Client is closed", InvalidArgument.code)
                self._calls[me] = self._calls.get(me, 0) + 1
                counted = True
                c = self._c
            return fn(c)
        finally:
            if counted:
                with self._cx:
                    n = self._calls[me] - 1
                    if n:
                        self._calls[me] = n
                    else:
                        del self._calls[me]
                    last = self._closing and not self._calls
                if last and not _in_callback():
                    self._free()

    def _call(self, fn: Callable[..., int], *args: Any) -> None:
        """fn(the C client, *args), raising its failure."""
        self._run(lambda c: _check(fn(c, *args)))

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

    def _request(self, w: _Wait, by_signal: bool) -> None:
        """Asks the one wait w to end: a task's cancel (sticky) or a
        signal. Reaches it in C through dblock_client_cancel; between two
        C calls, through the flag its loop reads."""
        with self._cx:
            if by_signal:
                w.signalled = True
            else:
                w.cancel = True
            if w.in_c and self._c is not None:
                self._c_cancelled = True
                lib.dblock_client_cancel(self._c)

    def _settle(self) -> None:
        """Ends the C client's cancelled state once nothing needs it: no
        wait in C asked to end, no cancel() and no close(). Caller holds
        _cx."""
        if not self._c_cancelled or self._user_cancel or self._closing or self._c is None:
            return
        if any(x.in_c and (x.cancel or x.signalled) for x in self._waits):
            return
        lib.dblock_client_cancel_clear(self._c)
        self._c_cancelled = False

    def _acquire(self, box: ctypes.c_void_p, bname: bytes, wait_ms: int, lease_ms: int,
                 w: _Wait) -> int:
        """dblock_lock_acquire with the Python side of waiting (see the
        module's comment). On return box holds the handle and the grant's
        fence is returned; raises otherwise."""
        return self._run(lambda c: self._wait(c, box, bname, wait_ms, lease_ms, w))

    def _wait(self, c: int, box: ctypes.c_void_p, bname: bytes, wait_ms: int, lease_ms: int,
              w: _Wait) -> int:
        """_acquire's loop, with the C client c counted as in flight."""
        deadline = None if wait_ms < 0 else time.monotonic() + wait_ms / 1000
        w.tid = threading.get_ident()
        with self._cx:
            # (a wait of this thread's that is not over is not in C either:
            # this one runs in a signal handler that interrupted it right
            # after its C call returned)
            for x in self._waits:
                if x.tid == w.tid:
                    x.in_c = False
            self._waits.add(w)
            self._settle()
        watched = wait_ms != 0 and _SIGNALS.start(lambda: self._request(w, by_signal=True))
        try:
            while True:
                if w.signalled:
                    w.signalled = False
                    if _check_signals() != 0:  # (raises what the handler raised)
                        raise KeyboardInterrupt
                with self._cx:
                    if w.cancel or self._closing:
                        raise _errors.Canceled("the wait for %r was cancelled" % _text(bname),
                                               _ECANCELED)
                    if w.signalled:
                        continue
                    if deadline is None:
                        left = -1
                    else:
                        left = max(0, int((deadline - time.monotonic()) * 1000))
                        if left == 0 and wait_ms != 0:
                            left = 1  # (a retried wait whose time is up: one short try)
                    w.in_c = True
                try:
                    rc = lib.dblock_lock_acquire(ctypes.byref(box), c, bname, left, lease_ms)
                    if rc != 0:
                        info = ErrorInfo()
                        lib.dblock_last_error(ctypes.byref(info))
                finally:
                    w.in_c = False  # (first: nothing can interrupt it)
                    with self._cx:
                        self._settle()
                if rc == 0:
                    return int(lib.dblock_lock_fence(box.value))
                if rc == _ECANCELED and (w.signalled or w.cancel or self._closing):
                    continue  # (the loop's top says which)
                if rc == _ECANCELED and not self._user_cancel:
                    # another wait's cancel cut this one: wait it out, go on
                    # (a try waits for it too, up to 1 s, then tries)
                    until = deadline if wait_ms != 0 else time.monotonic() + 1
                    while True:
                        with self._cx:
                            self._settle()
                            if not self._c_cancelled or w.cancel or w.signalled or \
                                    self._closing or self._user_cancel:
                                break
                        if until is not None and time.monotonic() >= until:
                            if wait_ms == 0:
                                raise _errors.Busy("%r: not tried, another wait's cancel lasted "
                                                   "1 s" % _text(bname), _EBUSY)
                            raise _errors.Timeout("timed out waiting for %r" % _text(bname),
                                                  _errors.Timeout.code)
                        time.sleep(0.002)
                    continue
                if rc == _EBUSY and wait_ms != 0:
                    rc = _errors.Timeout.code  # (the retried wait's last try)
                    info.code = 0
                _raise_info(rc, info)
        finally:
            if watched:
                _SIGNALS.stop()
            with self._cx:
                self._waits.discard(w)
                self._settle()
