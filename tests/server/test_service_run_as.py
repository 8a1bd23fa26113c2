"""`paratune server --run-as nobody` against a real server started as root: a local campaign
runs as that user, and nothing a campaign's programs may write (the runs directory is theirs)
makes the service write, chmod or read anything of its own, or anything of root's; nor does a
file a user names, read for them as that user, with one answer for missing and unreadable."""

from __future__ import annotations

import os
import platform
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import ROOT
from service_harness import ServiceProcess
from test_service import QUICKSTART, SIMULATED, one_real_trial, simulated_options

USER = "nobody"
SECRET = "S3cretPW2"



def runs_as_user(python: str, env: dict[str, str]) -> bool:
    try:
        done = subprocess.run([python, "-c", "import orchestrator.campaign_spec"], user=USER, cwd="/",
                              env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
                              capture_output=True, timeout=120)
    except OSError:  # not even started
        return False
    return done.returncode == 0


def python_for_user(base: Path) -> tuple[str, dict[str, str]]:
    """An interpreter the run-as user can run, and the environment it needs: this one where
    the user reaches it, else a virtual environment over this one's site-packages and a
    hard-linked copy of its installation (a pyenv Python under /root, mode 0700, is out of
    any other user's reach)."""
    if runs_as_user(sys.executable, {}):
        return sys.executable, {}
    if sys.prefix == sys.base_prefix:
        pytest.skip(f"{USER} cannot run {sys.executable}, and it is not a virtual environment "
                    "whose packages another interpreter could use")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    source, home = Path(sys.base_prefix), base / "python"
    skipped = source / "lib" / version / "site-packages"
    for folder, dirs, files in os.walk(source):
        here = Path(folder)
        target = home / here.relative_to(source)
        target.mkdir(mode=0o755, exist_ok=True)
        if here == skipped:
            dirs.clear()
            continue
        for name in [*files, *[d for d in dirs if (here / d).is_symlink()]]:
            if (here / name).is_symlink():
                os.symlink(os.readlink(here / name), target / name)
            else:
                try:
                    os.link(here / name, target / name)
                except OSError:
                    shutil.copy2(here / name, target / name)
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
    venv = base / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(home / "bin" / version)
    (venv / "lib" / version).mkdir(parents=True)
    (venv / "lib" / version / "site-packages").symlink_to(
        Path(sys.prefix) / "lib" / version / "site-packages")
    (venv / "pyvenv.cfg").write_text(f"home = {home / 'bin'}\ninclude-system-site-packages = "
                                     f"false\nversion = {platform.python_version()}\n")
    python, env = str(venv / "bin" / "python"), {"LD_LIBRARY_PATH": str(home / "lib")}
    if not runs_as_user(python, env):
        pytest.skip(f"{USER} cannot run {sys.executable} nor a copy of its installation")
    return python, env


