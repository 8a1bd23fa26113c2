"""Failed trials are data: OOM, infeasible, crash and timeout each get their status, all ranks
exit and no process is left behind. External trainers run from an argv template."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, builtin_request, journal_events, write_spec

from orchestrator.backends.local import LocalBackend

TINY = {"num_layers": 2, "hidden": 64, "num_heads": 4, "ffn_hidden": 128, "vocab_size": 256,
        "seq_len": 32}
TRAINER = ROOT / "tests" / "fixtures" / "external_trainer.py"


def processes_naming(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line names `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "cmdline").read_bytes() and \
                    "State:\tZ" not in (proc / "status").read_text():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def wait_gone(marker: str, limit: float = 30) -> list[int]:
    """Wait for the processes naming `marker` to exit: a SIGKILLed process still has to be
    scheduled to die, which takes a while on a busy machine. Those left after `limit` s."""
    deadline = time.monotonic() + limit
    while (left := processes_naming(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def run_trial(tmp_path: Path, timeout_s: float = 300, env: dict | None = None, **settings):
    """Run the built-in job as one local trial; its result and the seconds from before it was
    submitted to its result. The default timeout is far above what a trial needs on a busy
    machine: a trial that ends otherwise than by its timeout reports its own status."""
    request = builtin_request(
        tmp_path / "trial", "t1", {"model": TINY, "dp": 2, "micro_batch_size": 2,
                                   "grad_accum_steps": 2, "steps": 2, "warmup_steps": 1, **settings},
        timeout_s=timeout_s, env={"OMP_NUM_THREADS": "1", **(env or {})},
    )
    started = time.monotonic()  # before the backend starts the trial's own clock
    handle = LocalBackend().submit(request)
    while (result := handle.poll()) is None:
        time.sleep(0.2)
    elapsed = time.monotonic() - started
    assert not wait_gone(str(tmp_path / "trial")), "a rank outlived its trial"
    return result, elapsed


@pytest.mark.slow
def test_memory_cap_gives_oom_on_every_rank(tmp_path):
    result, _ = run_trial(tmp_path, memory_limit_gb=0.1)
    assert result.status == "oom" and "memory_limit_gb=0.1" in result.error


@pytest.mark.slow
def test_oom_on_one_rank_tears_down_the_others(tmp_path):
    """Had the other rank been left waiting on the one that ran out of memory, the trial
    would have ended at its timeout, as `timeout`."""
    result, _ = run_trial(tmp_path, env={"PARATUNE_INJECT_FAULT": "oom"})
    assert result.status == "oom" and "injected out-of-memory" in result.error
    assert "timeout_s" not in result.error


@pytest.mark.slow
def test_crash_gives_failed_with_the_error(tmp_path):
    result, _ = run_trial(tmp_path, env={"PARATUNE_INJECT_FAULT": "crash"})
    assert result.status == "failed" and "RuntimeError: injected crash" in result.error


@pytest.mark.slow
def test_hang_is_killed_at_the_timeout_with_its_process_group(tmp_path):
    result, elapsed = run_trial(tmp_path, timeout_s=20, env={"PARATUNE_INJECT_FAULT": "hang"})
    assert result.status == "timeout" and "timeout_s=20" in result.error
    assert elapsed >= 20  # not before its timeout; run_trial saw every rank gone


def test_bad_mode_combination_is_infeasible_before_any_process_group(tmp_path):
    """seq_len 31 is not divisible by tp 2: refused by the job's check before any process
    group is set up."""
    config = {"model": {**TINY, "seq_len": 31}, "tp": 2, "dp": 1, "sequence_parallel": True}
    result, _ = run_trial(tmp_path, **config)
    assert result.status == "infeasible" and "sequence_parallel" in result.error
    log = (tmp_path / "trial" / "trial.log").read_text()
    assert "init_process_group" not in log



def external_spec(tmp_path: Path, mode: str, **trial) -> Path:
    record = str(tmp_path / "argv-{trial_id}.json")
    command = [sys.executable, str(TRAINER), "--tp", "{tp}", "--mbs", "{micro_batch_size}",
               "--note", "x; rm -rf /tmp/x", "--deepspeed-config", "{deepspeed_config}",
               "--record", record, "--mode", mode]
    return write_spec(
        tmp_path / "ext.yaml", name=f"ext-{mode}", search={"algorithm": "grid"},
        budget={"max_trials": 3}, scale={"gpus_per_node": 2, "global_batch_size": 8},
        space={"tp": [1, 2], "zero_stage": [0, 1], "micro_batch_size": [2],
               "activation_checkpointing": ["none"]},
        trial={"command": command, "timeout_s": 30, **trial},
    )


@pytest.mark.parametrize("mode", ["file", "stdout"])
def test_external_command_gets_literal_arguments_and_reports_back(tmp_path, runs_dir, cli, mode):
    code, _, err = cli("run", str(external_spec(tmp_path, mode)))
    assert code == 0, err
    results = {e["trial_id"]: e for e in journal_events(runs_dir / f"ext-{mode}")
               if e["event"] == "finished"}
    assert {r["result"]["status"] for r in results.values()} == {"ok"}
    for trial_id, event in results.items():
        recorded = json.loads((tmp_path / f"argv-{trial_id}.json").read_text())
        argv = recorded["argv"]
        assert argv[argv.index("--note") + 1] == "x; rm -rf /tmp/x"  # one literal argument
        tp = event["config"]["tp"]
        assert argv[argv.index("--tp") + 1] == str(tp)
        assert event["result"]["tokens_per_s"] == 1000.0 * 2 / tp
        ds = recorded["ds"]
        assert ds["zero_optimization"]["stage"] in (0, 1)
        assert ds["train_micro_batch_size_per_gpu"] == 2


def test_a_trial_never_gets_a_services_credentials(tmp_path, runs_dir, cli, monkeypatch):
    """A controller the service started holds its slot token and may hold the server's
    database URL; the trial program, the user's code, gets neither."""
    monkeypatch.setenv("PARATUNE_SLOTS_TOKEN", "slot-secret")  # without its URL: no slots
    monkeypatch.setenv("PARATUNE_DATABASE_URL", "postgresql://paratune:secret@db/paratune")
    code, _, err = cli("run", str(external_spec(tmp_path, "file")))
    assert code == 0, err
    for record in tmp_path.glob("argv-t*.json"):
        names = json.loads(record.read_text())["paratune_env"]
        assert "PARATUNE_TRIAL_ID" in names and "PARATUNE_RESULT_FILE" in names, names
        assert "PARATUNE_SLOTS_TOKEN" not in names and "PARATUNE_DATABASE_URL" not in names


