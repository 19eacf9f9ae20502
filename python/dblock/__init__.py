"""dblock: distributed locks kept in the relational database you already
run (PostgreSQL, MySQL/MariaDB, SQLite) — the Python binding of libdblock.

    import dblock
    client = dblock.Client("postgres://app@db/app")   # None: $DBLOCK_URL
    client.migrate()
    with client.lock("nightly-report", wait=5.0) as lk:
        run_report(fence=lk.fence)

See docs/python.md for the whole API and how it maps to the C library.
"""
from ._errors import (AuthError, Busy, Canceled, ConnectionError, DatabaseError, Deadlock, Error,
                      InvalidArgument, Lost, MigrationError, Mismatch, NotHeld, OutOfMemory,
                      PermissionError, ReplicaError, Retry, SchemaError, Timeout, Unsupported)
from ._client import Client, Finding, Lock, LockInfo, Stats
from ._native import LibraryNotFound

__version__ = "0.1.0"

__all__ = [
    "Client", "Lock", "LockInfo", "Finding", "Stats", "LibraryNotFound",
    "Error", "Busy", "Timeout", "Lost", "NotHeld", "Deadlock", "ConnectionError", "AuthError",
    "SchemaError", "PermissionError", "InvalidArgument", "Retry", "OutOfMemory", "MigrationError",
    "Mismatch", "Unsupported", "DatabaseError", "ReplicaError", "Canceled",
]