@pytest.fixture(scope="module")
def base():
    """A folder the run-as user may enter (pytest's own are mode 0700), removed at the end."""
    if os.geteuid() != 0:
        pytest.skip("--run-as needs the tests to run as root (`make test` as root), to start "
                    "the server as root")
    folder = Path(tempfile.mkdtemp(prefix="paratune-run-as-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def server(base):
    python, env = python_for_user(base)
    state = base / "state"
    state.mkdir(mode=0o700)
    made = ServiceProcess(state, f"sqlite:///{state / 'server.db'}", "--run-as", USER,
                          runs_dir=base / "runs", python=python)
    made.env.update(env)
    made.start()
    made.tokens = {"alice": made.token("alice"), "bob": made.token("bob")}
    assert made.cli("server", "grant", "--user", "bob", "--state-dir", str(state),
                    "--database", made.database_url).returncode == 0
    yield made
    made.stop()


def run_as_other_user(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, user=USER, cwd="/", capture_output=True, text=True, timeout=60)


def trial_running(server: ServiceProcess, script: str, name: str) -> list[str]:
    """A granted user's campaign of one trial that runs `script` in a shell as the run-as
    user (it fails as a trial: it prints no result). Its torch extensions folder is its own,
    so that it runs whether or not the service gives the run-as user a home of its own."""
    return [f"name={name}", "budget.max_trials=1", "tracking.enabled=false",
            f"trial.command=[/bin/sh, -c, '{script}']",
            f"trial.env.TORCH_EXTENSIONS_DIR={server.runs_dir / 'extensions'}"]


def test_a_named_file_is_read_by_a_child_that_does_not_repeat_it(tmp_path):
    """Without --run-as too: a FIFO is refused at once, answered as a missing file is, and a
    value of the file that does not validate is named by its key alone."""
    from orchestrator.common.errors import SpecError
    from orchestrator.server.submission import read_submission
    from orchestrator.server.submission_as_user import parse_in_child

    (tmp_path / "bad.yaml").write_text(f"num_layers: {SECRET}\nhidden: 64\n")
    os.mkfifo(tmp_path / "fifo.yaml")
    answers = {}
    for name in ("bad.yaml", "fifo.yaml", "missing.yaml"):
        data = read_submission(SIMULATED.read_text(),
                               [*simulated_options("x"), f"model={tmp_path / name}"])
        with pytest.raises(SpecError) as refused:
            parse_in_child(data, tmp_path / "runs", None, None, [], cwd=str(tmp_path),
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        answers[name] = str(refused.value).replace(str(tmp_path / name), "FILE")
    assert SECRET not in answers["bad.yaml"] and "model.num_layers" in answers["bad.yaml"]
    assert answers["fifo.yaml"] == answers["missing.yaml"]


def test_a_file_named_by_a_user_is_read_as_the_run_as_user(server):
    """A root-only file and a missing one answer alike, without the file's content."""
    state = server.state_dir
    (state / "secret.yaml").write_text(f"num_layers: {SECRET}\nhidden: 64\n")
    (state / "secret.yaml").chmod(0o600)
    answers = []
    for path in (state / "secret.yaml", state / "missing.yaml"):
        refused = server.submit(server.tokens["bob"], SIMULATED, *simulated_options("peek"),
                                f"model={path}")
        assert refused.status_code == 422, refused.text
        assert SECRET not in refused.text
        answers.append(refused.json()["detail"].replace(str(path), "FILE"))
    assert answers[0] == answers[1]
    assert answers[0].startswith("submitted spec: model: ") and "FILE" in answers[0]


def test_a_fifo_named_as_a_model_file_is_refused_and_blocks_nothing(server, base):
    fifo = base / "fifo.yaml"
    os.mkfifo(fifo, 0o644)
    answered: dict[str, httpx.Response | Exception] = {}

    def submit() -> None:
        try:
            answered["fifo"] = httpx.post(
                f"{server.url}/api/campaigns", timeout=60,
                headers={"Authorization": f"Bearer {server.tokens['bob']}"},
                json={"spec_yaml": SIMULATED.read_text(), "workdir": str(ROOT),
                      "set": [*simulated_options("fifo"), f"model={fifo}"]})
        except httpx.HTTPError as exc:
            answered["fifo"] = exc

    asking = threading.Thread(target=submit)
    started = time.monotonic()
    asking.start()
    try:
        listed = server.api("GET", "/api/campaigns", server.tokens["alice"])
        assert listed.status_code == 200
        asking.join(90)
    finally:  # a reader the service left waiting on the FIFO ends with the test
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        asking.join(30)
    reply = answered["fifo"]
    assert isinstance(reply, httpx.Response), reply
    assert reply.status_code == 422 and "model" in reply.json()["detail"], reply.text
    assert time.monotonic() - started < 60
    ok = server.submit(server.tokens["alice"], SIMULATED,
                       *simulated_options("after-fifo", trials=1))
    assert ok.status_code == 201, ok.text


def test_a_local_campaign_runs_as_the_run_as_user(server):
    token = server.tokens["alice"]
    submitted = server.submit(token, QUICKSTART, *one_real_trial("local-as-user"))
    assert submitted.status_code == 201, submitted.text
    campaign = server.wait_final(token, ["local-as-user"])["local-as-user"]
    assert campaign["state"] == "finished" and campaign["counts"].get("ok") == 1, \
        (campaign, server.logs())
    trial_dir = next((server.runs_dir / "local-as-user" / "trials").iterdir())
    assert trial_dir.stat().st_uid == pwd.getpwnam(USER).pw_uid


def test_a_trial_cannot_make_the_service_write_through_a_link(server, base):
    """The trial swaps the service's spec folders (that in the runs directory, that in the
    state directory) for ones holding links to a root-only file and to a new file in the state
    directory; a later campaign's spec is not written through them."""
    private = base / "root-only"
    private.mkdir(mode=0o700)
    (private / "target").write_text("original\n")
    (private / "target").chmod(0o600)
    planted = server.state_dir / "planted"
    script = (f"cd {server.runs_dir}; mv .service-specs old-specs; mkdir -p .service-specs; "
              f"ln -s {private / 'target'} .service-specs/victim.yaml; "
              f"ln -s {planted} .service-specs/victim2.yaml; "
              f"ln -s {private / 'target'} {server.state_dir / 'specs' / 'victim.yaml'}; true")
    token = server.tokens["bob"]
    swapper = server.submit(token, QUICKSTART, *trial_running(server, script, "swapper"))
    assert swapper.status_code == 201, swapper.text
    server.wait_final(token, ["swapper"])
    for victim in ("victim", "victim2"):
        submitted = server.submit(token, SIMULATED,
                                  *simulated_options(victim, trials=1, tracking=False))
        assert submitted.status_code == 201, submitted.text
    done = server.wait_final(token, ["victim", "victim2"])
    assert (private / "target").read_text() == "original\n"
    assert not planted.exists() and not planted.is_symlink()
    assert all(c["state"] == "finished" for c in done.values()), (done, server.logs())


def test_a_trial_cannot_open_the_state_directory_across_a_restart(server):
    """The trial replaces the trials' working folder by a link to the state directory; once
    the service has started again, the state directory is still closed to the run-as user."""
    state = server.state_dir
    script = (f"cd {server.runs_dir}; mv .service-workdir old-workdir; "
              f"ln -s {state} .service-workdir; ln -s {state} {state / 'workdir'}; true")
    token = server.tokens["bob"]
    relinker = server.submit(token, QUICKSTART, *trial_running(server, script, "relinker"))
    assert relinker.status_code == 201, relinker.text
    server.wait_final(token, ["relinker"])
    server.stop()
    server.start()
    mode = stat.S_IMODE(state.stat().st_mode)
    assert state.stat().st_uid == 0 and not mode & 0o066, oct(mode)
    assert run_as_other_user("ls", str(state)).returncode != 0
    assert run_as_other_user("cat", str(state / "server.db")).returncode != 0
    assert server.campaign(token, "relinker")["final"]


def test_a_module_a_trial_plants_is_imported_by_no_controller(server, base):
    """`python -m` imports from the folder it starts in: a module one campaign's trial leaves
    in the runs directory (theirs to write) never runs in another campaign's controller."""
    planted, ran = server.runs_dir / "yaml.py", server.runs_dir / "planted-module-ran"
    source = base / "planted-yaml.py"
    source.write_text(f"open({str(ran)!r}, 'w').close()\n")
    source.chmod(0o644)
    script = f"cp {source} {planted}; true"
    token = server.tokens["bob"]
    try:
        planter = server.submit(token, QUICKSTART, *trial_running(server, script, "planter"))
        assert planter.status_code == 201, planter.text
        server.wait_final(token, ["planter"])
        assert planted.exists(), server.logs()
        victim = server.submit(token, SIMULATED, *simulated_options("after-plant", trials=1,
                                                           tracking=False))
        assert victim.status_code == 201, victim.text
        done = server.wait_final(token, ["after-plant"])["after-plant"]
        assert not ran.exists()
        assert done["state"] == "finished", (done, server.logs())
    finally:
        planted.unlink(missing_ok=True)
        ran.unlink(missing_ok=True)


def test_folders_the_run_as_user_could_swap_are_refused(tmp_path):
    """In-process: a state directory in a folder of the run-as user's is refused before
    anything is changed, and a spec file is never written through a link."""
    from orchestrator.common.errors import UserError
    from orchestrator.server.isolation import RunAs, isolate, write_service_file

    if os.geteuid() != 0:
        pytest.skip("giving a folder to the run-as user needs root")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, pwd.getpwnam(USER).pw_uid, -1)
    (tmp_path / "runs").mkdir()
    with pytest.raises(UserError, match=f"belongs to {USER}"):
        isolate(RunAs.of(USER), theirs / "state", tmp_path / "runs", [])
    assert (tmp_path / "runs").stat().st_uid == 0
    (tmp_path / "target").write_text("original\n")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "target")
    with pytest.raises(OSError):
        write_service_file(tmp_path / "link.yaml", "name: x\n")
    assert (tmp_path / "target").read_text() == "original\n"


def test_the_other_holes_stay_shut_under_run_as(server, base):
    """The review's other holes, against this server: a quota bounds a running campaign (its
    trials reserve their GPU-hours before they start), an ungranted user names no variable that
    loads code, a variable bash acts on is refused, a body past the limit is refused before it
    is read or authenticated, a revoked token stops at once, and a line a granted trial appends
    to another user's journal breaks no listing."""
    admin = server.token("root", admin=True)
    alice, bob = server.tokens["alice"], server.tokens["bob"]

    assert server.cli("server", "quota", "set", "--user", "quin", "--gpu-hours", "0.0002",
                      "--state-dir", str(server.state_dir),
                      "--database", server.database_url).returncode == 0
    quin = server.token("quin")
    bounded = server.submit(quin, QUICKSTART, *one_real_trial("within-quota"),
                            "budget.max_trials=4", "budget.max_concurrent=2",
                            "budget.gpu_hours=0.0002")
    assert bounded.status_code == 201, bounded.text
    ended = server.wait_final(quin, ["within-quota"])["within-quota"]
    assert ended["gpu_hours"] <= 0.0002 and not ended["counts"].get("ok"), ended

    for name in ("NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "FI_PROVIDER_PATH"):
        refused = server.submit(alice, SIMULATED, *simulated_options("plugin"),
                                f"trial.env.{name}=/tmp/libevil.so")
        assert refused.status_code == 403 and name in refused.json()["detail"], refused.text
    shell = server.submit(bob, SIMULATED, *simulated_options("shell"),
                          "trial.env.BASH_ENV=$(touch M)")
    assert shell.status_code == 422 and "trial.env.BASH_ENV" in shell.json()["detail"]

    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /api/campaigns HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n" % (256 << 20))
        sock.settimeout(30)
        assert sock.recv(64).startswith(b"HTTP/1.1 413")

    doomed = server.token("doomed")
    assert server.api("GET", "/api/campaigns", doomed).status_code == 200
    assert server.cli("server", "token", "revoke", "--user", "doomed", "--state-dir",
                      str(server.state_dir), "--database", server.database_url).returncode == 0
    assert server.api("GET", "/api/campaigns", doomed).status_code == 401

    victim = server.submit(alice, SIMULATED, *simulated_options("alices", trials=1, tracking=False))
    assert victim.status_code == 201, victim.text
    server.wait_final(alice, ["alices"])
    line = base / "hostile-line"
    line.write_text('{"event":"campaign_end","stop_reason":"x","time":' + "9" * 400 + "}\n")
    line.chmod(0o644)
    journal = server.runs_dir / "alices" / "journal.jsonl"
    appender = server.submit(bob, QUICKSTART,
                             *trial_running(server, f"cat {line} >> {journal}", "appender"))
    assert appender.status_code == 201, appender.text
    server.wait_final(bob, ["appender"])
    assert journal.read_text().endswith("9" * 400 + "}\n")
    listing = server.api("GET", "/api/campaigns", admin)
    assert listing.status_code == 200, listing.text
    assert "alices" in [c["name"] for c in listing.json()["campaigns"]]
