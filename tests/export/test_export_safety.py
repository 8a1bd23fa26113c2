"""Launch files cannot be broken out of: names, env values, trainer arguments and Slurm fields
holding `$(...)`, backticks, `;` and quotes are exported as data (every shell export passes
`bash -n`; the torchrun, torchtitan, megatron, command and sbatch exports are run with stand-ins for
torchrun, srun and scontrol, and the injected commands never run), the files a script writes
hold any text as data, and line breaks and names the shell acts on are refused in the spec
with one line."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.common.errors import SpecError
from orchestrator.export import export, formats
from orchestrator.export.common import origin as _origin
from orchestrator.export.common import env_line
from orchestrator.export.program import RUN_DIR_FOLDER, RUN_DIR_MARK, write_files
from orchestrator.campaign_spec import spec_from_dict
from orchestrator.campaign_spec.trial import SHELL_ENV
from orchestrator.trainers import trainer_for
from orchestrator.trainers.builtin import job_flags, job_settings
from orchestrator.trainers.megatron import megatron_args

SHELL_FORMATS = ("torchrun", "sbatch", "megatron-lm", "megatron-deepspeed", "megatron",
                 "torchtitan", "command")
# Formats of a trainer that refuses a CPU cluster: tests/trainers/test_megatron_bridge.py gives
# its launch file the same hostile values on a GPU cluster.
GPU_ONLY_FORMATS = ("megatron-bridge",)


def hostile(marker: Path) -> list[str]:
    """Strings that run `touch marker` if a shell ever evaluates them."""
    m = shlex.quote(str(marker))
    return [f"$(touch {m})", f"`touch {m}`", f"x; touch {m}", f"x' ; touch {m} ; '",
            f'x" ; touch {m} ; "', f"x && touch {m} #"]


def base(**sections) -> dict:
    data = {"name": "x", "model": "tiny", "cluster": "cpu-local",
            "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
            "tracking": {"enabled": False}}
    data.update(sections)
    return data


def hostile_specs(marker: Path) -> list[dict]:
    bad = hostile(marker)
    one_word = f"$(touch${{IFS}}{marker})"  # a #SBATCH value holds no spaces or quotes
    env = {f"V{i}": v for i, v in enumerate(bad)}
    return [
        base(model={"preset": "tiny", "name": bad[0]}, cluster={"preset": "cpu-local",
             "name": bad[1]}, trial={"env": env},
             backend={"kind": "slurm", "partition": one_word, "account": "`touch`;x",
                      "sbatch_args": {"comment": one_word}}),
        base(model={"preset": "tiny", "name": bad[3]}, cluster={"preset": "cpu-local",
             "name": bad[4]}, trial={"trainer": "megatron-lm", "megatron": {"args": bad}}),
        base(model={"preset": "tiny", "name": bad[2]},
             trial={"trainer": "torchtitan", "torchtitan": {"overrides": bad}}),
        base(trial={"command": [str(marker.parent / "bin" / "torchrun"), *bad, "--tp={tp}",
                                "{deepspeed_config}", ""],
                    "env": env, "workdir": str(marker.parent)}),
    ]


def stand_ins(tmp_path: Path, torchrun: str = 'printf "%s\\n" "$@" > "$ARGV_FILE"',
              ) -> dict[str, str]:
    """torchrun prints its arguments one per line (or runs `torchrun`, a bash body), and so
    does the scripts' Python (PARATUNE_PYTHON) as `-m torch.distributed.run`; srun runs its
    command; scontrol names a host."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"torchrun": torchrun, "srun": 'shift; exec "$@"', "scontrol": "echo localhost",
               "python": f'[ "$1 $2" = "-m torch.distributed.run" ] || exit 99; shift 2\n{torchrun}'}
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PARATUNE_PYTHON": str(bin_dir / "python"),
            "ARGV_FILE": str(tmp_path / "argv"), "SLURM_JOB_NODELIST": "localhost",
            "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0", "SLURM_JOB_ID": "1"}


