"""Reading YAML a user wrote, with bounds: a size cap, regular files only (a FIFO or a device
is refused, never waited on), UTF-8 only, a nesting limit, duplicate keys refused and aliases
allowed only while their expansion stays small (no alias bombs). Numbers are never base 60:
YAML 1.1 reads `1:30` as 90, which no one writing `budget.max_trials=1:30` meant; it stays the
text it is (and a number field says so)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, SequenceNode

from orchestrator.common.bounded_files import UnreadableFile, read_bounded
from orchestrator.common.errors import SpecError, excerpt

MAX_BYTES = 1 << 20  # a spec is a few KB; 1 MiB leaves room for long space.configs lists
MAX_DEPTH = 32  # the spec nests 4 levels deep
MAX_NODES = 20_000  # scalars, lists and mappings after aliases are expanded
# What a campaign saved of a spec it accepted: every bound a user's spec passed, written out in
# full (a list space of 1,000 layouts at every field), so its own file is bounded by size only.
SAVED_MAX_BYTES = 64 << 20


class _Refused(Exception):
    """A structure the bounded loader refuses; the message says why (no file name yet)."""


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts depth while composing and refuses duplicate mapping keys."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 (PyYAML's signature)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(f"line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):  # noqa: ANN001
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise _Refused(f"line {key_node.start_mark.line + 1}: duplicate key "
                                   f"{excerpt(key)} (first on line {seen[key]}); keep one")
            except TypeError:
                continue  # an unhashable key: SafeLoader reports it
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


# SafeLoader's int and float patterns less their base-60 forms (`1:30`, `1:30.5`).
_NOT_BASE_60 = {
    "tag:yaml.org,2002:int": re.compile(r"""^(?:[-+]?0b[0-1_]+
        |[-+]?0[0-7_]+
        |[-+]?(?:0|[1-9][0-9_]*)
        |[-+]?0x[0-9a-fA-F_]+)$""", re.X),
    "tag:yaml.org,2002:float": re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""", re.X),
}
BoundedLoader.yaml_implicit_resolvers = {
    first: [(tag, _NOT_BASE_60.get(tag, pattern)) for tag, pattern in resolvers]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def _expanded_size(root: Any) -> int:
    """Nodes in the document once every alias is expanded; refuses recursive anchors."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    aliased = False  # a node reached twice: an alias
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            aliased = True
            continue
        kids = []
        if isinstance(node, SequenceNode):
            kids = list(node.value)
        elif isinstance(node, MappingNode):
            kids = [n for pair in node.value for n in pair]
        if children_done:
            on_path.discard(id(node))
            total = 1 + sum(sizes[id(k)] for k in kids)
            if total > MAX_NODES:
                raise _Refused(_too_many(node, aliased or len(kids) > len(set(map(id, kids)))))
            sizes[id(node)] = total
            continue
        if id(node) in on_path:
            raise _Refused(f"line {node.start_mark.line + 1}: a recursive alias (an anchor "
                           "used inside itself); drop it")
        on_path.add(id(node))
        stack.append((node, True))
        aliased = aliased or any(id(k) in sizes for k in kids)
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]


def _too_many(node: Any, aliased: bool) -> str:
    where = f"line {node.start_mark.line + 1}"
    if aliased:
        return (f"{where}: the aliases expand to more than {MAX_NODES:,} values; write the "
                "values out or drop aliases")
    return (f"{where}: more than {MAX_NODES:,} values; a campaign spec holds a few hundred "
            "(a list space at most 1,000 layouts): shorten it")


def parse_yaml(text: str, *, saved: bool = False) -> Any:
    """The YAML value of `text`, bounded (a saved spec: by size alone); raises _Refused or
    yaml.YAMLError."""
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if not saved:
            _expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml_text(text: str, source: str, *, saved: bool = False) -> Any:
    """`text` as YAML; every failure one SpecError naming `source`."""
    try:
        return parse_yaml(text, saved=saved)
    except _Refused as exc:
        raise SpecError(f"{source}: {exc}") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise SpecError(f"{source}: a value YAML cannot read ({excerpt(str(exc), 120, quote=False)})"
                        "; shorten it") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" line {mark.line + 1}:" if mark else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or "invalid YAML"
        raise SpecError(f"{source}:{where} YAML syntax error: {excerpt(problem, 120, quote=False)}"
                        "; fix the YAML") from None


def load_yaml_file(path: Path, *, saved: bool = False) -> Any:
    """A YAML file a user wrote (size, encoding and structure bounded) or that a campaign
    saved of a spec it accepted (`saved`: bounded by size and encoding, and never read through
    a symbolic link: a campaign writes its own copy, and a trial may have swapped it for a link
    to a file its reader, the service, may read and the trial may not)."""
    limit = SAVED_MAX_BYTES if saved else MAX_BYTES
    try:  # a FIFO or a device is refused, never waited on
        raw = read_bounded(path, limit, follow_links=not saved)
    except UnreadableFile as exc:
        fix = "check the path" if exc.missing else "give a regular YAML file of a few KB"
        raise SpecError(f"{exc}; {fix}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(f"{path}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                        "save the file as UTF-8") from None
    return load_yaml_text(text, str(path), saved=saved)
