"""Write a :class:`Timeline` as PyTorch-profiler (Kineto) traces: one ``rank{r:03d}.pt.trace.json.gz`` per rank.

The files look like what ``torch.profiler`` writes for a DeepSeek-style serving engine: a top-level
object with ``schemaVersion``, ``distributedInfo``, ``deviceProperties`` and ``baseTimeNanoseconds``
(event times are µs relative to it, which keeps them exact in a double); ``M`` metadata naming the
host process and the GPU process (pid = local device id, one thread per stream); every kernel
with a ``cudaLaunchKernel`` on the host, linked by ``correlation`` and an ``ac2g`` flow; step and
layer ``user_annotation`` spans on the host with ``gpu_user_annotation`` copies on the device.
Each rank's clock offset is added to every timestamp it writes.

Events are formatted with f-strings from pre-encoded names (no per-event ``json.dumps``) and the
gzip layer is made deterministic (``mtime=0``, no file name), so a seed gives identical bytes.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from asaptrace.synth.timeline import OPS, Timeline, written_args

#: Kernel names per operation (DOMAIN.md §4 families: flash/MLA, DeepEP, DeepGEMM, CUTLASS).
KINETO_NAMES: dict[str, str] = {
    "attention": "void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, "
    "cutlass::bfloat16_t, 512>, true, false, false>(Flash_fwd_mla_params)",
    "gate": "void moe_gate::topk_gating_softmax_kernel<float, 256, 8, 8, 32>(float const*, bool const*, float*, "
    "int, int*, int*, int, int, int)",
    "layout": "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, "
    "int, int)",
    "shared_expert": "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8::Params)",
    "dense_mlp": "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align8::Params)",
    "moe": "void deep_gemm::fp8_gemm_kernel<4096, 7168, 128, 128, 128, 256, 4, 128, 1, 1, "
    "(deep_gemm::GemmType)1, deep_gemm::m_grouped_gemm_contiguous>(__nv_bfloat16*, float*, int*, unsigned int, "
    "CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap)",
    "notify": "void deep_ep::internode::notify_dispatch<true, 32>(int const*, int*, int, int const*, int*, int, "
    "int const*, int*, int, int, bool const*, int*, int*, int*, int*, int, int, int, int, void*, int*, int, "
    "void**, int)",
    "dispatch": "void deep_ep::internode::dispatch<true, 4, 2, 32, 8>(int4*, float*, long*, float*, "
    "deep_ep::internode::SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*, int*, "
    "int*, int const*, int const*, int const*, int const*, bool const*, int, int, int, int, int, void*, int, int, "
    "int, void**, int, int, int)",
    "combine": "void deep_ep::internode::combine<__nv_bfloat16, 4, 2, 32, 8>(int4*, float*, bool const*, "
    "int4 const*, float const*, int const*, int const*, deep_ep::internode::SourceMeta const*, int const*, "
    "int const*, int const*, int, int, int, void*, int, int, int, void**, int, int, int)",
    "allgather": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "dispatch_send": "void deep_ep::async::dispatch_send<__nv_fp8_e4m3, 16>(int4 const*, float const*, "
    "int const*, void**, int*, int, int)",
    "dispatch_recv": "void deep_ep::async::dispatch_recv<__nv_fp8_e4m3, 16>(int4*, float*, void**, int*, int, int)",
    "combine_send": "void deep_ep::async::combine_send<__nv_bfloat16, 16>(int4 const*, float const*, void**, int*, "
    "int, int)",
    "combine_recv": "void deep_ep::async::combine_recv<__nv_bfloat16, 16>(int4*, float const*, void**, int*, int, "
    "int)",
}

HOST_PID_BASE = 3_000_000
TIME_MARGIN_NS = 1_000_000_000  # relative times start 1 s after baseTimeNanoseconds (offsets stay positive)
_DEVICE_PROPS = (
    '{{"id": {d}, "name": "NVIDIA H800", "totalGlobalMem": 85031714816, "computeMajor": 9, "computeMinor": 0, '
    '"maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, '
    '"regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, '
    '"sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448}}'
)


def _us(ns: int) -> str:
    """int ns → µs text with 3 decimals (exact)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def kineto_file_name(rank: int) -> str:
    return f"rank{rank:03d}.pt.trace.json.gz"


def write_kineto(
    tl: Timeline, out_dir: Path, *, compresslevel: int = 6, progress: Callable[[int], None] | None = None
) -> tuple[list[Path], int]:
    """One gzipped trace per rank in ``out_dir``; returns the paths and the number of events written
    (``progress(rank)`` is called before each rank is rendered)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths, events = [], 0
    for r, sel, anns in tl.by_rank():
        if progress is not None:
            progress(r)
        text, n = render_rank(tl, r, sel, anns)
        path = out_dir / kineto_file_name(r)
        write_gzip(path, text.encode(), compresslevel)
        paths.append(path)
        events += n
    return paths, events


def write_gzip(path: Path, data: bytes, compresslevel: int = 6) -> None:
    """Deterministic gzip: no file name and mtime 0 in the header."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=compresslevel, mtime=0) as gz:
        gz.write(data)
    path.write_bytes(buf.getvalue())


