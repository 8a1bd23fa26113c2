"""A package whose exported names are imported when first asked for (PEP 562).

A trainer folder's `__init__` exports its adapter, but the spec imports the folder's `section`
module while the spec itself is being read, before any adapter could be: importing the folder
must not import the adapter (which reads the spec) until someone asks for it.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: name -> the submodule (relative) that holds it."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    return __getattr__
