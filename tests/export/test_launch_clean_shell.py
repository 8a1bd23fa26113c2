"""Launch files run on a clean login shell: an exported script records the Python the trials
ran with (its environment first on PATH, PARATUNE_PYTHON to name another) and says in one
line when that Python is missing; it carries the cluster's documented environment (Frontier's
ROCm/RCCL variables), no trial time limit unmarked into a production sbatch, the trials'
PyTorch build in its header, and leaves no empty run folder behind."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_spec

from orchestrator.export import export
from orchestrator.export.common import build_of
from orchestrator.campaign_spec import spec_from_dict

CLEAN = ["env", "-i", "PATH=/usr/bin:/bin"]  # a login shell with nothing set up
RUN_TIMEOUT_S = 600  # a bound for a hung run only


def small_spec(**sections):
    data = {"name": "clean", "model": "tiny", "cluster": "cpu-local",
            "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
            "tracking": {"enabled": False}}
    data.update(sections)
    return spec_from_dict(data)


def stand_in_python(folder: Path, body: str) -> Path:
    """An executable `python` that runs `body` (bash) with the arguments it was given."""
    folder.mkdir(parents=True, exist_ok=True)
    python = folder / "python"
    python.write_text(f"#!/bin/bash\n{body}\n")
    python.chmod(0o755)
    return python


@pytest.mark.slow
@pytest.mark.timeout(3 * RUN_TIMEOUT_S)
def test_the_exported_winner_trains_on_a_clean_login_shell(tmp_path, runs_dir, cli):
    """A real campaign's winner, exported with `best --format torchrun`, trains under
    `env -i PATH=/usr/bin:/bin`: no torchrun on PATH, no venv activated, from another folder."""
    spec = write_spec(tmp_path / "q.yaml", name="clean", budget={"max_trials": 1},
                      trial={"steps": 2, "warmup_steps": 1, "timeout_s": RUN_TIMEOUT_S},
                      tracking={"enabled": False})
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    launch = tmp_path / "launch.sh"
    code, _, err = cli("best", "clean", "--format", "torchrun", "-o", str(launch))
    assert code == 0, err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = subprocess.run([*CLEAN, "bash", str(launch)], cwd=elsewhere, capture_output=True,
                         text=True, timeout=RUN_TIMEOUT_S)
    assert ran.returncode == 0, ran.stderr[-3000:]
    line = next(text for text in ran.stdout.splitlines() if text.startswith("PARATUNE_RESULT "))
    result = json.loads(line.split(" ", 1)[1])
    assert result["status"] == "ok" and result["tokens_per_s"] > 0, result
    assert list(elsewhere.iterdir()) == []  # no stray folder


@pytest.mark.parametrize("fmt", ["torchrun", "sbatch"])
def test_a_missing_interpreter_is_one_line_naming_the_fix(tmp_path, monkeypatch, fmt):
    """The recorded Python gone (another machine), or PARATUNE_PYTHON naming none: one line
    that names the interpreter and PARATUNE_PYTHON, and nothing runs."""
    gone = tmp_path / "gone venv" / "bin" / "python"
    monkeypatch.setattr(sys, "executable", str(gone))
    launch = tmp_path / "launch.sh"
    launch.write_text(export(fmt, small_spec(), "t0001", small_spec().candidates()[0]))
    for extra, named in ([], gone), (["PARATUNE_PYTHON=/nowhere/python3"], "/nowhere/python3"):
        ran = subprocess.run([*CLEAN, *extra, "bash", str(launch)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
        assert ran.returncode == 127, ran.stderr
        lines = ran.stderr.strip().splitlines()
        assert len(lines) == 1 and str(named) in lines[0] and "PARATUNE_PYTHON" in lines[0], lines


def test_the_recorded_interpreter_runs_the_program_and_leads_path(tmp_path, monkeypatch):
    """The built-in trainer runs as `$PYTHON -m torch.distributed.run`, and a campaign's own
    command finds the programs of the trials' environment (torchrun) first on PATH; a hostile
    interpreter path stays one word."""
    marker = tmp_path / "INJECTED"
    venv = tmp_path / f"v $(touch {marker}) 'q\"" / "bin"
    record = tmp_path / "argv"
    python = stand_in_python(venv, f'printf "%s\\n" "$@" > {shlex.quote(str(record))}')
    torchrun = venv / "torchrun"
    torchrun.write_text(f"#!/bin/bash\necho torchrun \"$@\" > {shlex.quote(str(record))}\n")
    torchrun.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    spec = small_spec()
    launch = tmp_path / "launch.sh"
    launch.write_text(export("torchrun", spec, "t0001", spec.candidates()[0]))
    ran = subprocess.run([*CLEAN, "bash", str(launch)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert record.read_text().split("\n")[:4] == ["-m", "torch.distributed.run", "--standalone",
                                                   "--nproc_per_node=2"]
    command = small_spec(trial={"command": ["torchrun", "--tp={tp}"], "workdir": str(tmp_path)})
    launch.write_text(export("command", command, "t0001", command.candidates()[0]))
    ran = subprocess.run([*CLEAN, "bash", str(launch)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert record.read_text() == "torchrun --tp=1\n"
    assert not marker.exists()
    run_line = export("yaml", spec, "t0001", spec.candidates()[0]).splitlines()[1]
    assert run_line.startswith(f"# Run: {shlex.quote(str(python))} -m torch.distributed.run ")


FRONTIER_DOCUMENTED = {  # OLCF Frontier user guide: PyTorch on Frontier, and RCCL's settings
    "NCCL_SOCKET_IFNAME": "hsn0", "NCCL_NET_GDR_LEVEL": "3", "NCCL_CROSS_NIC": "1"}


def test_frontier_scripts_carry_the_documented_rocm_rccl_environment(tmp_path, monkeypatch):
    """On every node of a Frontier sbatch the program sees RCCL's variables and MIOpen's
    cache in a folder of its own job; the trials' trial.env still wins."""
    record = tmp_path / "env"
    names = [*FRONTIER_DOCUMENTED, "MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR", "MY_VAR"]
    shown = " ".join(f'"{n}=${{{n}-unset}}"' for n in names)
    python = stand_in_python(tmp_path / "bin", f"printf '%s\\n' {shown} > {record}")
    bin_dir = tmp_path / "bin"
    for name, body in {"srun": 'shift; exec "$@"', "scontrol": "echo localhost"}.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    spec = small_spec(cluster="frontier", scale={"nodes": 2, "global_batch_size": 64},
                      backend={"kind": "slurm"},
                      trial={"env": {"NCCL_CROSS_NIC": "0", "MY_VAR": "mine"}})
    launch = tmp_path / "launch.sbatch"
    launch.write_text(export("sbatch", spec, "t0001", spec.candidates()[0]))
    assert "OLCF Frontier user guide" in launch.read_text()
    job = ["SLURM_JOB_ID=4242", "SLURM_JOB_NODELIST=localhost", "SLURM_JOB_NUM_NODES=2",
           "SLURM_NODEID=0"]
    ran = subprocess.run(["env", "-i", f"PATH={bin_dir}:/usr/bin:/bin", *job, "bash",
                          str(launch)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    seen = dict(line.split("=", 1) for line in record.read_text().splitlines())
    assert seen == {**FRONTIER_DOCUMENTED, "NCCL_CROSS_NIC": "0", "MY_VAR": "mine",
                    "MIOPEN_USER_DB_PATH": seen["MIOPEN_USER_DB_PATH"],
                    "MIOPEN_CUSTOM_CACHE_DIR": seen["MIOPEN_USER_DB_PATH"]}
    assert "4242" in seen["MIOPEN_USER_DB_PATH"], seen
    local = small_spec(backend={"kind": "slurm"})
    assert "NCCL_SOCKET_IFNAME" not in export("sbatch", local, "t0001", local.candidates()[0])


def directives(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


@pytest.mark.parametrize("backend", [{"kind": "local"}, {"kind": "simulated"}, {"kind": "ray"}])
def test_no_time_limit_comes_from_a_campaign_that_ran_no_slurm_trial(backend):
    spec = small_spec(backend=backend)
    text = export("sbatch", spec, "t0001", spec.candidates()[0])
    assert not [d for d in directives(text) if d.startswith("#SBATCH --time")], text
    assert "##SBATCH --time=" in text.splitlines()  # left for the user to set


@pytest.mark.parametrize("backend,limit", [({"kind": "slurm", "time_limit_min": 45}, "45"),
                                           ({"kind": "slurm", "sbatch_args": {"time": "7"}}, "7")])
def test_a_slurm_campaigns_time_limit_comes_marked_as_the_trials(backend, limit):
    spec = small_spec(backend=backend)
    lines = export("sbatch", spec, "t0001", spec.candidates()[0]).splitlines()
    at = lines.index(f"#SBATCH --time={limit}")
    assert "the trials' limit" in lines[at - 1] and lines[at - 1].startswith("# "), lines


@pytest.mark.parametrize("cluster", ["cpu-local", "frontier"])
def test_the_header_names_the_trials_torch_build(cluster):
    import torch

    cpu_build = torch.version.cuda is None and torch.version.hip is None
    spec = small_spec(cluster=cluster, scale={"nodes": 1, "global_batch_size": 64})
    for fmt in ("torchrun", "sbatch", "yaml"):
        header = export(fmt, spec, "t0001", spec.candidates()[0])
        assert f"PyTorch {torch.__version__}" in header
        assert ("a CPU build" in header) == cpu_build
        assert ("install the cluster's GPU build" in header) == (cpu_build and cluster != "cpu-local")


def test_a_gpu_build_is_named_by_its_toolkit():
    cuda = "__version__ = '2.5.1+cu121'\ncuda: Optional[str] = '12.1'\nhip = None\n"
    rocm = "__version__ = '2.5.1+rocm6.2'\ncuda = None\nhip: Optional[str] = '6.2.41133'\n"
    assert build_of(cuda, "gpu") == "PyTorch 2.5.1+cu121 (CUDA 12.1)"
    assert build_of(rocm, "gpu") == "PyTorch 2.5.1+rocm6.2 (ROCm/HIP 6.2.41133)"
    assert "a CPU build" in build_of("__version__ = '2.5.1'\ncuda = None\nhip = None\n", "gpu")


def test_a_script_makes_its_run_folder_only_to_write_there(tmp_path):
    """A program that reads nothing from $RUN_DIR leaves no ./paratune-run; one that does
    finds its file there."""
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    stand_in_python(tmp_path / "bin", "exit 0")
    (tmp_path / "bin" / "torchrun").symlink_to(tmp_path / "bin" / "python")
    env["PARATUNE_PYTHON"] = str(tmp_path / "bin" / "python")
    for command, made in ((["torchrun", "--tp={tp}"], False),
                          (["torchrun", "{deepspeed_config}"], True)):
        spec = small_spec(trial={"command": command, "workdir": str(tmp_path)})
        launch = tmp_path / "launch.sh"
        launch.write_text(export("command", spec, "t0001", spec.candidates()[0]))
        elsewhere = tmp_path / f"elsewhere-{made}"
        elsewhere.mkdir()
        ran = subprocess.run(["bash", str(launch)], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr
        assert (elsewhere / "paratune-run").exists() == made
        assert (elsewhere / "paratune-run" / "ds_config.json").exists() == made
