"""Reading a campaign spec: YAML in, `--set a.b=value` overrides, a validated `CampaignSpec` out,
and every failure turned into a `SpecError`: a line a problem (validation_errors.py), each naming
the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.common.errors import CampaignStateError, SpecError, excerpt
from orchestrator.presets import Cluster
from orchestrator.campaign_spec.backends import for_saved_spec
from orchestrator.campaign_spec.campaign import CampaignSpec
from orchestrator.campaign_spec.campaign_folders import SPEC_FILE, did_you_mean
from orchestrator.campaign_spec.strings import check_campaign_name, check_strings
from orchestrator.campaign_spec.validation_errors import describe
from orchestrator.campaign_spec.yaml_input import load_yaml_file, load_yaml_text

MAX_KEY_PARTS = 8  # `--set a.b.c=...`: the spec nests 4 levels deep


def load_campaign_spec(runs_dir: Path, name: str, overrides: tuple[str, ...] = ()) -> CampaignSpec:
    """The spec a campaign was started with, as saved in its directory (0.1 layouts too), with
    `overrides` (`a.b=value`) applied."""
    check_campaign_name(name)
    path = Path(runs_dir) / name / SPEC_FILE
    if not path.is_file():
        raise CampaignStateError(
            f"no campaign {name!r} under {runs_dir}/ (missing {path})"
            f"{did_you_mean(name, runs_dir)}; start it with `paratune run SPEC.yaml`, "
            "or pass --runs-dir")
    data = load_yaml_file(path, saved=True)
    if not isinstance(data, dict) or not isinstance(data.get("tracking", {}), dict):
        raise SpecError(f"{path}: not a saved campaign spec (expected a mapping of keys)")
    if data.get("name") != name:  # the journal, MLflow runs and exports go by the name
        raise CampaignStateError(
            f"{path} is campaign {excerpt(data.get('name'))}, not {name!r}: a campaign's "
            "folder bears its name; move the folder back to that name, "
            "or start a new campaign under a new name"
        )
    for item in overrides:
        apply_override(data, item, source=str(path))
    data.setdefault("tracking", {})["runs_dir"] = str(runs_dir)
    if "backend" in data:
        data["backend"] = for_saved_spec(data["backend"])
    return spec_from_dict(data, source=str(path), saved=True)


def load_spec(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> CampaignSpec:
    """Read, override and validate a campaign spec; every failure is one SpecError line."""
    path = Path(path)
    if not path.exists():
        raise SpecError(f"{path}: file not found; pass the path of a campaign YAML file")
    if path.is_dir():
        raise SpecError(f"{path}: is a directory; pass the path of a campaign YAML file")
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise SpecError(
            f"{path}: expected a mapping of keys (name, model, cluster, ...), "
            f"got {type(data).__name__}"
        )
    for item in overrides:
        apply_override(data, item, source=str(path))
    return spec_from_dict(data, source=str(path))


def spec_from_dict(data: dict[str, Any], source: str = "<spec>", saved: bool = False,
                   trainer_rules: bool = True) -> CampaignSpec:
    """`saved`: a campaign's own saved spec, which keeps what it ran with (the objective's
    mode) where a new spec would be refused. `trainer_rules` False: a plan that names no
    trainer, whose layouts no trainer's rules refuse."""
    check_strings(data, source)
    try:
        return CampaignSpec.model_validate(
            data, context={"saved": saved, "trainer_rules": trainer_rules})
    except ValidationError as exc:
        raise SpecError(describe(exc, source)) from None


def load_cluster(value: str, source: str) -> Cluster:
    """A cluster preset's name or a preset file (`paratune profile` writes one), read and
    checked as a spec's `cluster:` is; every failure one line naming `source` and the key."""
    try:
        return Cluster.model_validate(CampaignSpec.resolve_cluster(value))
    except ValidationError as exc:
        raise SpecError(describe(exc, source, within=("cluster",))) from None
    except ValueError as exc:
        raise SpecError(f"{source}: {exc}") from None


def apply_override(data: dict[str, Any], item: str, source: str = "<spec>") -> None:
    """Apply `a.b.c=value` (value parsed as YAML) to a raw spec mapping, in place."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set {excerpt(item)}: expected KEY.PATH=VALUE, e.g. budget.max_trials=4")
    parts = key.strip().split(".")
    if len(parts) > MAX_KEY_PARTS or not all(parts):
        raise SpecError(f"--set {excerpt(key)}: expected a key path like trial.env.NAME "
                        f"(at most {MAX_KEY_PARTS} parts, none empty)")
    try:
        value = load_yaml_text(raw, f"--set {excerpt(key, 40, quote=False)}") if raw.strip() else raw
    except SpecError as exc:
        if "YAML syntax error" not in str(exc):
            raise  # bounded structure refused: say so rather than take the text
        value = raw
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if isinstance(child, str) and part in ("model", "cluster") and depth == 0:
            child = {"preset": child}  # override one field of a preset
        elif child is None:
            child = {}
        elif not isinstance(child, dict):
            path = ".".join(parts[: depth + 1])
            raise SpecError(f"{source}: --set {excerpt(key, 60, quote=False)}: "
                            f"{excerpt(path, 60, quote=False)} is not a mapping; set it itself")
        node[part] = child
        node = child
    node[parts[-1]] = value