def expected_argv(spec, config, tmp_path: Path) -> list[str]:
    """The argv a torchrun or sbatch export must run: the campaign's own program, its run
    folder ./paratune-run (the built-in trainer's flags are given inline)."""
    if spec.trial.trainer == "builtin":
        return ["-m", "jobs.train", *job_flags(job_settings(spec, config, "t0001"))]
    run = trainer_for(spec).run(spec, config, "t0001", RUN_DIR_FOLDER, spec.trial.steps)
    program = run.program[1:] if run.launcher == "self" else run.program  # less the stand-in
    return [a.replace(RUN_DIR_MARK, str(tmp_path / "paratune-run")) for a in program]


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_hostile_values_stay_data_in_every_export(tmp_path, index):
    marker = tmp_path / "INJECTED"
    spec = spec_from_dict(hostile_specs(marker)[index])
    config = spec.candidates()[0]
    env = stand_ins(tmp_path)
    for fmt in formats():
        if fmt == "command" and spec.trial.command is None:
            continue  # only a command campaign has one to export
        if fmt in GPU_ONLY_FORMATS:
            continue  # these specs are on a CPU cluster; its own test feeds it hostile values
        text = export(fmt, spec, "t0001", config)
        path = tmp_path / f"launch-{fmt}"
        path.write_text(text)
        if fmt in SHELL_FORMATS:
            check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            assert check.returncode == 0, (fmt, check.stderr)
        if fmt in ("torchrun", "sbatch", "torchtitan"):
            (tmp_path / "argv").unlink(missing_ok=True)
            run = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True,
                                 cwd=tmp_path, timeout=30)
            assert run.returncode == 0, (fmt, run.stderr)
            argv = (tmp_path / "argv").read_text().split("\n")[:-1]
            assert argv[-len(ran := expected_argv(spec, config, tmp_path)):] == ran \
                if fmt != "torchtitan" else "-m" in argv, (fmt, argv)
        if fmt == "command":
            run = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True,
                                 cwd=tmp_path, timeout=30)
            assert run.returncode == 0, run.stderr
            argv = (tmp_path / "argv").read_text().split("\n")[:-1]
            written = tmp_path / "paratune-run" / "ds_config.json"
            assert argv == [*hostile(marker), f"--tp={config.tp}", str(written), ""]
            assert json.loads(written.read_text())["train_micro_batch_size_per_gpu"] == \
                config.micro_batch_size
        if fmt in ("megatron-lm", "megatron-deepspeed", "megatron"):
            tool = "megatron-deepspeed" if fmt == "megatron" else fmt
            shown = subprocess.run(["bash", "-c", f'source {shlex.quote(str(path))}; '
                                    'printf "%s\\n" "${MEGATRON_ARGS[@]}"'],
                                   capture_output=True, text=True, env=env)
            assert shown.stdout.splitlines() == megatron_args(tool, spec, config)
        assert not marker.exists(), f"{fmt}: an injected command ran"
        if fmt == "yaml":
            assert yaml.safe_load(text) == job_settings(spec, config, "t0001")
            assert text.splitlines()[0] == "# " + _origin(spec, "t0001", config)
        if fmt == "deepspeed":
            origin = json.loads(text)["_paratune"]
            assert repr(spec.model.name) in origin and repr(spec.cluster.name) in origin