def test_external_command_without_result_fails_and_a_slow_one_times_out(tmp_path, runs_dir, cli):
    assert cli("run", str(external_spec(tmp_path, "none")))[0] == 0
    results = [e["result"] for e in journal_events(runs_dir / "ext-none") if e["event"] == "finished"]
    assert {r["status"] for r in results} == {"failed"}
    assert "no step metrics in its log" in results[0]["error"]

    assert cli("run", str(external_spec(tmp_path, "sleep", timeout_s=3)))[0] == 0
    results = [e["result"] for e in journal_events(runs_dir / "ext-sleep") if e["event"] == "finished"]
    assert {r["status"] for r in results} == {"timeout"}
    # Its own trainers (their argv names this test's folder): other tests, the two-node Slurm
    # one among them, may run the same script meanwhile.
    assert not processes_naming(str(tmp_path))


def test_unknown_placeholder_is_a_spec_error(tmp_path, cli):
    spec = write_spec(tmp_path / "bad.yaml", trial={"command": ["train.py", "--x", "{tensor_parallel}"]})
    code, _, err = cli("run", str(spec))
    assert code == 2 and "{tensor_parallel}" in err and "{tp}" in err


def test_a_relative_command_resumes_from_any_folder(tmp_path, runs_dir, cli, monkeypatch):
    """The saved spec keeps the folder the campaign started in, so a trainer named relative
    to it still runs when `resume` is typed elsewhere."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(TRAINER, work / "trainer.py")
    spec = external_spec(tmp_path, "file")
    data = yaml.safe_load(spec.read_text())
    data["trial"]["command"][1] = "trainer.py"
    data["budget"]["max_trials"] = 1
    spec.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(work)
    assert cli("run", str(spec))[0] == 0
    saved = runs_dir / "ext-file" / "spec.yaml"
    data = yaml.safe_load(saved.read_text())
    assert data["trial"]["workdir"] == str(work)
    data["budget"]["max_trials"] = 2
    saved.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("resume", "ext-file")
    assert code == 0, err
    statuses = [e["result"]["status"] for e in journal_events(runs_dir / "ext-file")
                if e["event"] == "finished"]
    assert statuses == ["ok", "ok"]


def test_a_command_campaign_exports_its_own_command(tmp_path, runs_dir, cli):
    """`--format command` runs the user's program as the winning trial ran it: the same argv
    (hostile text one literal argument) and DeepSpeed config; a built-in launch file for it
    comes with a note that it runs another program."""
    code, out, err = cli("run", str(external_spec(tmp_path, "stdout")))
    assert code == 0, err
    assert "export it: paratune best ext-stdout --format command -o launch.sh\n" in out
    best = json.loads(cli("best", "ext-stdout", "--json")[1])
    winner = tmp_path / f"argv-{best['trial_id']}.json"
    measured = json.loads(winner.read_text())
    winner.unlink()
    script = tmp_path / "launch.sh"
    code, _, err = cli("best", "ext-stdout", "--format", "command", "-o", str(script))
    assert code == 0 and "note:" not in err, err
    ran = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "RUN_DIR": "production"}, timeout=60)
    assert ran.returncode == 0, ran.stderr
    replayed = json.loads(winner.read_text())
    deepspeed_at = measured["argv"].index("--deepspeed-config") + 1
    assert replayed["argv"][deepspeed_at] == str(tmp_path / "production" / "ds_config.json")
    del measured["argv"][deepspeed_at], replayed["argv"][deepspeed_at]
    # The trial's own variables (its result file, its ID) are the campaign's, not the script's;
    # the DeepSpeed config is the trial's, less the keys only a trial's measurement needs.
    trial_only = {"steps_per_print", "log_level"}
    assert trial_only <= set(measured["ds"]) and not trial_only & set(replayed["ds"])
    assert (replayed["argv"], replayed["ds"]) == (
        measured["argv"], {k: v for k, v in measured["ds"].items() if k not in trial_only})
    assert "PARATUNE_RESULT_FILE" not in replayed["paratune_env"]
    code, same, err = cli("best", "ext-stdout", "--format", "torchrun")
    assert code == 0 and "note:" not in err and same == script.read_text()
    code, _, err = cli("best", "ext-stdout", "--format", "yaml")
    assert code == 0 and "measured trainer command" in err and "--format command" in err


def test_only_a_command_campaign_has_a_command_to_export(tmp_path, runs_dir, cli):
    spec = write_spec(tmp_path / "sim.yaml", name="sim", budget={"max_trials": 2},
                      backend={"kind": "simulated"})
    assert cli("run", str(spec))[0] == 0
    code, _, err = cli("best", "sim", "--format", "command")
    assert code == 2 and "ran trainer 'builtin', not a trial.command" in err
