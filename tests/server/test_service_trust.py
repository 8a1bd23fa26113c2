"""The service's trust boundary: without a code grant a user names presets and the built-in
trainer only (no program, file, tracking store or working folder of their own); campaigns are
seen by their owner, their project's members and admins, and only the owner and admins see
`trial.env` values; GPU-hour quotas hold under concurrent submissions."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from conftest import POSTGRES_ELSE_SQLITE, on_database
from test_service import QUICKSTART, SIMULATED, one_real_trial, simulated_options

SUBMITS = 50


@on_database(POSTGRES_ELSE_SQLITE)
def test_running_or_reading_ones_own_code_takes_a_grant(service, tmp_path):
    server = service().start()
    bob = server.token("bob")
    asks = {
        "trial.command": ["trial.command=[python3, -c, 'import os']"],
        "tracking.uri": [f"tracking.uri=sqlite:///{server.state_dir / 'server.db'}"],
        "model: a file": ["model=/etc/hostname.yaml"],
        "cluster: a file": [f"cluster={tmp_path / 'missing.yaml'}"],
        "trial.env.LD_PRELOAD": ["trial.env.LD_PRELOAD=/tmp/evil.so"],
        # Named beside NCCL's and libfabric's tuning variables, these load code or write files.
        **{f"trial.env.{name}": [f"trial.env.{name}=/home/alice/libevil.so"]
           for name in ("NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "FI_PROVIDER_PATH",
                        "NCCL_DEBUG_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")},
        "trial.workdir": ["trial.workdir=/tmp"],
        "trial.deepspeed": ["trial.trainer=deepspeed", "trial.deepspeed.script=/tmp/x.py"],
        "trial.trainer": ["trial.trainer=torchtitan"],
    }
    for key, overrides in asks.items():
        refused = server.submit(bob, SIMULATED, *simulated_options("b"), *overrides)
        assert refused.status_code == 403, (key, refused.text)
        detail = refused.json()["detail"]
        assert detail.startswith(key) and "code grant" in detail, (key, detail)
    # A tuning variable needs no grant; a file named is refused before it is read, so the
    # answer does not tell whether it exists.
    assert server.submit(bob, SIMULATED, *simulated_options("tuned", trials=1),
                         "trial.env.NCCL_DEBUG=INFO").status_code == 201
    missing = server.submit(bob, SIMULATED, *simulated_options("m"), "model=/no/such.yaml").json()
    present = server.submit(bob, SIMULATED, *simulated_options("m"),
                            "model=/etc/hostname.yaml").json()
    assert missing["detail"].split(":")[1:] == present["detail"].split(":")[1:]
    assert server.cli("server", "grant", "--user", "bob",
                      *server.admin_options()).returncode == 0
    granted = server.submit(bob, SIMULATED, *simulated_options("own", trials=1),
                            "tracking.uri=sqlite:///" + str(tmp_path / "bobs-mlflow.db"))
    assert granted.status_code == 201, granted.text


@on_database(POSTGRES_ELSE_SQLITE)
def test_campaigns_are_seen_by_owner_project_members_and_admins(service):
    server = service().start()
    alice, bob, carol = server.token("alice"), server.token("bob"), server.token("carol")
    admin = server.token("root", admin=True)
    for user in ("alice", "carol"):
        assert server.cli("server", "member", "--project", "llm", "--user", user,
                          *server.admin_options()).returncode == 0
    submitted = server.submit(alice, SIMULATED,
                              *simulated_options("secret", trials=2, tracking=False),
                              "trial.env.NCCL_SOCKET_IFNAME=ib-secret-0", project="llm")
    assert submitted.status_code == 201, submitted.text
    assert server.submit(bob, SIMULATED, *simulated_options("b"), project="llm").status_code == 403
    server.wait_final(alice, ["secret"])
    for path in ("", "/logs", "/best?format=sbatch", "/report"):
        assert server.api("GET", f"/api/campaigns/secret{path}", bob).status_code == 404, path
    assert server.api("POST", "/api/campaigns/secret/cancel", bob).status_code == 404
    assert [c["name"] for c in server.api("GET", "/api/campaigns", bob).json()["campaigns"]] == []
    for reader, shown in ((carol, False), (admin, True), (alice, True)):
        export = server.api("GET", "/api/campaigns/secret/best?format=sbatch", reader)
        assert export.status_code == 200, export.text
        assert ("ib-secret-0" in export.text) is shown
        assert ("<redacted>" in export.text) is not shown
        report = server.api("GET", "/api/campaigns/secret/report", reader).text
        assert ("ib-secret-0" in report) is shown and "secret" in report
    assert server.api("POST", "/api/campaigns/secret/cancel", carol).status_code == 403
    warm = server.submit(bob, SIMULATED, *simulated_options("w"), "search.warm_start=secret")
    assert warm.status_code == 403 and "search.warm_start" in warm.json()["detail"]


def test_concurrent_submissions_are_admitted_exactly_to_the_quota(service):
    server = service().start()
    token = server.token("dana")
    assert server.cli("server", "quota", "set", "--user", "dana", "--gpu-hours", "1",
                      *server.admin_options()).returncode == 0

    def submit(i: int) -> int:  # real trials: a simulated rehearsal counts against no quota
        return server.submit(token, QUICKSTART, *one_real_trial(f"q{i}"),
                             "budget.gpu_hours=0.5").status_code

    with ThreadPoolExecutor(SUBMITS) as pool:
        codes = list(pool.map(submit, range(SUBMITS)))
    assert codes.count(201) == 2 and codes.count(403) == SUBMITS - 2, codes
    listed = server.api("GET", "/api/campaigns", token).json()["campaigns"]
    assert len(listed) == 2
    for campaign in listed:
        server.api("POST", f"/api/campaigns/{campaign['name']}/cancel", token)
