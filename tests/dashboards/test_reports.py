"""Reports, launch files and scaling studies: what a person uses the morning after."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, write_spec
from local_slurm import slurm_missing
from ports import free_port
from screenshots import CHROMIUM, keep_screenshot

FORMATS = ("yaml", "torchrun", "sbatch", "deepspeed", "megatron-lm", "megatron-deepspeed",
           "megatron", "torchtitan")
# The release each format names as the one it was written for.
TOOLS = {"yaml": "PyTorch 2.", "torchrun": "PyTorch 2.", "sbatch": "PyTorch 2.",
         "deepspeed": "DeepSpeed 0.19.8", "megatron-lm": "NVIDIA/Megatron-LM",
         "megatron-deepspeed": "Megatron-DeepSpeed", "megatron": "Megatron-DeepSpeed",
         "torchtitan": "torchtitan 0.3.0"}
SLURM_MISSING = slurm_missing()


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """A short real quickstart campaign (3 torchrun trials of the tiny model)."""
    from orchestrator.cli import main

    tmp = tmp_path_factory.mktemp("quickstart")
    runs = tmp / "runs"
    os.environ["PARATUNE_RUNS_DIR"] = str(runs)
    try:
        spec = write_spec(tmp / "q.yaml", budget={"max_trials": 3},
                          trial={"steps": 3, "warmup_steps": 1, "timeout_s": 300})
        assert main(["run", str(spec)]) == 0
        assert main(["report", "quickstart"]) == 0
    finally:
        del os.environ["PARATUNE_RUNS_DIR"]
    return runs


@pytest.mark.slow
def test_an_output_path_that_cannot_be_written_is_a_one_line_error(quickstart, cli, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("PARATUNE_RUNS_DIR", str(quickstart))
    (tmp_path / "a-file").write_text("")
    for args in (["best", "quickstart", "--format", "torchrun"], ["report", "quickstart"]):
        for target in (tmp_path / "a-file" / "out", tmp_path):
            code, _, err = cli(*args, "-o", str(target))
            assert code == 2 and "Traceback" not in err
            assert err.startswith(f"error: -o {target}: cannot write there (")
    record = quickstart / "quickstart"
    kept = {name: (record / name).read_bytes() for name in ("journal.jsonl", "spec.yaml")}
    for args in (["best", "quickstart", "--format", "torchrun"], ["report", "quickstart"]):
        for name in kept:
            code, _, err = cli(*args, "-o", str(record / name))
            assert code == 2 and "would overwrite the campaign's own record" in err, err
    assert {name: (record / name).read_bytes() for name in kept} == kept
    assert cli("report", "quickstart", "-o", str(record / "report.html"))[0] == 0


@pytest.mark.slow
def test_report_of_the_quickstart(quickstart):
    page = (quickstart / "quickstart" / "report.html").read_text()
    for section in ("convergence", "knobs", "prediction", "memory"):
        assert f'id="{section}"' in page
    assert "Best configuration" in page and "torchrun" in page
    assert "Failures by reason" in page
    assert not re.search(r"<script[^>]+src=\"https?://", page)  # plotly.js inlined: works offline
    assert "Plotly.newPlot" in page
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{quickstart / 'mlflow.db'}")
    exp = client.get_experiment_by_name("paratune/quickstart")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`paratune.kind` = 'campaign'")
    artifacts = [a.path for a in client.list_artifacts(parent.info.run_id)]
    assert "report.html" in artifacts and "campaign_summary.json" in artifacts
    assert "best" in parent.data.tags["mlflow.note.content"]


@pytest.mark.slow
def test_every_launch_format_for_the_quickstart_winner(quickstart, tmp_path, cli):
    best = json.loads(cli("best", "quickstart", "--json", "--runs-dir", str(quickstart))[1])
    for fmt in FORMATS:
        out = tmp_path / f"launch.{fmt}"
        code, _, err = cli("best", "quickstart", "--format", fmt, "-o", str(out),
                           "--runs-dir", str(quickstart))
        if fmt == "megatron-lm" and best["config"]["zero_stage"] >= 2:
            assert code == 2 and "zero_stage" in err and len(err.strip().splitlines()) == 1
            continue  # Megatron-LM's distributed optimizer is ZeRO-1: no ZeRO-2/3 to export
        assert code == 0, err
        text = out.read_text()
        assert "quickstart" in text and re.search(r"t\d{4}", text), f"{fmt} names its origin"
        written_for = text[text.index("written for"):].splitlines()[0]
        assert TOOLS[fmt] in written_for, f"{fmt} names its tool's release"
    ds = json.loads((tmp_path / "launch.deepspeed").read_text())
    assert ds["zero_optimization"]["stage"] in (0, 1, 2, 3) and ds["train_batch_size"] == 8
    assert "--tensor-model-parallel-size=1" in (tmp_path / "launch.megatron").read_text()
    assert "--parallelism.tensor-parallel-degree=1" in (tmp_path / "launch.torchtitan").read_text()
    for script in ("launch.sbatch", "launch.torchtitan"):
        assert subprocess.run(["bash", "-n", str(tmp_path / script)]).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(SLURM_MISSING is not None, reason=SLURM_MISSING or "")
def test_exported_sbatch_script_runs_on_slurm(quickstart, tmp_path, cli):
    script = tmp_path / "launch.sbatch"
    assert cli("best", "quickstart", "--format", "sbatch", "-o", str(script),
               "--runs-dir", str(quickstart))[0] == 0
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    check = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True,
                           env=env, cwd=ROOT)
    assert check.returncode == 0, check.stderr
    output = tmp_path / "slurm.out"
    submitted = subprocess.run(["sbatch", "--parsable", f"--output={output}", str(script),
                                "--steps", "2"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.time() + 180
    while time.time() < deadline:
        if not subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
            break
        time.sleep(1)
    text = output.read_text()
    line = next(row for row in text.splitlines() if row.startswith("PARATUNE_RESULT "))
    assert json.loads(line.split(" ", 1)[1])["status"] == "ok"


@pytest.mark.skipif(SLURM_MISSING is not None, reason=SLURM_MISSING or "")
def test_sbatch_takes_the_trials_cpus_and_the_specs_own_options(tmp_path):
    """Slurm's own sbatch accepts the script's directives: the CPUs the trials' one task per
    rank had, given to the node's one task, and sbatch_args replacing an option it sets."""
    from orchestrator.export import export
    from orchestrator.campaign_spec import spec_from_dict

    spec = spec_from_dict({
        "name": "cpus", "model": "tiny", "cluster": "cpu-local", "tracking": {"enabled": False},
        "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
        "backend": {"kind": "slurm", "cpus_per_task": 1, "time_limit_min": 5,
                    "sbatch_args": {"time": "3", "comment": "tuned"}}})
    script = tmp_path / "launch.sbatch"
    script.write_text(export("sbatch", spec, "t0001", spec.candidates()[0]))
    directives = [line for line in script.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --cpus-per-task=2" in directives and "#SBATCH --time=3" in directives
    assert len({d.split("=")[0] for d in directives}) == len(directives)
    check = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True,
                           text=True, cwd=ROOT)
    assert check.returncode == 0, check.stderr


