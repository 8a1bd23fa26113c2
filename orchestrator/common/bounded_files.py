"""Reading a file someone else may have made anything: only a regular file, only so much of it.

A trial program (or a user) can leave a FIFO, a device, a directory or a symbolic link to one
where a result, a log or a spec is expected, or a file of many gigabytes. A plain `read_text()`
then hangs, fills memory or reads elsewhere; these readers refuse with one line instead
(`UnreadableFile`, whose text is the reason), and never read more than they were asked to.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISLNK, "a symbolic link"))


class UnreadableFile(Exception):
    """Why a file was not read, in one line that names it; `missing` when there is none."""

    def __init__(self, reason: str, *, missing: bool = False):
        super().__init__(reason)
        self.missing = missing


def kind_of(mode: int) -> str:
    """What a file of this mode is, in words (a FIFO, a device, ...)."""
    return next((name for check, name in _KINDS if check(mode)), "not a regular file")


def _open_regular(path: Path, follow_links: bool) -> tuple[int, int]:
    """A read-only descriptor on `path` and its size, only if it is a regular file. The type is
    checked before opening (opening a device can do something) and again on the descriptor (the
    path may have changed in between); O_NONBLOCK keeps a FIFO's open from waiting for a writer."""
    try:
        mode = (os.stat if follow_links else os.lstat)(path).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"{path} is {kind_of(mode)}, not a regular file")
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags if follow_links else flags | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise UnreadableFile(f"{path} does not exist", missing=True) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnreadableFile(f"{path} is a symbolic link, not a regular file") from None
        raise UnreadableFile(f"{path}: cannot read it ({exc.strerror or exc})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnreadableFile(f"{path} is {kind_of(info.st_mode)}, not a regular file")
    return fd, info.st_size


def _read_upto(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def size_words(limit: int) -> str:
    """A byte count as people say it: 1 MiB, 64 KiB, 300 bytes."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if limit >= size:
            return f"{limit / size:g} {unit}"
    return f"{limit} bytes"


def read_bounded(path: Path, limit: int, *, follow_links: bool = False) -> bytes:
    """The whole of a regular file of at most `limit` bytes; anything else is UnreadableFile.
    A symbolic link is refused unless `follow_links` (then its target must be a regular file)."""
    fd, _ = _open_regular(Path(path), follow_links)
    try:
        data = _read_upto(fd, limit + 1)  # one past the limit tells a file that is too large
    except OSError as exc:
        raise UnreadableFile(f"{path}: cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UnreadableFile(f"{path} is larger than {size_words(limit)}")
    return data


def read_tail(path: Path, limit: int, *, follow_links: bool = False) -> bytes:
    """The last `limit` bytes of a regular file at most, from its first whole line where the
    file is longer (unless that one line is longer than `limit`); UnreadableFile otherwise. Only
    the tail is read, however large the file."""
    fd, size = _open_regular(Path(path), follow_links)
    try:
        cut_short = size > limit
        if cut_short:  # from the byte before the tail: whether a line ends there
            os.lseek(fd, size - limit - 1, os.SEEK_SET)
        data = _read_upto(fd, limit + 1 if cut_short else limit)
    except OSError as exc:
        raise UnreadableFile(f"{path}: cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if not cut_short:
        return data
    cut = data.find(b"\n", 0, len(data) - 1)
    return data[cut + 1:] if cut >= 0 else data[1:]
