"""Generate a large Kineto trace in the style of a real GPU trace, for ingest benchmarks.

Events come in the proportions and shapes of a PyTorch profiler trace of an MoE forward pass:
cpu ops with ``Input Dims`` (record_shapes), cudaLaunchKernel runtime events with correlation ids,
kernels with long templated names and full args dicts (FlashAttention, DeepEP, cutlass GEMMs,
NCCL with collective metadata), ac2g flows, annotations and metadata — written one event per line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

KERNELS = [
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false>"
    "(flash::Flash_fwd_params)",
    "void deep_ep::internode::dispatch<true, 8, 16, 4, 32, 10>(int4*, float*, int*, long*, long*, int*, int*, "
    "SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*, int*, int const*, int*, int*, "
    "bool const*, int, int, int, int, int, int, void*, int, int, void**, int, int, int)",
    "void deep_ep::internode::combine<nv_bfloat16, 8, 16, 4, 32, 10>(int4*, float*, bool const*, int4 const*, "
    "float const*, int const*, int const*, SourceMeta const*, int const*, int const*, int, int, int, void*, int, "
    "int, void**, int, int, int)",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x4_nn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x128_32x4_nn_align8::Params)",
    "void grouped_gemm::kernel<cutlass::gemm::kernel::GemmGrouped<cutlass::gemm::threadblock::MmaMultistage<"
    "cutlass::gemm::GemmShape<128, 128, 32>, cutlass::bfloat16_t, cutlass::layout::RowMajor> > >(Params)",
    "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
]
OPS = ["aten::mm", "aten::linear", "aten::addmm", "aten::softmax", "aten::topk", "aten::index_select"]


def generate_kineto(path: Path, target_mb: int, *, seed: int = 0, rank: int = 0, world_size: int = 32) -> int:
    """Write ``path`` (≥ target_mb MB) as rank ``rank`` of ``world_size``; returns the number of events."""
    rng = random.Random(seed)
    ts = 1_694_128_201_435_418
    n = 0
    size = 0
    target = target_mb * 1_000_000
    with open(path, "w") as out:
        header = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H800", "numSms": 132}],
        }
        out.write(json.dumps(header)[:-1] + ', "traceEvents": [\n')
        meta = [
            {"name": "process_name", "ph": "M", "ts": ts, "pid": 0, "tid": 0, "args": {"name": "python3"}},
            {"name": "process_labels", "ph": "M", "ts": ts, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
            {"name": "thread_name", "ph": "M", "ts": ts, "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        ]
        lines = [json.dumps(e) for e in meta]
        while size < target:
            corr = n
            ext = n + 1
            op = {
                "ph": "X",
                "cat": "cpu_op",
                "name": rng.choice(OPS),
                "pid": 4242,
                "tid": 4242,
                "ts": ts,
                "dur": rng.randint(5, 80),
                "args": {
                    "External id": ext,
                    "Record function id": 0,
                    "Input Dims": [[rng.choice([1024, 4096, 8192]), 7168], [7168, 2048]],
                    "Input type": ["c10::BFloat16", "c10::BFloat16"],
                    "Ev Idx": n,
                },
            }
            launch = {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 4242,
                "tid": 4242,
                "ts": ts + 3,
                "dur": 4,
                "args": {"External id": ext, "cbid": 211, "correlation": corr},
            }
            k = rng.randrange(len(KERNELS))
            kargs = {
                "External id": ext,
                "queued": 0,
                "device": 0,
                "context": 1,
                "stream": 7 if k != 1 else 20,
                "correlation": corr,
                "registers per thread": 128,
                "shared memory": 98304,
                "blocks per SM": 0.5,
                "warps per SM": 4,
                "grid": [132, 1, 1],
                "block": [256, 1, 1],
                "est. achieved occupancy %": 12,
            }
            if k == 5:
                kargs.update(
                    {
                        "Collective name": "allgather",
                        "In msg nelems": 14680064,
                        "Out msg nelems": 14680064,
                        "Group size": 32,
                        "dtype": "BFloat16",
                        "Process Group Ranks": "[0, 1, 2, 3]",
                    }
                )
            kern = {
                "ph": "X",
                "cat": "kernel",
                "name": KERNELS[k],
                "pid": 0,
                "tid": kargs["stream"],
                "ts": ts + 10,
                "dur": rng.randint(3, 900),
                "args": kargs,
            }
            s = {"ph": "s", "id": corr, "pid": 4242, "tid": 4242, "ts": ts + 3, "cat": "ac2g", "name": "ac2g"}
            f = {
                "ph": "f",
                "id": corr,
                "pid": 0,
                "tid": kargs["stream"],
                "ts": ts + 10,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
            for e in (op, launch, kern, s, f):
                line = json.dumps(e)
                lines.append(line)
                size += len(line) + 2
            n += 5
            ts += rng.randint(5, 40)
            if len(lines) > 10000:
                out.write(",\n".join(lines) + ",\n")
                lines = []
        lines.append(
            json.dumps(
                {
                    "ph": "i",
                    "name": "Iteration Start: PyTorch Profiler",
                    "s": "g",
                    "pid": "Traces",
                    "tid": "Trace PyTorch Profiler",
                    "ts": ts,
                }
            )
        )
        out.write(",\n".join(lines) + "\n]}\n")
    return n + 4