def test_weak_scaling_study_of_frontier_175b(tmp_path, runs_dir, cli):
    """Simulated Frontier 175B: the best layout re-run on 32, 64 and 128 nodes keeps >= 95%
    of its per-GCD throughput, and the report plots it."""
    code, _, err = cli("run", str(EXAMPLES / "frontier-175b-scaling.yaml"))
    assert code == 0, err
    from orchestrator.record.campaign import CampaignView
    from orchestrator.record.scaling import efficiency

    view = CampaignView.open(runs_dir, "frontier-175b-scaling")
    rows = efficiency(view.records(), "weak", view.spec.gpus_per_node)
    assert [r["nodes"] for r in rows] == [32, 64, 128]
    assert all(r["efficiency"] >= 0.95 for r in rows)
    assert cli("report", "frontier-175b-scaling")[0] == 0
    page = (runs_dir / "frontier-175b-scaling" / "report.html").read_text()
    assert 'id="scaling"' in page and "Weak scaling efficiency" in page


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")
def test_report_renders_in_a_headless_browser(quickstart, tmp_path):
    """Debian's Chromium, headless, no sandbox, no background networking: the plots render
    (plotly's SVG layers hold drawn marks) and the page logs no errors."""
    page = quickstart / "quickstart" / "report.html"
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
             "--virtual-time-budget=10000", "--enable-logging=stderr", "--v=0",
             "--window-size=1280,3000"]
    shot = tmp_path / "report.png"
    taken = subprocess.run(flags + [f"--screenshot={shot}", page.as_uri()],
                           capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000, taken.stderr[-2000:]
    dom = subprocess.run(flags + ["--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.stdout.count('class="main-svg"') >= 4  # every figure drew its SVG
    # The answer first; the launch script after it, folded.
    assert dom.stdout.index('<section id="answer">') < dom.stdout.index('<details id="launch">')
    assert len(re.findall(r'<path class="(?:point|js-line|bars?)"', dom.stdout)) + \
        dom.stdout.count('class="trace scatter') + dom.stdout.count("parcoords") > 4
    console_errors = [text for text in (taken.stderr + dom.stderr).splitlines()
                      if "CONSOLE" in text and ("Uncaught" in text or "Error" in text)]
    assert not console_errors, console_errors
    keep_screenshot(shot, "report.png")


@pytest.mark.slow
def test_ui_serves_the_tracking_store_on_localhost(quickstart):
    import urllib.request

    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "ui", "quickstart",
                           "--runs-dir", str(quickstart), "--port", str(port)], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, status = time.time() + 90, None
        while time.time() < deadline and status is None:
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).status
            except OSError:
                time.sleep(0.5)
        assert status == 200
    finally:
        os.killpg(ui.pid, 15)  # the server is `paratune ui` itself (same PID) and its workers
        ui.wait(timeout=30)
