"""`paratune server` says at start where its web page is and how to sign in to it, with the
`#token=` the page reads, and prints no token of its own (it keeps tokens hashed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.cli import service as service_cli
from orchestrator.server import run as server_run

PAGE = (Path(__file__).resolve().parents[2] / "orchestrator" / "server" / "web" / "index.html")


@pytest.mark.parametrize("host, url", [
    ("127.0.0.1", "http://127.0.0.1:8470/"),
    ("0.0.0.0", "http://127.0.0.1:8470/"),
    ("gateway.example.org", "http://gateway.example.org:8470/"),
    ("::", "http://[::1]:8470/"),
    ("fd00::5", "http://[fd00::5]:8470/"),
])
def test_the_page_url_is_one_a_browser_on_this_machine_opens(host, url):
    assert service_cli.page_url(host, 8470) == url


def test_the_signin_line_names_the_url_with_a_token_fragment_and_how_to_get_a_token():
    line = service_cli.signin_line("http://127.0.0.1:8470/")
    assert "http://127.0.0.1:8470/#token=TOKEN" in line
    assert "paratune server token create --user NAME" in line and "\n" not in line


def test_the_page_reads_the_token_fragment_the_line_tells_of():
    assert 'location.hash.slice(1)).get("token")' in PAGE.read_text()


def test_server_start_prints_the_page_and_the_signin_line(monkeypatch, capsys, tmp_path):
    served = []
    monkeypatch.setattr(server_run, "listen", lambda host, port: SimpleNamespace(close=None))
    monkeypatch.setattr(server_run, "make_service", lambda *args: "service")
    monkeypatch.setattr(server_run, "serve", lambda service, sock: served.append(service))
    config = SimpleNamespace(state_dir=tmp_path / "state", runs_dir=tmp_path / "runs")
    service_cli._serve(config, "0.0.0.0", 9001, None, SimpleNamespace(held=lambda: True))
    err = capsys.readouterr().err
    assert served == ["service"]
    assert "ParaTune service on http://127.0.0.1:9001/ " in err
    assert "sign in: open http://127.0.0.1:9001/#token=TOKEN" in err