def render_rank(tl: Timeline, r: int, sel: np.ndarray, anns: list) -> tuple[str, int]:
    """The JSON text of one rank's trace (kernel rows ``sel``, sorted by start) and its event count."""
    meta = tl.ranks[r]
    dev = meta.device
    hpid = HOST_PID_BASE + r
    shift = int(tl.clock_offset_ns[r]) + TIME_MARGIN_NS
    ref = int(tl.clock_offset_ns[0])
    names = [json.dumps(KINETO_NAMES[o]) for o in OPS]
    ev: list[str] = [
        f'{{"name": "process_name", "ph": "M", "ts": 0, "pid": {hpid}, "tid": 0, "args": {{"name": "python3"}}}}',
        f'{{"name": "process_labels", "ph": "M", "ts": 0, "pid": {hpid}, "tid": 0, "args": {{"labels": "CPU"}}}}',
        f'{{"name": "thread_name", "ph": "M", "ts": 0, "pid": {hpid}, "tid": {hpid}, '
        f'"args": {{"name": "thread {hpid} (python3)"}}}}',
        f'{{"name": "process_name", "ph": "M", "ts": 0, "pid": {dev}, "tid": 0, "args": {{"name": "python3"}}}}',
        f'{{"name": "process_labels", "ph": "M", "ts": 0, "pid": {dev}, "tid": 0, "args": {{"labels": "GPU {dev}"}}}}',
    ]
    streams = sorted({int(s) for s in tl.k_stream[sel].tolist()} | {7})
    for s in streams:
        ev.append(
            f'{{"name": "thread_name", "ph": "M", "ts": 0, "pid": {dev}, "tid": {s}, '
            f'"args": {{"name": "stream {s} "}}}}'
        )
    ext = 1
    anns = sorted(anns, key=lambda a: (a.host_start, a.dev_start, a.name))
    for a in anns:
        args = json.dumps(
            {"External id": ext, **written_args(a.args, tl.epoch_ns, ref)}, separators=(", ", ": ")
        )
        name = json.dumps(a.name)
        ev.append(
            f'{{"ph": "X", "cat": "user_annotation", "name": {name}, "pid": {hpid}, "tid": {hpid}, '
            f'"ts": {_us(a.host_start + shift)}, "dur": {_us(a.host_end - a.host_start)}, "args": {args}}}'
        )
        ev.append(
            f'{{"ph": "X", "cat": "gpu_user_annotation", "name": {name}, "pid": {dev}, "tid": 7, '
            f'"ts": {_us(a.dev_start + shift)}, "dur": {_us(a.dev_end - a.dev_start)}, "args": {args}}}'
        )
        ext += 1
    corr_base = 1000 * (r + 1)  # correlation ids are per process, as in real traces
    launch = (tl.k_launch[sel] + shift).tolist()
    launch_dur = tl.k_launch_dur[sel].tolist()
    start = (tl.k_start[sel] + shift).tolist()
    dur = tl.k_dur[sel].tolist()
    ops = tl.k_op[sel].tolist()
    strm = tl.k_stream[sel].tolist()
    for i in range(len(sel)):
        corr = corr_base + i
        x = ext + i
        lt, kt = _us(launch[i]), _us(start[i])
        ev.append(
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {hpid}, "tid": {hpid}, '
            f'"ts": {lt}, "dur": {_us(launch_dur[i])}, '
            f'"args": {{"External id": {x}, "cbid": 211, "correlation": {corr}}}}}'
        )
        ev.append(
            f'{{"ph": "X", "cat": "kernel", "name": {names[ops[i]]}, "pid": {dev}, "tid": {strm[i]}, '
            f'"ts": {kt}, "dur": {_us(dur[i])}, "args": {{"External id": {x}, "device": {dev}, '
            f'"stream": {strm[i]}, "correlation": {corr}, "context": 1}}}}'
        )
        ev.append(
            f'{{"ph": "s", "id": {corr}, "pid": {hpid}, "tid": {hpid}, "ts": {lt}, "cat": "ac2g", '
            f'"name": "ac2g"}}'
        )
        ev.append(
            f'{{"ph": "f", "id": {corr}, "pid": {dev}, "tid": {strm[i]}, "ts": {kt}, "cat": "ac2g", '
            f'"name": "ac2g", "bp": "e"}}'
        )
    props = ", ".join(_DEVICE_PROPS.format(d=d) for d in range(min(8, _node_size(tl))))
    head = (
        '{\n  "schemaVersion": 1,\n'
        f'  "deviceProperties": [{props}],\n'
        f'  "distributedInfo": {{"backend": "nccl", "rank": {r}, "world_size": {tl.world_size}}},\n'
        '  "traceEvents": [\n  '
    )
    tail = (
        f'\n  ],\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {tl.epoch_ns - TIME_MARGIN_NS},\n'
        '  "traceName": "asaptrace synth"\n}\n'
    )
    return head + ",\n  ".join(ev) + tail, len(ev)


def _node_size(tl: Timeline) -> int:
    return max(m.device for m in tl.ranks) + 1
