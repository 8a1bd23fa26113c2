"""Property: whatever spec and `--set` overrides `run --dry-run` and `plan` get, they end with exit
0, or exit 2 and exactly one stderr line of at most 500 characters; never a traceback, nothing
under the runs directory, and each case in bounded CPU time and memory.

Specs are mostly the minimal valid spec with a few keys changed, to good-shaped or hostile
values (control characters, very long strings, deep nesting, huge numbers, wrong types), so
many cases reach the deep checks; some are then mangled as text (aliases and anchors, alias
bombs, duplicate keys, non-UTF-8 bytes, truncation, deep brackets).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import time
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from orchestrator.cli import main

BASE = {"name": "x", "model": "tiny", "cluster": "cpu-local",
        "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
        "space": {"micro_batch_size": [1, 2], "activation_checkpointing": ["none"]},
        "tracking": {"enabled": False}}
CASES = {"run": int(os.environ.get("FUZZ_RUN", 1_300)), "plan": int(os.environ.get("FUZZ_PLAN", 800))}  # 2,100 cases in all

def _nest(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


small = st.one_of(st.integers(min_value=1, max_value=8), st.integers(min_value=-2, max_value=16))
small_lists = st.lists(small, min_size=0, max_size=4)
nasty_text = st.one_of(
    st.text(max_size=20),
    st.text(st.characters(max_codepoint=0x9F), max_size=10),  # control characters
    st.sampled_from(["", "x" * 30_000, "$(touch INJECTED)", "`id`", "a\nb", "\x00", "../..",
                     "\u2028", "\ud800", "{trial_id}", "{nope}", "A=B", "-1", "1e999"]),
)
numbers = st.one_of(small, st.integers(), st.sampled_from([10**30, -10**30, 2**64, 10**4000]),
                    st.floats(allow_nan=True, allow_infinity=True), st.booleans())
leaf = st.one_of(st.none(), numbers, nasty_text)
anything = st.recursive(leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(nasty_text, inner, max_size=3)), max_leaves=8)
deep = st.integers(min_value=20, max_value=150).map(lambda n: _nest(n))  # safe_dump recurses

GOOD = {
    "name": st.sampled_from(["x", "run-2", "a.b_c"]),
    "model": st.one_of(st.sampled_from(["tiny", "llama-7b", "gpt2-small", "nope"]),
                       st.fixed_dictionaries({"preset": st.just("tiny")},
                                             optional={"seq_len": small, "num_layers": small,
                                                       "num_heads": small, "name": nasty_text})),
    "cluster": st.sampled_from(["cpu-local", "a100-80g", "frontier"]),
    "scale.nodes": small, "scale.gpus_per_node": small, "scale.global_batch_size": small,
    "scale.study": st.sampled_from(["weak", "strong", "x"]), "scale.study_nodes": small_lists,
    "space.kind": st.sampled_from(["megatron-3d", "amsp", "list", "other"]),
    "space.tp": small_lists, "space.pp": small_lists, "space.zero_stage": small_lists,
    "space.micro_batch_size": small_lists, "space.virtual_stages": small_lists,
    "space.pp_schedule": st.lists(st.sampled_from(["gpipe", "1f1b", "interleaved"]), max_size=3),
    "space.sequence_parallel": st.lists(st.booleans(), max_size=2),
    "space.configs": st.lists(st.dictionaries(
        st.sampled_from(["tp", "pp", "dp", "zero_stage", "micro_batch_size", "sharding", "x"]),
        st.one_of(small, nasty_text, st.dictionaries(st.sampled_from(["s0p", "s1os"]), small)),
        max_size=3), max_size=3),
    "objective.metric": st.sampled_from(["tokens_per_s", "mfu", "step_time_s", "x"]),
    "search.algorithm": st.sampled_from(["grid", "random", "cost-guided", "x"]),
    "search.seed": numbers, "search.warm_start": nasty_text,
    "search.fidelity": st.fixed_dictionaries({"screening_steps": small}),
    "budget.max_trials": numbers, "budget.wall_clock_s": numbers,
    "trial.steps": numbers, "trial.timeout_s": numbers,
    "trial.env": st.dictionaries(nasty_text, st.one_of(nasty_text, numbers, small_lists), max_size=3),
    "trial.trainer": st.sampled_from(["builtin", "command", "torchtitan", "megatron-lm", "x"]),
    "trial.command": st.lists(nasty_text, max_size=3), "trial.workdir": nasty_text,
    "backend": st.fixed_dictionaries({"kind": st.sampled_from(["local", "slurm", "simulated"])},
                                     optional={"partition": nasty_text, "noise": numbers,
                                               "sbatch_args": st.dictionaries(nasty_text,
                                                                              nasty_text)}),
    "tracking.runs_dir": nasty_text,
}
PATHS = sorted(GOOD)


@st.composite
def mutated_spec(draw) -> dict:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2, 2, 4]))):
        path = draw(st.one_of(st.sampled_from(PATHS), nasty_text.map(lambda t: t or "k")))
        good = GOOD.get(path, anything)
        value = draw(st.one_of(good, good, good, good, anything, deep) if path in GOOD
                     else anything)
        node = data
        parts = path.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return data


BOMB = "".join(f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n"
               for p, c in zip("abcdefgh", "bcdefghi"))
MANGLE = st.one_of(st.just("none"), st.just("none"), st.just("none"),  # most stay well-formed
                   st.sampled_from(["alias", "bomb", "dup", "bytes", "cut", "brackets",
                                    "recursive"]))


def mangled(text: str, how: str, cut: float) -> bytes:
    if how == "alias":
        text += "space: &s {tp: [1], pp: [1]}\nsearch: {seed: 0}\nbudget: *s\n"
    elif how == "bomb":
        text = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + BOMB + text
    elif how == "dup":
        text += text.splitlines()[0] + "\n"
    elif how == "recursive":
        text += "trial: &t {env: *t}\n"
    elif how == "cut":
        text = text[: int(len(text) * cut)]
    elif how == "brackets":
        text = "name: " + "[" * int(50 + cut * 20_000)
    raw = text.encode("utf-8", "surrogatepass")
    if how == "bytes":
        raw = raw[: int(len(raw) * cut)] + b"\xff\xfe\x80" + raw[int(len(raw) * cut):]
    return raw


def overrides():
    path = st.one_of(st.sampled_from(PATHS), nasty_text, st.just("a." * 20 + "b"))
    value = st.one_of(nasty_text, numbers.map(str), st.sampled_from(["[1, 2]", "{a: 1}", "[", "&a [*a]"]))
    sets = st.lists(st.tuples(path, value).map(lambda kv: f"{kv[0]}={kv[1]}"), max_size=3)
    return st.one_of(st.just([]), st.just([]), sets)  # most specs come without overrides


def check_case(command, data, how, cut, sets, tmp_dir):
    spec = tmp_dir / "spec.yaml"
    spec.write_bytes(mangled(yaml.safe_dump(data, allow_unicode=True), how, cut))
    args = [command, str(spec), *[a for s in sets for a in ("--set", s)]]
    if command == "run":
        args.append("--dry-run")
    out, err = io.StringIO(), io.StringIO()
    start_mb = reset_peak_mb()
    start = time.thread_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    cpu_s = time.thread_time() - start
    text = err.getvalue()
    assert code in (0, 2), (code, text[-2000:])
    assert "Traceback" not in text
    event(f"exit {code}")  # --hypothesis-show-statistics: how many reach each outcome
    if code == 2:
        reading = ("YAML", "UTF-8", "alias", "duplicate key", "nested more", "larger than")
        event("exit 2: " + ("reading the file" if any(w in text for w in reading) else
                            "an empty space" if "no valid layout" in text else "validation"))
        assert text.count("\n") == 1 and text.endswith("\n"), text[:2000]
        assert len(text.rstrip("\n")) <= 500, text[:600]
    assert not (tmp_dir / "runs").exists() or not any((tmp_dir / "runs").iterdir())
    # The case's own CPU time and peak memory: neither grows with the machine's load or with
    # what earlier tests in this process used.
    assert cpu_s < 5, (cpu_s, args[:3])
    assert status_mb("VmHWM") - start_mb < 1024, "peak memory grew by more than 1 GB"


FUZZ = dict(deadline=None, database=None, derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                   HealthCheck.function_scoped_fixture])
CASE = dict(data=mutated_spec(), how=MANGLE, cut=st.floats(0, 1), sets=overrides())


def status_mb(field: str) -> float:
    """VmRSS (resident now) or VmHWM (peak resident) of this process, in MB."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M).group(1)) / 1024


def reset_peak_mb() -> float:
    """Lower this process's peak resident memory to what it holds now (Linux: 5 written to
    /proc/self/clear_refs), so that the next peak read is one case's; that memory, in MB."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_mb("VmHWM")


@settings(max_examples=CASES["run"], **FUZZ)
@given(**CASE)
def test_fuzz_run_dry_run(tmp_path, runs_dir, data, how, cut, sets):
    check_case("run", data, how, cut, sets, tmp_path)


@settings(max_examples=CASES["plan"], **FUZZ)
@given(**CASE)
def test_fuzz_plan(tmp_path, runs_dir, data, how, cut, sets):
    check_case("plan", data, how, cut, sets, tmp_path)
