"""Write a :class:`Timeline` as Ascend torch_npu profiler output: one ``…_ascend_pt`` folder per rank.

Each rank gets ``dp{d}_pp0_tp{t}_ep{e}_rank{r}_ascend_pt/`` (expert devices of a disaggregated run:
``ep{e}_rank{r}_ascend_pt/``; the folder name carries the rank, as vLLM-Ascend's do) holding
``ASCEND_PROFILER_OUTPUT/trace_view.json.gz``, whose JSON mirrors the real torch_npu timeline
(``../shared/data/traces/ascend-sample/trace_view.json``): a top-level **list**; ``ts`` as decimal
**strings** in µs, ``dur`` as numbers; processes ``Python`` (``cpu_op`` framework ops and the
``user_annotation`` step/layer spans), ``CANN`` (``AscendCL@aclnn…`` launches), ``Ascend Hardware``
(device tasks, tid = stream, with ``Task Type``/``Stream Id``/``Task Id`` args), ``Communication``
(the per-step HCCL ``hcom_allGather_…`` op and its ``Notify_Wait``/``Memcpy`` tasks) and
``Overlap Analysis`` (Computing / Communication / Communication(Not Overlapped) / Free), with the
same ``M`` name/label/sort-index records; ``torch_to_npu`` flow arrows link each framework op to its
device task.

Differences from a real timeline, on purpose: DeepEP's separate notify/layout kernels become one
fused ``MoeDistributeDispatchV2`` task (as CANN fuses them), the file is gzipped (the ingester
reads ``trace_view.json.gz``), and the CANN launches carry no ``HostToDevice`` arrows — so the launch
link of a device task is the framework op on the Python thread, which is what lies inside the
step/layer annotations.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from asaptrace.synth.kineto_writer import write_gzip
from asaptrace.synth.timeline import OP_CODE, OPS, Timeline, written_args

#: op → (device task name, framework op on the Python thread, aclnn API seen by CANN, Task Type)
ASCEND_NAMES: dict[str, tuple[str, str, str, str]] = {
    "attention": (
        "FusedInferAttentionScore",
        "npu::npu_fused_infer_attention_score",
        "aclnnFusedInferAttentionScoreV3",
        "MIX_AIC",
    ),
    "gate": (
        "MoeGatingTopKSoftmax",
        "npu::npu_moe_gating_top_k_softmax",
        "aclnnMoeGatingTopKSoftmax",
        "AI_VECTOR_CORE",
    ),
    "shared_expert": ("MatMulV2", "aten::mm", "aclnnMm", "AI_CORE"),
    "dense_mlp": ("MatMulV2", "aten::mm", "aclnnMm", "AI_CORE"),
    "moe": ("GroupedMatmul", "npu::npu_grouped_matmul", "aclnnGroupedMatmulV4", "AI_CORE"),
    "dispatch": (
        "MoeDistributeDispatchV2",
        "npu::npu_moe_distribute_dispatch_v2",
        "aclnnMoeDistributeDispatchV2",
        "MIX_AIV",
    ),
    "combine": (
        "MoeDistributeCombineV2",
        "npu::npu_moe_distribute_combine_v2",
        "aclnnMoeDistributeCombineV2",
        "MIX_AIV",
    ),
    "dispatch_send": (
        "MoeDistributeDispatchSend",
        "asap::dispatch_send",
        "aclnnMoeDistributeDispatchSend",
        "MIX_AIV",
    ),
    "dispatch_recv": (
        "MoeDistributeDispatchRecv",
        "asap::dispatch_recv",
        "aclnnMoeDistributeDispatchRecv",
        "MIX_AIV",
    ),
    "combine_send": (
        "MoeDistributeCombineSend",
        "asap::combine_send",
        "aclnnMoeDistributeCombineSend",
        "MIX_AIV",
    ),
    "combine_recv": (
        "MoeDistributeCombineRecv",
        "asap::combine_recv",
        "aclnnMoeDistributeCombineRecv",
        "MIX_AIV",
    ),
}
#: ops not written as device tasks of their own (folded into the fused dispatch, or HCCL)
_FOLDED = {"layout", "notify"}
_COMPUTE_OPS = {"attention", "gate", "shared_expert", "dense_mlp", "moe"}
HOST_PID_BASE = 437_600
HW_PID_BASE = 800
_HCCL_GROUP = "Group hccl_world_group Communication"


def rank_folder(tl: Timeline, r: int) -> str:
    m = tl.ranks[r]
    if m.dp_group is None:
        return f"ep{m.ep_index}_rank{r}_ascend_pt"
    ep = m.ep_index if m.ep_index is not None else 0
    return f"dp{m.dp_group}_pp0_tp{m.tp_index}_ep{ep}_rank{r}_ascend_pt"


def _ts(ns: int) -> str:
    return f'"{ns // 1000}.{ns % 1000:03d}"'


def _dur(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def write_ascend(
    tl: Timeline, out_dir: Path, *, compresslevel: int = 6, progress: Callable[[int], None] | None = None
) -> tuple[list[Path], int]:
    """One rank folder per rank in ``out_dir``; returns the timeline paths and the events written
    (``progress(rank)`` is called before each rank is rendered)."""
    paths, total = [], 0
    for r, sel, anns in tl.by_rank():
        if progress is not None:
            progress(r)
        root = out_dir / rank_folder(tl, r)
        (root / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True, exist_ok=True)
        events = render_rank(tl, r, sel, anns)
        path = root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json.gz"
        write_gzip(path, ("[" + ", ".join(events) + "]").encode(), compresslevel)
        paths.append(path)
        total += len(events)
    return paths, total


def _fused_tasks(tl: Timeline, sel: np.ndarray) -> list[tuple[int, int, int, int, int, int]]:
    """(op, stream, start, end, launch, launch_dur) device tasks; notify+dispatch fused, layout dropped."""
    ops = tl.k_op[sel].tolist()
    rows = list(
        zip(
            ops,
            tl.k_stream[sel].tolist(),
            tl.k_start[sel].tolist(),
            (tl.k_start[sel] + tl.k_dur[sel]).tolist(),
            tl.k_launch[sel].tolist(),
            tl.k_launch_dur[sel].tolist(),
            tl.k_step[sel].tolist(),
            tl.k_layer[sel].tolist(),
            tl.k_mb[sel].tolist(),
            strict=True,
        )
    )
    notify = OP_CODE["notify"]
    opened: dict[tuple[int, int, int], tuple[int, int]] = {}  # (step, layer, mb) -> notify start, launch
    out = []
    for op, stream, start, end, launch, ldur, step, layer, mb in rows:
        name = OPS[op]
        if op == notify:
            opened[(step, layer, mb)] = (start, launch)
            continue
        if name == "layout":
            continue
        if name == "dispatch" and (step, layer, mb) in opened:
            start, launch = opened.pop((step, layer, mb))
        out.append((op, stream, start, end, launch, ldur))
    out.sort(key=lambda t: (t[2], t[1]))
    return out


def render_rank(tl: Timeline, r: int, sel: np.ndarray, anns: list) -> list[str]:
    """The JSON objects (as text) of one rank's trace_view, in torch_npu's order."""
    meta = tl.ranks[r]
    hpid = HOST_PID_BASE + r
    cann = hpid * 100 + 2
    hw = HW_PID_BASE + meta.device
    comm = hpid * 10000 + 1000
    overlap = hpid * 10000 + 1100
    shift = tl.epoch_ns + int(tl.clock_offset_ns[r])
    tasks = _fused_tasks(tl, sel)
    allgather = OP_CODE["allgather"]
    py: list[tuple[int, str]] = []  # (ts, event) on the Python thread
    flows_s: list[str] = []
    cann_ev: list[str] = []
    hw_ev: list[tuple[int, str]] = []
    comm_ev: list[str] = []
    compute_iv: list[tuple[int, int]] = []
    comm_iv: list[tuple[int, int]] = []
    for a in anns:
        args = json.dumps(written_args(a.args, tl.epoch_ns, int(tl.clock_offset_ns[0])))
        py.append(
            (
                a.host_start,
                f'{{"ph": "X", "name": {json.dumps(a.name)}, "pid": {hpid}, "tid": {hpid}, '
                f'"ts": {_ts(a.host_start + shift)}, "dur": {_dur(a.host_end - a.host_start)}, '
                f'"cat": "user_annotation", "args": {args}}}',
            )
        )
    task_id = 0
    hccl_n = 0
    used_ids: set[int] = set()
    streams = set()
    for op, stream, start, end, launch, ldur in tasks:
        name = OPS[op]
        t_start, t_launch = start + shift, launch + shift
        if op == allgather:
            hccl_n += 1
            op_name = f"hcom_allGather__{521 + r % 7}_{hccl_n}_1"
            comm_ev.append(
                f'{{"name": "{op_name}", "pid": {comm}, "tid": 0, "ts": {_ts(t_start)}, '
                f'"dur": {_dur(end - start)}, "args": {{"connection_id": {hccl_n}, "model id": 4294967295, '
                f'"data_type": "INT64", "alg_type": "MESH", "count": 8}}, "ph": "X"}}'
            )
            mid = start + (end - start) * 4 // 5
            comm_ev.append(
                f'{{"name": "Notify_Wait", "pid": {comm}, "tid": 1, "ts": {_ts(t_start)}, '
                f'"dur": {_dur(mid - start)}, "args": {{"notify_id": {hccl_n}, "task type": "Notify Wait", '
                f'"plane id": 0}}, "ph": "X"}}'
            )
            comm_ev.append(
                f'{{"name": "Memcpy", "pid": {comm}, "tid": 1, "ts": {_ts(mid + shift)}, '
                f'"dur": {_dur(end - mid)}, "args": {{"notify_id": {hccl_n}, "task type": "Memcpy", '
                f'"plane id": 0, "size(Byte)": 64}}, "ph": "X"}}'
            )
            py.append(
                (
                    launch,
                    f'{{"ph": "X", "name": "c10d::allgather_", "pid": {hpid}, "tid": {hpid}, '
                    f'"ts": {_ts(t_launch)}, "dur": {_dur(ldur)}, "cat": "cpu_op", '
                    f'"args": {{"Sequence number": -1, "Fwd thread id": 0}}}}',
                )
            )
            comm_iv.append((start, end))
            continue
        task, fw, acl, ttype = ASCEND_NAMES[name]
        task_id += 1
        streams.add(stream)
        py.append(
            (
                launch,
                f'{{"ph": "X", "name": "{fw}", "pid": {hpid}, "tid": {hpid}, "ts": {_ts(t_launch)}, '
                f'"dur": {_dur(ldur)}, "cat": "cpu_op", "args": {{"Sequence number": -1, '
                f'"Fwd thread id": 0}}}}',
            )
        )
        cann_ev.append(
            f'{{"name": "AscendCL@{acl}", "pid": {cann}, "tid": {hpid}, "ts": {_ts(t_launch + ldur // 4)}, '
            f'"dur": {_dur(ldur // 2)}, "args": {{"Thread Id": {hpid}, "Mode": "ACL_OP", "level": "acl", '
            f'"id": "{acl}", "item_id": "0", "connection_id": {task_id}}}, "ph": "X"}}'
        )
        flow_id = t_start  # torch_npu derives the id from the task's start (ns); kept unique here
        while flow_id in used_ids:
            flow_id += 1
        used_ids.add(flow_id)
        flows_s.append(
            f'{{"ph": "s", "bp": "e", "name": "torch_to_npu", "id": {flow_id}, "pid": {hpid}, '
            f'"tid": {hpid}, "ts": {_ts(t_launch)}, "cat": "async_npu"}}'
        )
        hw_ev.append(
            (
                start,
                f'{{"name": "{task}", "pid": {hw}, "tid": {stream}, "ts": {_ts(t_start)}, '
                f'"dur": {_dur(end - start)}, "args": {{"Model Id": 4294967295, "Task Type": "{ttype}", '
                f'"Stream Id": {stream}, "Task Id": {task_id}, "Batch Id": 0, '
                f'"Subtask Id": 4294967295, "connection_id": {task_id}}}, "ph": "X"}}',
            )
        )
        hw_ev.append(
            (
                start,
                f'{{"ph": "f", "bp": "e", "name": "torch_to_npu", "id": {flow_id}, "pid": {hw}, '
                f'"tid": {stream}, "ts": {_ts(t_start)}, "cat": "async_npu"}}',
            )
        )
        (compute_iv if name in _COMPUTE_OPS else comm_iv).append((start, end))
    py.sort(key=lambda t: t[0])
    out = [e for _, e in py]
    out += flows_s
    out += _python_meta(hpid)
    out += _device_meta(hw, cann, comm, overlap, hpid, sorted(streams))
    out += cann_ev
    out += [e for _, e in sorted(hw_ev, key=lambda t: t[0])]
    out += comm_ev
    out += _overlap(overlap, compute_iv, comm_iv, shift)
    return out


def _python_meta(hpid: int) -> list[str]:
    return [
        f'{{"ph": "M", "name": "process_name", "pid": {hpid}, "tid": 0, "args": {{"name": "Python"}}}}',
        f'{{"ph": "M", "name": "process_labels", "pid": {hpid}, "tid": 0, "args": {{"labels": "CPU"}}}}',
        f'{{"ph": "M", "name": "process_sort_index", "pid": {hpid}, "tid": 0, "args": {{"sort_index": 0}}}}',
        f'{{"ph": "M", "name": "thread_name", "pid": {hpid}, "tid": {hpid}, "args": {{"name": "Thread {hpid}"}}}}',
        f'{{"ph": "M", "name": "thread_sort_index", "pid": {hpid}, "tid": {hpid}, "args": {{"sort_index": {hpid}}}}}',
    ]


def _device_meta(hw: int, cann: int, comm: int, overlap: int, hpid: int, streams: list[int]) -> list[str]:
    out = [
        f'{{"name": "process_name", "pid": {hw}, "tid": 0, "args": {{"name": "Ascend Hardware"}}, "ph": "M"}}'
    ]
    for s in streams:
        out.append(
            f'{{"name": "thread_name", "pid": {hw}, "tid": {s}, "args": {{"name": "Stream {s}"}}, "ph": "M"}}'
        )
        out.append(
            f'{{"name": "thread_sort_index", "pid": {hw}, "tid": {s}, "args": {{"sort_index": {s}}}, "ph": "M"}}'
        )
    out += [
        f'{{"name": "process_labels", "pid": {hw}, "tid": 0, "args": {{"labels": "NPU"}}, "ph": "M"}}',
        f'{{"name": "process_sort_index", "pid": {hw}, "tid": 0, "args": {{"sort_index": 8}}, "ph": "M"}}',
        f'{{"name": "process_name", "pid": {cann}, "tid": 0, "args": {{"name": "CANN"}}, "ph": "M"}}',
        f'{{"name": "thread_name", "pid": {cann}, "tid": {hpid}, "args": {{"name": "Thread {hpid}"}}, "ph": "M"}}',
        f'{{"name": "thread_sort_index", "pid": {cann}, "tid": {hpid}, "args": {{"sort_index": {hpid}}}, "ph": "M"}}',
        f'{{"name": "process_labels", "pid": {cann}, "tid": 0, "args": {{"labels": "CPU"}}, "ph": "M"}}',
        f'{{"name": "process_sort_index", "pid": {cann}, "tid": 0, "args": {{"sort_index": 2}}, "ph": "M"}}',
        f'{{"name": "process_name", "pid": {comm}, "tid": 0, "args": {{"name": "Communication"}}, "ph": "M"}}',
        f'{{"name": "thread_name", "pid": {comm}, "tid": 0, "args": {{"name": "{_HCCL_GROUP}"}}, "ph": "M"}}',
        f'{{"name": "thread_name", "pid": {comm}, "tid": 1, "args": {{"name": "Plane 0"}}, "ph": "M"}}',
        f'{{"name": "process_labels", "pid": {comm}, "tid": 0, "args": {{"labels": "NPU"}}, "ph": "M"}}',
        f'{{"name": "process_sort_index", "pid": {comm}, "tid": 0, "args": {{"sort_index": 10}}, "ph": "M"}}',
        f'{{"name": "process_name", "pid": {overlap}, "tid": 0, "args": {{"name": "Overlap Analysis"}}, "ph": "M"}}',
    ]
    for tid, name in enumerate(("Computing", "Communication", "Communication(Not Overlapped)", "Free")):
        out.append(
            f'{{"name": "thread_name", "pid": {overlap}, "tid": {tid}, "args": {{"name": "{name}"}}, "ph": "M"}}'
        )
    out += [
        f'{{"name": "process_labels", "pid": {overlap}, "tid": 0, "args": {{"labels": "NPU"}}, "ph": "M"}}',
        f'{{"name": "process_sort_index", "pid": {overlap}, "tid": 0, "args": {{"sort_index": 11}}, "ph": "M"}}',
    ]
    return out


def merge_intervals(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of [start, end) intervals, sorted and disjoint."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def subtract_intervals(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Parts of the disjoint sorted intervals ``a`` not covered by the disjoint sorted ``b``."""
    out, j = [], 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def _overlap(pid: int, compute: list[tuple[int, int]], comm: list[tuple[int, int]], shift: int) -> list[str]:
    """Overlap Analysis rows: the profiler's own summary of the device's busy and free time."""
    comp, com = merge_intervals(compute), merge_intervals(comm)
    busy = merge_intervals(comp + com)
    free = [(e1, s2) for (_, e1), (s2, _) in itertools.pairwise(busy) if s2 > e1]
    rows = []
    for tid, name, ivs in (
        (0, "Computing", comp),
        (1, "Communication", com),
        (2, "Communication(Not Overlapped)", subtract_intervals(com, comp)),
        (3, "Free", free),
    ):
        rows += [
            (
                s,
                tid,
                f'{{"name": "{name}", "pid": {pid}, "tid": {tid}, "ts": {_ts(s + shift)}, '
                f'"dur": {_dur(e - s)}, "ph": "X"}}',
            )
            for s, e in ivs
        ]
    return [e for _, _, e in sorted(rows)]
