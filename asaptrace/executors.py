"""Executors: how the ingest driver maps its per-file task over the files, and the replay its
independent simulations (a leaf beside the store: ingest and replay both use it).

The driver hands an executor one picklable function (``ingest_file``) and its tasks and gets the
results back as they finish, in any order; everything else (rank checks, accounting, the atomic
commit) stays in the driver, so every executor produces the same store. Each task writes its own
Parquet parts under the store's temporary directory, so only small summaries travel back.

Four built-ins register in :data:`EXECUTORS` the way a user extension would:

- ``serial`` — in this process, one file after the other (no start-up cost);
- ``thread`` — threads of this process, several files at once (the default for a folder): the
  heavy parts of a file's task release the GIL (the C scan, sha256, Parquet encoding and writes,
  numpy and Arrow kernels), so on two cores two files read in parallel with no process start-up.
  The threads running at once are bounded by ``jobs`` and by memory: each item may say what it
  needs (``memory_bytes``) and the running items' sum stays under the budget (half the memory
  available when the run starts; one item always runs, however large);
- ``process`` — a pool of *spawned* worker processes on this machine;
- ``ray`` — Ray tasks, on a local Ray instance or an existing cluster (``address``), for traces
  that outgrow one machine. Ray is an optional dependency: ``pip install 'asaptrace[ray]'``.

The replay's independent simulations (the sweep's (policy, rate) points, ``replay --vary`` and
``--split auto``) run on the same executors through :func:`resolve_executor`, whose ``local``
means this machine: this process for one job, a spawned pool otherwise. A run that maps many
batches opens the executor once (``with session(executor):``): the pool or the Ray instance then
lives across its ``map`` calls instead of being started for each.

The first error a task raises stops the run: the tasks not yet started are cancelled and the
error is raised as the project's own exception (Ray's ``RayTaskError`` wrapper is removed), so a
user sees the same one-line message whichever executor ran the task.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    FIRST_EXCEPTION,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any, Protocol, Self, TypeVar

from asaptrace.errors import IngestError, UsageError
from asaptrace.registry import Registry

T = TypeVar("T")
R = TypeVar("R")

#: Below this many CPUs a process pool never beats one process (see :func:`default_jobs`).
MIN_CPUS_FOR_POOL = 4
#: A spawned worker's ≈ 0.4 s start-up is the time to parse ≈ 80 MB; give each at least this much.
MIN_BYTES_PER_WORKER = 256 * 1024**2


class Executor(Protocol):
    """Runs ``fn`` over ``items``, yielding each result as it finishes (any order).

    An executor whose tasks run in the calling process says so with ``in_process = True``; the
    driver then lets tasks hand their tables back instead of writing them (none is pickled).

    One that is also a context manager holds its workers (pool, Ray instance) open across the
    ``map`` calls made inside ``with`` (see :func:`session`).
    """

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]: ...


#: An executor factory: keyword options ``jobs`` (workers; None = the executor's default) and
#: ``address`` (a cluster to connect to, for executors that have one).
ExecutorFactory = Callable[..., Executor]

EXECUTORS: Registry[ExecutorFactory] = Registry("executor")


def register_executor(name: str, factory: ExecutorFactory) -> ExecutorFactory:
    """Add an executor under ``name`` (a taken name raises :class:`~asaptrace.errors.RegistryError`)."""
    return EXECUTORS.register(name, factory)


def make_executor(name: str, *, jobs: int | None = None, address: str | None = None) -> Executor:
    """The executor registered as ``name``, configured with ``jobs`` workers and a cluster ``address``."""
    factory = EXECUTORS.get(name)
    if address is not None and name != "ray":
        raise UsageError(f"a cluster address is only used by the ray executor, not {name!r}")
    return factory(jobs=jobs, address=address)


def default_jobs(n_files: int, cpus: int | None = None, total_bytes: int | None = None) -> int:
    """Worker processes to use when the user did not say: never slower than one process.

    Each file task already keeps two cores busy (the C scanner parses while a second thread
    hashes the file), and every spawned worker pays ≈ 0.4 s to import polars/pyarrow/asaptrace.
    So: one process below :data:`MIN_CPUS_FOR_POOL` CPUs (measured on 2 cores: 8 files took
    longer with 2 workers than with 1; numbers in docs/executors.md); above it one worker per two
    CPUs, at most one per file and (when ``total_bytes`` is known) one per
    :data:`MIN_BYTES_PER_WORKER` of input, so small runs stay in one process.
    """
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    if n_files <= 1 or cpus < MIN_CPUS_FOR_POOL:
        return 1
    jobs = min(n_files, cpus // 2)
    if total_bytes is not None:
        jobs = min(jobs, total_bytes // MIN_BYTES_PER_WORKER)
    return max(1, jobs)


def resolve_executor(name: str, *, jobs: int = 0, address: str | None = None) -> Executor:
    """The executor of a run of independent simulations: ``local`` is this process for ``jobs=1``
    and a pool of ``jobs`` spawned processes otherwise (0: one per CPU); any other name is a
    registered executor (``ray``: ``jobs`` CPUs of a local instance, 0 all; ignored on a cluster)."""
    if jobs < 0:
        raise UsageError(f"jobs must be 0 (one per CPU) or more, not {jobs}")
    if name == "local":
        if address is not None:
            raise UsageError("a cluster address is only used by the ray executor, not 'local'")
        n = jobs or os.cpu_count() or 1
        return make_executor("serial" if n == 1 else "process", jobs=n)
    if name not in EXECUTORS:
        raise UsageError(
            f"unknown executor {name!r} (known: {', '.join(sorted(['local', *EXECUTORS.names()]))})"
        )
    return make_executor(name, jobs=jobs or None, address=address)


def map_ordered(executor: Executor, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``fn`` over ``items`` on ``executor``, the results in the items' order (an executor yields
    them as they finish), so a run's output does not depend on which worker was faster."""
    out: list[Any] = [None] * len(items)
    for i, result in executor.map(partial(_indexed, fn), list(enumerate(items))):
        out[i] = result
    return out


