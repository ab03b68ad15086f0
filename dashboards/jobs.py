"""Long work (a replay, a sweep) off the request thread: one child process per job, keyed by a job id.

A callback submits a job and gets its id back (kept in the browser tab's ``dcc.Store``, so two tabs
each follow their own job); an interval callback polls :meth:`Jobs.status`. The child runs a
``asaptrace.pipeline`` call and sends progress messages and its JSON result through a queue; a
watcher thread collects them. **Cancel** terminates the child process, so a cancelled replay stops
using the CPU at once (a thread could only be asked to stop). Children are *spawned* (not
forked): the server's threads and polars' thread pool are never copied into them.

Results are cached by the job's key (store and parameters): asking again for a replay already
run returns a finished job at once, and asking for one that is running follows that job (many
tabs clicking Run on the same replay start one worker, not one each; a Cancel stops it for all).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

#: Jobs kept (finished ones beyond this are forgotten, oldest first).
MAX_JOBS = 64
#: Worker processes at once (more Run clicks than this are refused until one ends or is cancelled).
MAX_RUNNING = 2


class JobsBusy(Exception):
    """Too many jobs are running; ``str()`` is the message the page shows."""


def _child(kind: str, kwargs: dict[str, Any], queue: Any) -> None:
    """Run in the child process: one pipeline call, progress and result through ``queue``."""
    from asaptrace import pipeline
    from asaptrace.errors import AsaptraceError

    def progress(message: str) -> None:
        queue.put(("progress", str(message)))

    try:
        if kind == "replay":
            result = pipeline.replay_store(
                kwargs["store_path"], kwargs["policy"], params=kwargs["params"], progress=progress
            )
            queue.put(("done", result.to_json()))
        elif kind == "sweep":
            progress("sweeping")
            queue.put(("done", pipeline.sweep(**kwargs, progress=progress).to_json()))  # type: ignore[attr-defined]
        else:
            queue.put(("failed", f"unknown job kind {kind!r}"))
    except AsaptraceError as e:
        queue.put(("failed", str(e)))
    except Exception as e:  # a bug: still one line on the page, the type says where to look
        queue.put(("failed", f"{type(e).__name__}: {e}"))


@dataclass
class Job:
    id: str
    kind: str
    key: str
    state: str = "running"  # running | done | failed | cancelled
    messages: list[str] = field(default_factory=list)
    result: Any = None
    error: str | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    process: Any = None

    def view(self) -> dict[str, Any]:
        """What a poll sees (JSON-able)."""
        return {
            "id": self.id,
            "key": self.key,
            "kind": self.kind,
            "state": self.state,
            "messages": list(self.messages),
            "elapsed_s": round((self.ended or time.monotonic()) - self.started, 1),
            "result": self.result,
            "error": self.error,
        }


class Jobs:
    """Every job of one dashboard, by id; finished results cached by key."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._jobs: dict[str, Job] = {}
        self._done: dict[str, Any] = {}
        self._lock = threading.Lock()

    def submit(self, kind: str, key: str, kwargs: dict[str, Any]) -> str:
        """Start a job (or return a finished one for a key already run, or the running one for a key
        being run); returns its id.
        :class:`JobsBusy` when :data:`MAX_RUNNING` jobs are running."""
        job = Job(id=uuid.uuid4().hex, kind=kind, key=key)
        with self._lock:
            self._forget_old()
            if key in self._done:
                self._jobs[job.id] = job
                job.state, job.result, job.ended = "done", self._done[key], job.started
                job.messages.append("cached: this run was done before with the same parameters")
                return job.id
            same = next((j for j in self._jobs.values() if j.state == "running" and j.key == key), None)
            if same is not None:  # the same run asked for again (another tab, a second click): follow it
                return same.id
            running = sum(j.state == "running" for j in self._jobs.values())
            if running >= MAX_RUNNING:
                raise JobsBusy(f"{running} jobs are running already: wait for one to end, or cancel it")
            self._jobs[job.id] = job
        queue = self._ctx.Queue()
        job.process = self._ctx.Process(target=_child, args=(kind, kwargs, queue), daemon=True)
        job.messages.append("starting a worker process")
        job.process.start()
        threading.Thread(target=self._watch, args=(job, queue), daemon=True).start()
        return job.id

    def _watch(self, job: Job, queue: Any) -> None:
        """Collect a child's messages until it ends (or is cancelled)."""
        while True:
            try:
                what, payload = queue.get(timeout=0.2)
            except Exception:  # queue.Empty, or the queue closed under a cancelled child
                if job.state != "running":
                    return
                if not job.process.is_alive():
                    with self._lock:
                        if job.state == "running":
                            job.state, job.ended = "failed", time.monotonic()
                            job.error = (
                                f"the worker process ended without a result (exit {job.process.exitcode})"
                            )
                    return
                continue
            with self._lock:
                if job.state != "running":
                    return
                if what == "progress":
                    job.messages.append(payload)
                    continue
                job.ended = time.monotonic()
                if what == "done":
                    job.state, job.result = "done", payload
                    self._done[job.key] = payload
                else:
                    job.state, job.error = "failed", payload
            job.process.join(timeout=5)
            return

    def status(self, job_id: Any) -> dict[str, Any] | None:
        """The job's state, progress messages, elapsed time and (when done) its result; None if unknown."""
        with self._lock:
            job = self._jobs.get(job_id) if isinstance(job_id, str) else None
            return None if job is None else job.view()

    def cancel(self, job_id: Any) -> bool:
        """Stop a running job (its process is terminated). False when it is not running."""
        with self._lock:
            job = self._jobs.get(job_id) if isinstance(job_id, str) else None
            if job is None or job.state != "running":
                return False
            job.state, job.ended = "cancelled", time.monotonic()
            job.messages.append("cancelled")
        job.process.terminate()
        job.process.join(timeout=5)
        return True

    def _forget_old(self) -> None:
        finished = [j for j in self._jobs.values() if j.state != "running"]
        for j in sorted(finished, key=lambda j: j.started)[: max(0, len(self._jobs) - MAX_JOBS + 1)]:
            del self._jobs[j.id]
