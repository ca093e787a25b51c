"""Files a full disk never leaves half written, and how a full disk is told from a bug.

:func:`write_file_atomically` writes a temporary file beside the target, syncs it and renames it
into place: a reader (``mqttrl enjoy``, ``compare``, ``--resume``) sees the old file or the whole
new one, never a truncated one, and a write that fails removes its temporary file again (a full
disk is not made fuller). :func:`is_disk_full` recognises ENOSPC and EDQUOT however they come: an
``OSError``, or a library's own error that wraps the OS's (safetensors' ``SafetensorError``: "I/O
error: No space left on device (os error 28)"). :class:`DiskFull` is the one-line error a node ends
with then (exit :data:`EXIT_DISK_FULL`).
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

#: the exit code of a command ended by a full disk (mqttrl.cli.errors.EXIT_DISK_FULL; kept here so that
#: the supervisor and the nodes need not import the command line)
EXIT_DISK_FULL = 6

#: the errnos of "no room to write": the disk, or the user's quota, is full
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: how a library that wraps the OS error words it (Rust's io::Error, as safetensors reports it; the C library's)
_DISK_FULL_WORDS = ("No space left on device", "Disk quota exceeded", f"os error {errno.ENOSPC}")


class DiskFull(OSError):
    """A write failed because the disk is full; its message is the whole line (what was kept)."""

    #: not one message's failure: a node's dispatcher lets it through, and the node ends (exit 6)
    ends_node = True

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from or while handling) is a full disk or quota."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        if not isinstance(exc, OSError) and any(w in str(exc) for w in _DISK_FULL_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def write_file_atomically(path: Path, data: bytes | str, *, sync: bool = True) -> Path:
    """Replace ``path`` with ``data`` (``str``: UTF-8) so that no reader ever sees part of it: a
    temporary file in the same folder, flushed and (``sync``) synced, then renamed over ``path``.
    On any failure the temporary file is removed and ``path`` is as it was."""
    path = Path(path)
    body = data.encode() if isinstance(data, str) else data
    tmp = path.parent / f".tmp-{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        with open(tmp, "wb") as f:
            f.write(body)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return path