def _indexed(fn: Callable[[T], R], pair: tuple[int, T]) -> tuple[int, R]:
    return pair[0], fn(pair[1])


def ahead_in_order(
    fn: Callable[[T], R], items: Iterable[T], *, workers: int, name: str = "asaptrace-ahead"
) -> Iterator[R]:
    """``fn(item)`` for each of ``items``, in their order, computed on ``workers`` threads at most
    ``workers`` items ahead of the consumer (``items`` is taken as the results are: an iterator
    is read lazily), so the work overlaps the consumer's while memory stays a few items. The
    first error is raised in order; nothing is started after it. For work that lets go of the
    GIL (the C scanner, polars, Arrow)."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name) as pool:
        pending: deque[Future[R]] = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                del item  # the future holds it while it is needed, not this frame
                if len(pending) > workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def session(executor: Executor) -> AbstractContextManager[Any]:
    """``with session(executor):`` keeps its pool or Ray instance for every ``map`` inside; an
    executor without one (serial, a user's plain ``map`` object) needs nothing held."""
    return executor if isinstance(executor, AbstractContextManager) else nullcontext(executor)


class SerialExecutor:
    """One file after the other in this process."""

    in_process = True  # results need not be pickled: the driver may have tasks hand back tables

    def __init__(self, *, jobs: int | None = None, address: str | None = None) -> None:
        del jobs, address  # nothing to configure

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        for item in items:
            yield fn(item)


def available_memory() -> int | None:
    """Bytes of memory available to new work (``MemAvailable``), None where the OS does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def default_threads(n_items: int, cpus: int | None = None) -> int:
    """Threads to read files on when the user did not say: one per CPU, at most one per file."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, min(n_items, cpus))


class ThreadExecutor:
    """Several files at once on threads of this process, bounded by ``jobs`` and by memory.

    Items are started in their order (so the first file's scan starts first); an item starts when
    a thread is free and its ``memory_bytes`` (0 when it does not say) fits beside the running
    ones' under ``memory`` (default: half of :func:`available_memory`); the first error stops the
    run (items not started are never started, running ones are let finish, the error is raised).
    """

    in_process = True

    def __init__(
        self, *, jobs: int | None = None, address: str | None = None, memory: int | None = None
    ) -> None:
        del address
        self.jobs = jobs
        self.memory = memory

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        jobs = max(
            1, min(self.jobs if self.jobs is not None else default_threads(len(items)), len(items) or 1)
        )
        budget = self.memory if self.memory is not None else (available_memory() or 2**62) // 2
        todo = list(items)
        running: dict[Future[R], int] = {}
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="asaptrace-read") as pool:
            try:
                while todo or running:
                    in_use = sum(running.values())
                    while todo and len(running) < jobs:
                        need = int(getattr(todo[0], "memory_bytes", 0) or 0)
                        if running and in_use + need > budget:
                            break
                        running[pool.submit(fn, todo[0])] = need
                        in_use += need
                        todo.pop(0)
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for fut in sorted(finished, key=list(running).index):
                        del running[fut]
                        yield fut.result()  # an error raises here
            finally:
                todo.clear()  # on an error or an early stop: start nothing more
                for fut in running:
                    fut.cancel()


