"""A file that the first of several writers makes and the others leave alone: each writes its
text under a name of its own (host, process and thread), then links it into place, which only
the first link does (atomic on a shared file system as on a local one). The tasks of one trial
agree this way on its deadline and on which of its ranks failed first."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path


def write_once(path: Path, text: str) -> None:
    """Make `path` hold `text` unless a writer made it first."""
    staged = path.with_name(
        f"{path.name}.{socket.gethostname()}.{os.getpid()}.{threading.get_ident()}")
    staged.write_text(text)
    try:
        os.link(staged, path)
    except FileExistsError:
        pass
    finally:
        staged.unlink()
