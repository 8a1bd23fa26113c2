"""Launch files rerun what the campaign measured: the scripts have the trials' environment and,
where a program reads files, their folder (run with stand-ins for torchrun, srun and scontrol); the sbatch script
asks for the CPUs the trials had; the DeepSpeed config is the one the winner ran, and no
AMSP sharding is passed off as a ZeRO stage; `-o` follows the umask and `-` is stdout."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import write_spec
from test_export_safety import stand_ins

from orchestrator.common.errors import SpecError
from orchestrator.export import export, unmeasured_note
from orchestrator.export.scripts import sbatch_directives
from orchestrator.space import ShardingFactors
from orchestrator.campaign_spec import spec_from_dict

VALUE = "a b '$(touch injected)' \"c\""


def recording_bin(tmp_path: Path) -> dict[str, str]:
    """Stand-ins whose torchrun records its folder and $MY_VAR."""
    env = stand_ins(tmp_path, 'pwd > "$RECORD.cwd"; printf "%s" "${MY_VAR-unset}" > "$RECORD.env"')
    env.pop("MY_VAR", None)
    return {**env, "RECORD": str(tmp_path / "record")}


def spec_with(tmp_path: Path, **trial):
    workdir = tmp_path / "work dir $(x)"
    workdir.mkdir(exist_ok=True)
    return spec_from_dict({
        "name": "ctx", "model": "tiny", "cluster": "cpu-local", "tracking": {"enabled": False},
        "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
        "trial": {"env": {"MY_VAR": VALUE}, "workdir": str(workdir), **trial}}), workdir


@pytest.mark.parametrize("fmt,trial,in_workdir", [
    ("torchrun", {}, False), ("sbatch", {}, False),
    ("torchtitan", {"trainer": "torchtitan"}, True),
    ("command", {"command": ["torchrun", "--tp={tp}"]}, True),
])
def test_a_script_has_the_trials_environment_and_folder(tmp_path, fmt, trial, in_workdir):
    """Every script sets trial.env; torchtitan's and a command's run where the trials ran
    (their relative paths start there), the built-in trainer's from anywhere (it reads no
    file, and a production machine may have no such folder)."""
    spec, workdir = spec_with(tmp_path, **trial)
    config = spec.candidates()[0]
    script = tmp_path / f"launch-{fmt}"
    script.write_text(export(fmt, spec, "t0001", config))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run(["bash", str(script)], env=recording_bin(tmp_path), cwd=elsewhere,
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    ran_in = workdir if in_workdir else elsewhere
    assert (tmp_path / "record.cwd").read_text().strip() == str(ran_in)
    assert (tmp_path / "record.env").read_text() == VALUE
    assert not list(tmp_path.rglob("injected"))


def test_the_sbatch_script_asks_for_the_cpus_the_trials_had(tmp_path):
    """Trials of the built-in trainer ran a Slurm task per rank with cpus_per_task each; the
    script runs one task per node, whose torchrun starts all of the node's ranks."""
    def directives(**backend) -> list[tuple[str, object]]:
        spec = spec_from_dict({
            "name": "s", "model": "tiny", "cluster": "a100-80g",
            "scale": {"nodes": 2, "global_batch_size": 16},
            "backend": {"kind": "slurm", "cpus_per_task": 7, **backend}})
        return sbatch_directives(spec)

    found = directives(sbatch_args={"gpus-per-node": "a100:8", "mem": "0"})
    options = [option for option, _ in found]
    assert len(options) == len(set(options)), found  # each option once
    assert dict(found)["cpus-per-task"] == 56 and dict(found)["gpus-per-node"] == "a100:8"
    assert dict(found)["ntasks-per-node"] == 1 and dict(found)["mem"] == "0"
    with pytest.raises(SpecError, match=r"^backend\.sbatch_args\.nodes: 3 differs from the "
                                        r"launch file's --nodes=2"):
        directives(sbatch_args={"nodes": "3"})


def test_the_deepspeed_config_is_the_one_the_winner_ran(tmp_path):
    base = tmp_path / "ds_base.json"
    base.write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}}))
    spec = spec_from_dict({
        "name": "ds", "model": "tiny", "cluster": "cpu-local", "tracking": {"enabled": False},
        "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
        "trial": {"trainer": "deepspeed", "workdir": str(tmp_path),
                  "deepspeed": {"script": "train.py", "config": base.name}}})
    config = spec.candidates()[0]
    trial_dir = tmp_path / "trials" / "t0001"
    trial_dir.mkdir(parents=True)
    ran = json.loads(export("deepspeed", spec, "t0001", config))  # as the trial wrote it
    (trial_dir / "ds_config.json").write_text(json.dumps(ran))
    base.write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": 0.1}}}))
    exported = json.loads(export("deepspeed", spec, "t0001", config, trial_dir))
    assert exported["optimizer"]["params"]["lr"] == 3e-4 and exported == ran
    base.unlink()  # the base file gone: the trial's copy is all it needs
    assert json.loads(export("deepspeed", spec, "t0001", config, trial_dir)) == ran


def test_amsp_factors_reach_deepspeed_only_as_a_zero_stage():
    spec = spec_from_dict({
        "name": "a", "model": "tiny", "cluster": "a100-80g",
        "scale": {"nodes": 2, "global_batch_size": 16}, "space": {"kind": "amsp"}})
    candidates = spec.candidates()
    zero3 = ShardingFactors.named("zero3", 8, 2).as_tuple()
    as_zero3 = next(c for c in candidates if c.sharding.as_tuple() == zero3)
    assert json.loads(export("deepspeed", spec, "t1", as_zero3))["zero_optimization"] == {
        "stage": 3}
    partial = next(c for c in candidates if c.sharding.as_tuple() == (1, 1, 4, 1, 4, 1))
    with pytest.raises(SpecError, match=r"^deepspeed: AMSP sharding factors \(1, 1, 4, 1, 4, "
                                        r"1\) are no ZeRO stage"):
        export("deepspeed", spec, "t1", partial)


def test_notes_and_errors_name_what_the_export_cannot_carry():
    spec = spec_from_dict({"name": "b", "model": "tiny", "cluster": "cpu-local",
                           "space": {"zero_stage": [3]},
                           "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8}})
    note = unmeasured_note("torchtitan", spec)
    assert "torchtitan's llama3 llama3_debugmodel, not tiny" in note
    with pytest.raises(SpecError, match=r"^--format megatron-lm: the winner tp1-pp1-dp2-z3"):
        export("megatron-lm", spec, "t1", spec.candidates()[0])


def test_output_files_follow_the_umask_and_dash_is_stdout(tmp_path, runs_dir, cli):
    spec = write_spec(tmp_path / "q.yaml", backend={"kind": "simulated"},
                      budget={"max_trials": 2}, tracking={"enabled": False})
    assert cli("run", str(spec))[0] == 0
    name = "quickstart"
    script = tmp_path / "launch.sh"
    old = os.umask(0o077)
    try:
        assert cli("best", name, "--format", "torchrun", "-o", str(script))[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(script.stat().st_mode) == 0o700
    assert cli("best", name, "--format", "yaml", "-o", str(script))[0] == 0
    assert stat.S_IMODE(script.stat().st_mode) & 0o111 == 0  # no script any more
    code, out, _ = cli("best", name, "--format", "yaml", "-o", "-")
    assert code == 0 and out.startswith("# ParaTune campaign") and not Path("-").exists()
    code, out, _ = cli("best", name, "--format", "torchrun", "--json")
    assert json.loads(out)["text"].startswith("#!/usr/bin/env bash")