class ProcessExecutor:
    """A pool of spawned worker processes (fork is unsafe with polars/arrow thread pools).

    Workers are spawned, so a script that uses this executor must call the driver under
    ``if __name__ == "__main__":`` (the usual multiprocessing rule).
    """

    def __init__(self, *, jobs: int | None = None, address: str | None = None) -> None:
        del address
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None  # held open between __enter__ and __exit__

    def __enter__(self) -> Self:
        if self._pool is None:
            self._pool = self._make_pool(self.jobs if self.jobs is not None else (os.cpu_count() or 1))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    @staticmethod
    def _make_pool(jobs: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=multiprocessing.get_context("spawn"))

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        if self._pool is not None:
            yield from self._map(self._pool, fn, items)
            return
        jobs = self.jobs if self.jobs is not None else default_jobs(len(items))
        with self._make_pool(min(jobs, len(items))) as pool:
            yield from self._map(pool, fn, items)

    @staticmethod
    def _map(pool: ProcessPoolExecutor, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        pending: set[Future[R]] = {pool.submit(fn, item) for item in items}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for fut in finished:
                err = fut.exception()
                if err is not None:
                    for p in pending:
                        p.cancel()
                    raise err
                yield fut.result()


class TaskPool:
    """Independent tasks, each handed back as a :class:`~concurrent.futures.Future`: on a pool of
    ``jobs`` spawned processes of this machine (0: one per CPU, at most ``at_most``), or, for ``jobs`` 1, in this
    process, each task run as it is submitted (no start-up, and the same results in the same
    order: a task is a pure function of its arguments, so where it ran never shows).

    For work whose tasks wait on others' answers (``advise --online``: the cost bands search near
    the first seed's rate while the other seeds are still searched), where :meth:`Executor.map`'s
    one batch would leave a core idle. :meth:`warm` starts the workers and their imports at once,
    so they overlap the caller's own work instead of delaying the first task."""

    def __init__(self, jobs: int = 1, *, at_most: int | None = None) -> None:
        if jobs < 0:
            raise UsageError(f"jobs must be 0 (one per CPU) or more, not {jobs}")
        self.jobs = jobs or min(os.cpu_count() or 1, at_most or (1 << 30))
        self._pool: ProcessPoolExecutor | None = None

    @property
    def inline(self) -> bool:
        """Whether tasks run in this process (they may then take callables that do not pickle)."""
        return self.jobs == 1

    def __enter__(self) -> Self:
        if not self.inline and self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_quick_exit,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def warm(self, *modules: str) -> None:
        """Start every worker now, each importing ``modules`` (nothing in this process)."""
        if self._pool is not None:
            for _ in range(self.jobs):
                self._pool.submit(_import, modules)

    def submit(self, fn: Callable[..., R], /, *args: Any) -> Future[R]:
        if self._pool is not None:
            return self._pool.submit(fn, *args)
        done: Future[R] = Future()
        try:
            done.set_result(fn(*args))
        except Exception as e:  # raised again by result(), as a worker's would be
            done.set_exception(e)
        return done


def _quick_exit() -> None:
    """A pool worker leaves at its interpreter's exit without tearing its modules down (≈ 0.2 s of
    numpy's and polars' finalisers the caller would wait for): it holds no file, buffer or child
    of its own, and its last message went out before (the pool's result queue is a direct pipe)."""
    atexit.register(os._exit, 0)


def _import(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(name)


RAY_INSTALL_HINT = "pip install 'asaptrace[ray]'"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(f"the ray executor needs Ray, which is not installed: {RAY_INSTALL_HINT}") from None
    return ray


class RayExecutor:
    """Each file is one Ray task (one CPU), on a local Ray instance or an existing cluster.

    Without ``address`` a local instance is started for the run (``jobs`` CPUs, default all of
    this machine's; no dashboard, Ray's own logging at error level) and shut down after it.
    With ``address`` (``auto``, ``host:6379``, or ``ray://host:10001`` for Ray Client) the tasks
    run on that cluster; the trace files and the output store must then be on a filesystem every
    worker sees at the same path. If Ray is already initialised in this process, it is used as is.
    """

    def __init__(self, *, jobs: int | None = None, address: str | None = None) -> None:
        self.jobs = jobs
        self.address = address
        self._session = False  # this executor started the Ray instance its session holds

    def __enter__(self) -> Self:
        ray = _import_ray()
        if not ray.is_initialized():
            self._init(ray)
            self._session = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._session:
            _import_ray().shutdown()
            self._session = False

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        ray = _import_ray()
        started = not ray.is_initialized()
        if started:
            self._init(ray)
        pending: dict[Any, T] = {}
        try:
            remote = ray.remote(num_cpus=1, max_retries=0)(_call)
            # into the object store once, not once per task (a partial may hold a whole workload)
            shared = ray.put(fn)
            pending = {remote.remote(shared, item): item for item in items}
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                item = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as err:
                    raise _unwrap(err) from None  # the task's own (one-line) error
                except ray.exceptions.RayError as err:  # the worker died (memory, node lost)
                    path = _path(item)
                    doing = "reading it" if path is not None else "running a task"
                    raise IngestError(
                        f"the Ray worker {doing} failed: {_first_line(err)}", path=path
                    ) from None
                yield result
        finally:
            for ref in pending:  # on an error, or when the caller stops early
                ray.cancel(ref)
            if started:
                ray.shutdown()

    def _init(self, ray: Any) -> None:
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        try:
            if self.address is None:
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no telemetry from a local run
                ray.init(num_cpus=self.jobs, include_dashboard=False, **quiet)
            else:
                ray.init(address=self.address, **quiet)
        except (ConnectionError, ValueError, RuntimeError) as err:
            where = self.address or "a local instance"
            raise UsageError(f"cannot start Ray on {where}: {_first_line(err)}") from None


def _call(fn: Callable[[T], R], item: T) -> R:
    """The Ray task: ``fn(item)`` (Ray remotes only plain functions, so ``fn`` travels as an argument)."""
    return fn(item)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _path(item: object) -> str | None:
    path = getattr(item, "path", None)
    return None if path is None else str(path)


def _unwrap(err: BaseException) -> BaseException:
    """The exception the task itself raised (Ray wraps it in ``RayTaskError``)."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else err


register_executor("serial", SerialExecutor)
register_executor("thread", ThreadExecutor)
register_executor("process", ProcessExecutor)
register_executor("ray", RayExecutor)
