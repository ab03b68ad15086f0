"""``asaptrace dashboard`` as a user starts it: a real process serving on a free port (waitress).

It must not print Flask's development-server warning, must serve the page and answer a callback
as the browser sends it, and a port that cannot be bound is one line, not a traceback.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from asaptrace_dashboards.server import MAX_THREADS, MIN_THREADS, default_threads
from tests._cli import run_cli

#: What Werkzeug prints when Dash's ``app.run`` starts its development server.
DEV_WARNINGS = ("development server", "Do not use it in a production deployment")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read()
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _post_callback(base: str, output: str, inputs: list[dict]) -> dict:
    body = {"output": output, "outputs": _outputs(output), "inputs": inputs, "changedPropIds": []}
    req = urllib.request.Request(
        base + "_dash-update-component",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
        return json.loads(r.read())


def _outputs(output: str) -> dict:
    ident, prop = output.rsplit(".", 1)
    return {"id": ident, "property": prop}


@pytest.fixture
def served(coupled_store):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "asaptrace.cli", "dashboard", str(coupled_store.path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc, f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_dashboard_serves_without_the_development_server_warning(served, coupled_store):
    proc, base = served
    page = _wait_for(base, proc).decode()
    assert "<title>asaptrace</title>" in page
    # the overview callback, as the browser posts it: the store's findings come back
    reply = _post_callback(
        base, "overview-body.children", [{"id": "store", "property": "value", "value": "0"}]
    )
    assert coupled_store.path.name in json.dumps(reply)
    proc.terminate()
    stdout, stderr = proc.communicate(timeout=30)
    assert f"serving 1 store(s) at {base}" in stdout
    for warning in DEV_WARNINGS:
        assert warning not in stdout + stderr
    assert "Traceback" not in stderr


def test_a_port_in_use_is_one_line(coupled_store):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_cli("dashboard", coupled_store.path, "--port", port)
    assert r.code == 2
    assert r.stderr.strip().startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_worker_threads_are_sized_to_the_machine():
    # 4 per core, never fewer than 4 nor more than 32
    assert [default_threads(c) for c in (1, 2, 3, 8, 64)] == [4, 8, 12, 32, 32]
    assert MIN_THREADS <= default_threads() <= MAX_THREADS
