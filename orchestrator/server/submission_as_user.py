"""A submitted spec checked in a child process, as the user its campaign would run as (the
`--run-as` user, else the service's own), so that the files it names (a model or cluster file,
a trial's program or folder) are opened by that user, never by root; and a FIFO or a hung
filesystem costs a child its time limit, never a request thread for good.

The child reads a model or cluster file once, bounded (bounded_files.py), answers a missing
file and one it may not read alike, and names a value of such a file that does not validate
without repeating it. The service takes the child's reply as untrusted (a process of the
run-as user's, which that user's trials could tamper with): bounded in size, with no file name
left in it, and validated again.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.common.bounded_files import UnreadableFile, read_bounded
from orchestrator.common.errors import SpecError, UserError, excerpt, one_line
from orchestrator.server.submission import SOURCE, check_resolved, parse_submission
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.loading import spec_from_dict
from orchestrator.campaign_spec.yaml_input import MAX_BYTES, load_yaml_text

log = logging.getLogger("paratune.server")
TIMEOUT_S = 30.0  # a child reads a few small files; one that takes longer is stuck
MAX_REPLY_BYTES = 8 * MAX_BYTES  # the resolved spec (at most MAX_BYTES as YAML), as JSON
FILE_KEYS = ("model", "cluster")
PATH_CHARS = 300  # a file name is shown whole up to this (a user's own input)
# pydantic errors whose message repeats the value it refused.
ECHOING_ERRORS = ("value_error", "assertion_error", "union_tag_invalid")


def names_files(data: dict[str, Any]) -> bool:
    return any(_named_file(data.get(key)) for key in FILE_KEYS)


def _named_file(value: Any) -> str | None:
    """The preset file a `model:` or `cluster:` value names, as the spec reads one."""
    if isinstance(value, dict):
        value = value.get("preset")
    return value if isinstance(value, str) and value.endswith((".yaml", ".yml")) else None


def parse_in_child(data: dict[str, Any], runs_dir: Path, workdir: str | None,
                   pinned_workdir: Path | None, notes: list[str], *, env: dict[str, str],
                   cwd: str, run_as: Any = None) -> CampaignSpec:
    """`submission.parse_submission`, run by a child as `run_as` (an isolation.RunAs, or None
    for the service's own user) from `cwd`, where the controller would start."""
    reader = f"the service's user {run_as.name}" if run_as else "the service"
    reply = _run_child({"data": data, "runs_dir": str(runs_dir), "workdir": workdir,
                        "pinned_workdir": str(pinned_workdir) if pinned_workdir else None,
                        "cwd": cwd, "reader": reader}, env, run_as)
    if isinstance(reply.get("error"), str):
        raise SpecError(excerpt(reply["error"], 2000, quote=False))
    spec = reply.get("spec")
    if not isinstance(spec, dict) or not all(
            isinstance(spec.get(key), dict) and "preset" not in spec[key] for key in FILE_KEYS):
        raise UserError(f"{SOURCE}: the service could not check it (an unexpected answer from "
                        "its checking process); submit it again")
    spec.setdefault("tracking", {})["runs_dir"] = str(runs_dir)  # the pins, again
    if pinned_workdir is not None:
        spec.setdefault("trial", {})["workdir"] = str(pinned_workdir)
    checked = spec_from_dict(spec, source=SOURCE)
    check_resolved(checked)
    given = reply.get("notes")
    notes += [excerpt(str(n), 500, quote=False) for n in (given or [])[:100]
              if isinstance(given, list)]
    return checked


def _run_child(request: dict[str, Any], env: dict[str, str], run_as: Any) -> dict[str, Any]:
    """The child's reply to `request`; one UserError line if it took too long or broke."""
    options = run_as.popen_options() if run_as else {}
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as answer, \
            tempfile.TemporaryFile() as errors:
        given.write(yaml.safe_dump(request).encode())  # the spec's own types (dates) included
        given.seek(0)
        child = subprocess.Popen([sys.executable, "-m", __name__], stdin=given, stdout=answer,
                                 stderr=errors, env=env, cwd="/", preexec_fn=_limit_output,
                                 **options)
        try:
            code = child.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                pass  # stuck in the kernel; reaped by a later Popen
            raise UserError(f"{SOURCE}: reading the files it names took over {TIMEOUT_S:.0f} s "
                            "(a FIFO, a device or a hung filesystem?); name regular files")
        answer.seek(0)
        raw = answer.read(MAX_REPLY_BYTES + 1)
        try:
            reply = json.loads(raw) if code == 0 and len(raw) <= MAX_REPLY_BYTES else None
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            errors.seek(0)
            log.warning("the submission check exited with %s: %s", code,
                        errors.read(4000).decode(errors="replace"))
            raise UserError(f"{SOURCE}: the service could not check it (its checking process "
                            "failed; see the service's log)")
    return reply


def _limit_output() -> None:  # in the child, before it runs: no reply (file) beyond the bound
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_REPLY_BYTES, MAX_REPLY_BYTES))


