"""The dashboard under many threads (waitress runs callbacks on a pool): caches compute each key once,
callback replies of the pages over stores are kept and served again, job pages' replies never, and
a run asked for while it runs is followed rather than started again."""

from __future__ import annotations

import json
import threading
import time

import pytest

from asaptrace import pipeline
from asaptrace_dashboards import create_app
from asaptrace_dashboards._memo import Memo
from asaptrace_dashboards.jobs import Jobs
from asaptrace_dashboards.pages import _jobs_ui, overview, replay
from asaptrace_dashboards.replies import output_ids
from asaptrace_dashboards.state import Stores


def _together(n: int, fn) -> list:
    """``fn()`` on ``n`` threads released at once; their results."""
    gate, out = threading.Barrier(n), [None] * n

    def run(i: int) -> None:
        gate.wait()
        out[i] = fn()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


# -------------------------------------------------------------------------------------------- Memo
def test_memo_computes_a_key_once_while_many_ask():
    memo: Memo[object] = Memo()
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)  # long enough that all eight askers arrive while it runs
        return object()

    got = _together(8, lambda: memo.get("k", slow))
    assert len(calls) == 1 and memo.computed == 1
    assert all(g is got[0] for g in got)  # every asker gets the one value


def test_memo_evicts_least_recently_used_by_count_and_by_bytes():
    memo: Memo[str] = Memo(max_items=2)
    for k in "abc":
        memo.get(k, lambda k=k: k)
    memo.get("b", lambda: "recomputed")  # b is kept (a was the oldest) and is now the newest
    memo.get("d", lambda: "d")  # c goes
    assert memo.get("b", lambda: "x") == "b" and memo.get("c", lambda: "C") == "C"
    assert memo.computed == 5  # a, b, c, d, then c again
    sized: Memo[bytes] = Memo(max_bytes=10, size=len)
    sized.get(1, lambda: b"123456")
    sized.get(2, lambda: b"12345")  # 6 + 5 > 10: 1 goes
    sized.get(3, lambda: b"x" * 11)  # bigger than the whole cache: returned, not kept
    assert len(sized) == 1 and sized.get(2, lambda: b"") == b"12345"
    sized.clear()
    assert len(sized) == 0 and sized.get(2, lambda: b"again") == b"again"


def test_memo_does_not_keep_a_failure_or_an_unkept_value():
    memo: Memo[int] = Memo(keep=lambda v: v > 0)

    def boom() -> int:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        memo.get("k", boom)
    assert memo.get("k", lambda: 3) == 3  # the next asker computes
    assert memo.get("z", lambda: 0) == 0 and memo.get("z", lambda: 5) == 5  # 0 was not kept


# --------------------------------------------------------------------------------- store caches
def test_many_tabs_asking_for_one_window_compute_it_once(coupled_store, monkeypatch):
    stores = Stores([coupled_store.path])
    loaded = stores.get("0")
    calls = []
    real = pipeline.timeline_of

    def counted(*args, **kwargs):
        calls.append(kwargs)
        time.sleep(0.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "timeline_of", counted)
    frames = _together(8, lambda: loaded.timeline(0, (3, 5), None))
    assert len(calls) == 1 and frames[0].height > 0
    assert all(f is frames[0] for f in frames)


# ------------------------------------------------------------------------------------------ replies
def _post(client, output: str, inputs: list[dict], state: list | None = None):
    parts = output.strip(".").split("...")
    outs = [{"id": p.rsplit(".", 1)[0], "property": p.rsplit(".", 1)[1]} for p in parts]
    body = {
        "output": output,
        "outputs": outs if output.startswith("..") else outs[0],
        "inputs": inputs,
        "state": state or [],
        "changedPropIds": [],
    }
    return client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")


def test_a_page_reply_is_kept_and_a_job_reply_is_not(coupled_store, monkeypatch):
    calls = {"overview": 0, "poll": 0}
    real_body, real_poll = overview.overview_body, _jobs_ui.poll

    def body(*a):
        calls["overview"] += 1
        return real_body(*a)

    def poll(*a):
        calls["poll"] += 1
        return real_poll(*a)

    monkeypatch.setattr(overview, "overview_body", body)
    monkeypatch.setattr(_jobs_ui, "poll", poll)
    app = create_app([coupled_store.path])
    client = app.server.test_client()
    store0 = [{"id": "store", "property": "value", "value": "0"}]
    first, again = (_post(client, "overview-body.children", store0) for _ in range(2))
    assert first.status_code == again.status_code == 200 and first.data == again.data
    assert coupled_store.path.name in first.get_data(as_text=True)
    assert calls["overview"] == 1  # the second reply came from the kept bytes
    other = _post(client, "overview-body.children", [{"id": "store", "property": "value", "value": "9"}])
    assert other.status_code == 200 and calls["overview"] == 2  # other inputs: computed
    poll_out = "..rp-progress.children...rp-result.children...rp-poll.disabled.."
    job = [
        {"id": "rp-poll", "property": "n_intervals", "value": 1},
        {"id": "replay-job", "property": "data", "value": None},
    ]
    assert all(_post(client, poll_out, job).status_code == 200 for _ in range(2))
    assert calls["poll"] == 2  # a job's progress is asked for afresh each time


def test_output_ids_of_the_callback_forms_dash_sends():
    assert output_ids("overview-body.children") == {"overview-body"}
    assert output_ids("..replay-job.data...rp-cancel-msg.children..") == {"replay-job", "rp-cancel-msg"}
    assert output_ids("rp-cancel-msg.children@39268ab1") == {"rp-cancel-msg"}  # a duplicate output


# --------------------------------------------------------------------------------------------- jobs
def test_a_run_asked_for_while_it_runs_is_followed_not_started_again(coupled_store):
    stores, jobs = Stores([coupled_store.path]), Jobs()
    ids = _together(4, lambda: replay.start_replay(stores, jobs, "0", "balanced", {}, [])[0]["id"])
    assert len(set(ids)) == 1  # four tabs, one worker
    assert sum(j.state == "running" for j in jobs._jobs.values()) == 1
    assert jobs.cancel(ids[0]) and jobs.status(ids[0])["state"] == "cancelled"
