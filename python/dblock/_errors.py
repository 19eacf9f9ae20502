"""The exception hierarchy: one class per DBLOCK_E... code of dblock.h, all
under dblock.Error, each carrying the code, the message and the database's
SQLSTATE / native error number when the failure came from it."""
from __future__ import annotations

from typing import Dict, Type


class Error(Exception):
    """Any failure reported by dblock.

    code      the C library's DBLOCK_E... code (a negative int)
    message   one line, never containing a password
    sqlstate  the database's SQLSTATE ("" when the failure is not the database's)
    native    MySQL errno / SQLite extended result code (0 otherwise)
    """

    code = -16

    def __init__(self, message: str, code: int | None = None, sqlstate: str = "",
                 native: int = 0) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.sqlstate = sqlstate
        self.native = native

    def __str__(self) -> str:
        return self.message + (" (SQLSTATE %s)" % self.sqlstate if self.sqlstate else "")


class Busy(Error):
    """Another owner holds the lock (a try that did not wait)."""
    code = -1


class Timeout(Error):
    """The wait ran out before the lock was free."""
    code = -2


class Lost(Error):
    """The lock was lost: its lease ran out and another owner took it, it
    was force-unlocked, or its session died."""
    code = -3


class NotHeld(Error):
    """Released a lock this owner does not hold."""
    code = -4


class Deadlock(Error):
    """The client is not reentrant and this thread already holds the name,
    or a call was made from inside on_lost / the log hook."""
    code = -5


class ConnectionError(Error):  # noqa: A001 (dblock.ConnectionError, as the issue names it)
    """Cannot connect to the database, or the connection was lost."""
    code = -6


class AuthError(Error):
    """The database refused the credentials."""
    code = -7


class SchemaError(Error):
    """The lock table is missing: run client.migrate() or `dblock migrate`."""
    code = -8


class PermissionError(Error):  # noqa: A001
    """The database refused: permission, or a read-only client/database."""
    code = -9


class InvalidArgument(Error, ValueError):
    """A bad argument: name, URL, option (also a ValueError)."""
    code = -10


class Retry(Error):
    """A deadlock or serialization failure in the database: retry."""
    code = -11


class OutOfMemory(Error):
    """The C library could not allocate memory."""
    code = -12


class MigrationError(Error):
    """An applied migration differs from this build's, or the schema is
    newer than the library."""
    code = -13


class Mismatch(Error):
    """The name is managed by another strategy."""
    code = -14


class Unsupported(Error):
    """Not available with this backend, strategy or build."""
    code = -15


class DatabaseError(Error):
    """Any other database error."""
    code = -16


class ReplicaError(Error):
    """Connected to a read-only replica."""
    code = -17


class Canceled(Error):
    """The wait was cancelled with Client.cancel()."""
    code = -18


BY_CODE: Dict[int, Type[Error]] = {
    c.code: c for c in (Busy, Timeout, Lost, NotHeld, Deadlock, ConnectionError, AuthError,
                        SchemaError, PermissionError, InvalidArgument, Retry, OutOfMemory,
                        MigrationError, Mismatch, Unsupported, DatabaseError, ReplicaError,
                        Canceled)}


def from_code(code: int, message: str, sqlstate: str = "", native: int = 0) -> Error:
    """The exception for a C status code (an unknown code gives Error)."""
    cls = BY_CODE.get(code, Error)
    return cls(message, code, sqlstate, native)