# ------------------------------------------------------------------ in the child


def main() -> None:
    request = yaml.safe_load(sys.stdin.buffer.read())
    notes: list[str] = []
    try:
        os.chdir(request["cwd"])
        data = request["data"]
        for key in FILE_KEYS:
            _inline_file(data, key, request["reader"])
        pinned = request["pinned_workdir"]
        spec = parse_submission(data, Path(request["runs_dir"]), request["workdir"],
                                pinned_workdir=Path(pinned) if pinned else None, notes=notes)
        reply = {"spec": spec.model_dump(mode="json", exclude_none=True), "notes": notes}
    except UserError as exc:
        reply = {"error": one_line(str(exc))}
    except OSError as exc:
        reply = {"error": f"{SOURCE}: {request['reader']} cannot start there ({exc.strerror})"}
    sys.stdout.write(json.dumps(reply))


def _inline_file(data: dict[str, Any], key: str, reader: str) -> None:
    """Replace a `model:` or `cluster:` file (with a mapping's overrides) by its fields."""
    value = data.get(key)
    path = _named_file(value)
    if path is None:
        return
    kind = CampaignSpec.model_fields[key].annotation
    fields = _read_mapping(path, key, reader)
    overrides = {k: v for k, v in value.items() if k != "preset"} if isinstance(value, dict) else {}
    try:
        data[key] = kind.model_validate({**fields, **overrides}).model_dump(mode="json")
    except ValidationError as exc:
        raise SpecError(_without_values(exc, key, path, kind)) from None


def _read_mapping(path: str, key: str, reader: str) -> dict[str, Any]:
    """The file's YAML mapping. A file that is missing, that `reader` may not read, or that
    is no regular file gets one answer: which of them is none of the submitter's business."""
    try:
        raw = read_bounded(Path(path).expanduser(), MAX_BYTES, follow_links=True)
    except UnreadableFile:
        raise SpecError(f"{SOURCE}: {key}: {excerpt(path, PATH_CHARS)}: {reader} finds no "
                        f"{key} file there that it may read (a regular file of at most "
                        f"{MAX_BYTES >> 20} MiB); give one it can read") from None
    try:
        fields = load_yaml_text(raw.decode("utf-8"), "file")
    except (SpecError, UnicodeDecodeError):
        fields = None
    if not isinstance(fields, dict):
        raise SpecError(f"{SOURCE}: {key}: {excerpt(path, PATH_CHARS)}: not a YAML mapping of "
                        f"{key} fields (UTF-8); fix the file")
    return fields


def _without_values(exc: ValidationError, key: str, path: str, kind: Any) -> str:
    """The first error, by field and problem only: the file's text is not repeated."""
    error = exc.errors()[0]
    where = [key]
    for part in error["loc"]:
        if part not in getattr(kind, "model_fields", {}):
            break
        where.append(part)
        kind = getattr(kind.model_fields[part], "annotation", None)
    if error["type"] == "extra_forbidden":
        problem = f"a key it does not know (allowed keys: {', '.join(kind.model_fields)})"
    elif error["type"] in ECHOING_ERRORS:
        problem = "a value it does not take"
    else:
        problem = error["msg"]
    return (f"{SOURCE}: {'.'.join(where)}: {problem} (in the {key} file "
            f"{excerpt(path, PATH_CHARS)}, whose values are not repeated here); fix the file")


if __name__ == "__main__":
    main()
