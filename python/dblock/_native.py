"""The C library, loaded with ctypes: where it is found, and the structures
and prototypes of include/dblock.h that the binding uses.

Every foreign call here goes through ctypes.CDLL, which releases the GIL
for the length of the call: other Python threads run while one waits for a
lock or for the database.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

SONAME = "libdblock.so.0"

# (make install rewrites this line with the library directory it installs
# to, so an installed package finds its own library first)
INSTALL_LIBDIR = ""


class LibraryNotFound(ImportError):
    """libdblock.so.0 could not be loaded: the message lists every place
    that was tried and why each failed."""


def _candidates():
    """Where to look, in order: DBLOCK_LIBRARY (a path to the library), the
    dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache), then the
    install prefix (make install's library directory, /usr/local/lib,
    /usr/lib)."""
    env = os.environ.get("DBLOCK_LIBRARY")
    if env:
        # Set: it is the only place looked at (a wrong path must not
        # silently load another copy).
        return [("DBLOCK_LIBRARY=" + env, env)]
    found = [("the loader's path", SONAME)]
    for d in (INSTALL_LIBDIR, "/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu"):
        if d:
            path = os.path.join(d, SONAME)
            if (d, path) not in found:
                found.append((d, path))
    return found


def load() -> ctypes.CDLL:
    """Loads the library, or raises LibraryNotFound naming what was tried."""
    tried = []
    for where, path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (where, e))
    raise LibraryNotFound(
        "dblock: cannot load %s; tried: %s. Build it (make) and set "
        "DBLOCK_LIBRARY=/path/to/build/%s, or run make install"
        % (SONAME, "; ".join(tried), SONAME))


class ErrorInfo(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("sqlstate", ctypes.c_char * 6),
                ("native", ctypes.c_int), ("message", ctypes.c_char * 512)]


LOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p)
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

OPTIONS_VERSION = 5


class Options(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint), ("strategy", ctypes.c_int),
        ("lease_ms", ctypes.c_int64), ("backoff_min_ms", ctypes.c_int64),
        ("backoff_max_ms", ctypes.c_int64), ("connect_timeout_ms", ctypes.c_int64),
        ("reaper_interval_ms", ctypes.c_int64), ("reaper_grace_ms", ctypes.c_int64),
        ("pool_size", ctypes.c_int), ("non_reentrant", ctypes.c_int),
        ("owner_host", ctypes.c_char_p), ("table", ctypes.c_char_p),
        ("on_lost", LOST_FN), ("on_lost_arg", ctypes.c_void_p),
        # version 2
        ("call_timeout_ms", ctypes.c_int64), ("loss_margin_ms", ctypes.c_int64),
        # version 3
        ("read_only", ctypes.c_int), ("log", LOG_FN), ("log_arg", ctypes.c_void_p),
        # version 4
        ("log_level", ctypes.c_int),
        # version 5
        ("fair", ctypes.c_int),
    ]


STATS_WAIT_BUCKETS = 6
STATS_WAIT_BOUNDS_MS = (1, 10, 100, 1000, 10000)


class Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "grants", "busy", "timeouts", "cancelled", "failures", "waited", "renewals",
        "renewal_failures", "losses", "connects", "disconnects")] + [
        ("wait_ms", ctypes.c_uint64 * STATS_WAIT_BUCKETS), ("wait_ms_sum", ctypes.c_uint64),
        ("wakeups", ctypes.c_uint64), ("notified", ctypes.c_uint64)]


NAME_MAX = 255


class LockInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * (NAME_MAX + 1)), ("strategy", ctypes.c_char * 16),
        ("held", ctypes.c_int), ("owner_host", ctypes.c_char * 256),
        ("owner_pid", ctypes.c_int64), ("owner_thread", ctypes.c_int64),
        ("owner_token", ctypes.c_char * 33), ("hold_count", ctypes.c_int),
        ("fence", ctypes.c_int64), ("acquired_at_us", ctypes.c_int64),
        ("expires_at_us", ctypes.c_int64)]


class Finding(ctypes.Structure):
    _fields_ = [("severity", ctypes.c_int), ("topic", ctypes.c_char * 24),
                ("text", ctypes.c_char * 384), ("advice", ctypes.c_char * 256)]


class MigrationInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int), ("name", ctypes.c_char_p),
                ("applied", ctypes.c_int), ("applied_at_us", ctypes.c_int64),
                ("checksum_ok", ctypes.c_int)]


_P = ctypes.c_void_p
_I = ctypes.c_int
_I64 = ctypes.c_int64
_S = ctypes.c_char_p
_PROTOTYPES = {
    # name: (restype, argtypes)
    "dblock_strerror": (_S, [_I]),
    "dblock_last_error": (_I, [ctypes.POINTER(ErrorInfo)]),
    "dblock_client_open": (_I, [ctypes.POINTER(_P), _S, ctypes.POINTER(Options)]),
    "dblock_client_free": (None, [_P]),
    "dblock_client_backend": (_S, [_P]),
    "dblock_client_strategy": (_I, [_P]),
    "dblock_client_cancel": (_I, [_P]),
    "dblock_client_cancel_clear": (_I, [_P]),
    "dblock_client_round_trips": (ctypes.c_uint64, [_P]),
    "dblock_client_stats": (_I, [_P, ctypes.POINTER(Stats), ctypes.c_size_t]),
    "dblock_strategy_name": (_S, [_I]),
    "dblock_strategy_parse": (_I, [ctypes.POINTER(_I), _S]),
    "dblock_migrate": (_I, [_P, ctypes.POINTER(_I)]),
    "dblock_migrate_status": (_I, [ctypes.POINTER(ctypes.POINTER(MigrationInfo)),
                                   ctypes.POINTER(ctypes.c_size_t), _P]),
    "dblock_migration_info_free": (None, [ctypes.POINTER(MigrationInfo), ctypes.c_size_t]),
    "dblock_lock_acquire": (_I, [ctypes.POINTER(_P), _P, _S, _I64, _I64]),
    "dblock_lock_release": (_I, [_P]),
    "dblock_lock_renew": (_I, [_P]),
    "dblock_lock_fence": (_I64, [_P]),
    "dblock_lock_hold_count": (_I, [_P]),
    "dblock_lock_expires_at": (_I64, [_P]),
    "dblock_lock_is_lost": (_I, [_P]),
    "dblock_lock_inspect": (_I, [ctypes.POINTER(LockInfo), _P, _S]),
    "dblock_lock_list": (_I, [ctypes.POINTER(ctypes.POINTER(LockInfo)),
                              ctypes.POINTER(ctypes.c_size_t), _P, _I]),
    "dblock_doctor": (_I, [ctypes.POINTER(ctypes.POINTER(Finding)),
                           ctypes.POINTER(ctypes.c_size_t), _P]),
    "dblock_force_unlock": (_I, [_P, _S, ctypes.POINTER(_I64)]),
    "dblock_forget": (_I, [_P, _S]),
    "dblock_reap": (_I, [_P, _I64, _I, ctypes.POINTER(_I64)]),
}


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declares every prototype the binding calls (ctypes would otherwise
    pass 64-bit integers and pointers as C ints)."""
    for name, (res, args) in _PROTOTYPES.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


lib = bind(load())
# free() of the C library dblock allocated with (lists and findings)
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.free.argtypes = [ctypes.c_void_p]
libc.free.restype = None