def test_torchrun_export_passes_the_values_through_unchanged(tmp_path):
    marker = tmp_path / "INJECTED"
    spec = spec_from_dict(hostile_specs(marker)[0])
    config = spec.candidates()[0]
    path = tmp_path / "launch.sh"
    path.write_text(export("torchrun", spec, "t0001", config))
    env = stand_ins(tmp_path)
    subprocess.run(["bash", str(path), "--extra", "$(touch x)"], env=env, check=True, cwd=tmp_path)
    argv = (tmp_path / "argv").read_text().splitlines()
    flags = job_flags(job_settings(spec, config, "t0001"))
    assert argv[-len(flags) - 2:] == [*flags, "--extra", "$(touch x)"]
    assert not marker.exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize("change,key", [
    ({"model": {"preset": "tiny", "name": "a\n$(touch /tmp/x)"}}, "model.name"),
    ({"cluster": {"preset": "cpu-local", "name": "a\rb"}}, "cluster.name"),
    ({"trial": {"env": {"A": "x\ntouch y"}}}, "trial.env.A"),
    ({"trial": {"env": {"A B": "x"}}}, "trial.env"),
    ({"trial": {"env": {"A;touch x": "x"}}}, "trial.env"),
    ({"trial": {"env": {"1A": "x"}}}, "trial.env"),
    ({"backend": {"kind": "slurm", "partition": "gpu\n#SBATCH --x"}}, "backend.partition"),
    ({"backend": {"kind": "slurm", "partition": "a b"}}, "backend.partition"),
    ({"backend": {"kind": "slurm", "qos": "'q'"}}, "backend.qos"),
    ({"backend": {"kind": "slurm", "sbatch_args": {"mem": "1G\nx"}}}, "backend.sbatch_args"),
    ({"backend": {"kind": "slurm", "sbatch_args": {"mem x": "1G"}}}, "backend.sbatch_args"),
    ({"backend": {"kind": "slurm", "sbatch_args": {"comment": '"a"'}}}, "backend.sbatch_args"),
    ({"backend": {"kind": "slurm", "setup": ["ok", "a\u2028b"]}}, "backend.setup[1]"),
])
def test_line_breaks_and_unsafe_names_are_refused(change, key):
    with pytest.raises(SpecError) as info:
        spec_from_dict(base(**change), source="s.yaml")
    message = str(info.value)
    assert "\n" not in message and len(message) < 500
    assert message.startswith(f"s.yaml: {key}"), message


@pytest.mark.parametrize("name", sorted(SHELL_ENV) + ["BASH_FUNC_f"])
def test_env_names_the_shell_acts_on_are_refused(tmp_path, name):
    """`srun bash -c` in an sbatch export runs the file BASH_ENV names (expanding `$(...)` in
    it); the other names change how the script's shell reads or runs it."""
    marker = tmp_path / "INJECTED"
    with pytest.raises(SpecError) as info:
        spec_from_dict(base(trial={"env": {name: f"$(touch {shlex.quote(str(marker))})"}},
                            backend={"kind": "slurm"}), source="s.yaml")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"s.yaml: trial.env.{name}: "), message
    assert "drop it or rename it" in message
    with pytest.raises(ValueError, match=f"trial.env.{name}"):
        env_line(name, "x")


def written_by_script(files: dict[str, str], folder: Path) -> dict[str, str]:
    """What bash writes into `folder` running write_files' lines for `files`."""
    script = folder / "write.sh"
    script.write_text("set -euo pipefail\n" + write_files(files))
    subprocess.run(["bash", str(script)], env={**os.environ, "RUN_DIR": str(folder / "run")},
                   cwd=folder, check=True, capture_output=True, timeout=30)
    return {name: (folder / "run" / name).read_bytes().decode() for name in files}


def test_files_a_script_writes_hold_their_text_and_nothing_in_it_runs(tmp_path):
    """A file the script writes into $RUN_DIR (a DeepSpeed config) is data whatever it holds: a
    line that reads as a here-document's end, quotes, `$(...)`, backslashes, carriage returns."""
    marker = tmp_path / "INJECTED"
    touch = f"touch {shlex.quote(str(marker))}"
    texts = ["", "\n", "{\n}\n", "a\n\nb", f"x\nPARATUNE_FILE_END\n{touch}\ny",
             f"PARATUNE_FILE_END\n{touch}", f"EOF\n{touch}\nEOF", "back\\slash\\\nend\\",
             "tab\tand\rreturn", "'\"'\"'", "ünïcode ✓", *hostile(marker)]
    files = {f"f{i}.json": text for i, text in enumerate(texts)}
    assert written_by_script(files, tmp_path) == {k: v + "\n" for k, v in files.items()}
    assert not marker.exists()


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\0")),
                min_size=1, max_size=4))
def test_any_text_a_script_writes_comes_back_as_it_was(tmp_path_factory, texts):
    files = {f"f{i}": text for i, text in enumerate(texts)}
    folder = tmp_path_factory.mktemp("write")
    assert written_by_script(files, folder) == {k: v + "\n" for k, v in files.items()}
