"""MoE kernels of every vendor get `gate` (routing, gating, sorting) or `moe` (expert GEMMs,
activation, finalize / scatter / sum), and no dense GEMM is taken for an expert GEMM.

The names are full kernel names as profilers print them (Kineto / nsys demangled names, from
public profiles of TensorRT-LLM / FlashInfer on B200-B300, vLLM and SGLang gpt-oss on
triton_kernels, aiter / ck_tile on MI300 and vLLM's CUDA MoE). Each family is classified with
the taxonomy selected from its own names, as an ingest of such a trace would select it.
"""

from __future__ import annotations

import pytest

from asaptrace.enrich.taxonomy import select_taxonomy

FAMILIES: dict[str, dict[str, str]] = {
    "trtllm-gen (B300)": {
        "void moe::dev::routing::routingCustom::routingIndicesDynBlockKernel<moe::dev::routing::"
        "routingCustom::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, 8, true, false>>(moe::dev::"
        "routing::routingCustom::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, 8, true, false>)": "gate",
        "void moe::dev::routing::routingDeepSeek::routingIndicesClusterKernel<moe::dev::routing::"
        "routingDeepSeek::KernelParams<float, __nv_bfloat16, 256, true>>(moe::dev::routing::"
        "routingDeepSeek::KernelParams<float, __nv_bfloat16, 256, true>)": "gate",
        "void moe::dev::finalize::finalizeKernel<moe::dev::finalize::KernelParams<__nv_bfloat16, "
        "__nv_bfloat16>>(moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16>)": "moe",
        "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<__nv_bfloat16, "
        "__nv_bfloat16>>(moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16>)": "moe",
        "void moe::dev::activation::activationDeepSeekKernel<moe::dev::activation::KernelParams<"
        "__nv_fp8_e4m3, float, true>>(moe::dev::activation::KernelParams<__nv_fp8_e4m3, float, true>)": "moe",
        "bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512u2_s3_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_"
        "schedS_biasM_bN_dynBatch_sm100f": "moe",
        "bmm_E2m1_E2m1E2m1_Fp32_t128x8x512u2_s3_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_"
        "schedS_swiGlu_dynBatch_sm100f": "moe",
    },
    "triton_kernels (vLLM / SGLang gpt-oss)": {
        "_combined_routing_compute": "gate",
        "_combined_routing_compute_pow2": "gate",
        "_combined_routing_memset": "gate",
        "_topk_forward": "gate",
        "_sum_bitmatrix_rows": "gate",
        "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1_swiglu": "moe",
        "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1": "moe",
        "_p_matmul_ogs_NNT_bf16xbf16xbf16_128x256x64x1": "moe",
        "_finalize_matmul_scatter_bf16": "moe",
    },
    "aiter / ck_tile (MI300)": {
        "void aiter::topksoftmax_kernel<__hip_bfloat16, 8, 128, 4, 16>(__hip_bfloat16 const*, "
        "bool const*, float*, int, int*, int*, int, int, int)": "gate",
        "void aiter::biased_grouped_topk_kernel<__hip_bfloat16, 256, 8>(__hip_bfloat16*, float*, int*, int)": "gate",
        "void ck_tile::kentry<256, 1, ck_tile::MoeSortingKernel<ck_tile::MoeSortingProblemEx<int, float, "
        "1, true, false, true, 0>>>(ck_tile::MoeSortingKernel<ck_tile::MoeSortingProblemEx<int, float, "
        "1, true, false, true, 0>>::Kargs)": "gate",
        "void ck_tile::kentry<256, 1, ck_tile::MoeSortingMultiPhaseKernel_P0_v2<ck_tile::"
        "MoeSortingProblemMp<int, float, 16, 8, 1, true, false>>>(ck_tile::MoeSortingMultiPhaseKernel_"
        "P0_v2<ck_tile::MoeSortingProblemMp<int, float, 16, 8, 1, true, false>>::Kargs)": "gate",
        "aiter::fmoe_bf16_pertokenMXfp4_g1u1_flat_novs_silu_16x256": "moe",
        "void ck_tile::kentry<256, 2, ck_tile::MoeFlatmmKernel<ck_tile::FlatmmPipeline<ck_tile::"
        "bf16_t>>>(ck_tile::MoeFlatmmKernel<ck_tile::FlatmmPipeline<ck_tile::bf16_t>>::Kargs)": "moe",
        "void kernel_moe_gemm<ck::tensor_operation::device::GridwiseMoeGemm<ck::bhalf_t, 256>>(ck::Argument)": "moe",
        "void moe_reduction_kernel<__hip_bfloat16, 8>(__hip_bfloat16 const*, __hip_bfloat16*, int)": "moe",
    },
    "vLLM CUDA / Triton MoE": {
        "fused_moe_kernel": "moe",
        "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, "
        "int, unsigned long, int*, int, bool)": "gate",
        "void vllm::moe::count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, unsigned long, int)": "gate",
        "void vllm::moe::topkGatingSoftmax<__nv_bfloat16, 8, 128, 4, 16>(__nv_bfloat16 const*, bool const*, "
        "float*, int, int*, int*, int, int, int)": "gate",
        "void vllm::moe::moe_sum_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, int)": "moe",
        # the same kernels in a trace that has no vllm:: name at all (Triton fused MoE alone)
        "void topkGatingSoftmax<__nv_bfloat16, 8, 128, 4, 16>(__nv_bfloat16 const*, bool const*, "
        "float*, int, int*, int*, int, int, int)": "gate",
        "void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int)": "gate",
    },
}

#: Dense GEMMs of cuBLAS, cuBLASLt (nvjet), CUTLASS, hipBLASLt, ck_tile and TRT-LLM-gen: never `moe`.
DENSE_GEMMS = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    "ampere_sgemm_128x64_tn",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNN",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>("
    "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
    "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized>>>("
    "cutlass::gemm::kernel::GemmUniversal::Params)",
    "gemm_Bfloat16_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f",
    "Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1",
    "void ck_tile::kentry<256, 1, ck_tile::GemmKernel<ck_tile::GemmPipelineAgBgCrCompV3<ck_tile::bf16_t>>>("
    "ck_tile::GemmKernel<ck_tile::GemmPipelineAgBgCrCompV3<ck_tile::bf16_t>>::GemmKernelArgs)",
]

CASES = [(family, name, kind) for family, names in FAMILIES.items() for name, kind in names.items()]


@pytest.mark.parametrize(("family", "name", "kind"), CASES, ids=[f"{f}:{n[:48]}" for f, n, _ in CASES])
def test_moe_kernel_of_each_vendor_gets_its_kind(family, name, kind):
    taxonomy = select_taxonomy(FAMILIES[family])
    assert taxonomy.kind_of(name) == kind, taxonomy.label


@pytest.mark.parametrize(
    ("family", "profile"),
    [
        ("trtllm-gen (B300)", "trtllm"),
        ("triton_kernels (vLLM / SGLang gpt-oss)", "triton_moe"),
        ("aiter / ck_tile (MI300)", "aiter"),
        ("vLLM CUDA / Triton MoE", "vllm"),
    ],
)
def test_each_family_selects_its_profile(family, profile):
    assert profile in select_taxonomy(FAMILIES[family]).label.split("+")


@pytest.mark.parametrize("dense", DENSE_GEMMS, ids=[d[:40] for d in DENSE_GEMMS])
def test_no_dense_gemm_is_classified_moe(dense):
    # the worst case: a trace holding every vendor's MoE kernels, so every MoE profile is selected
    every = [n for names in FAMILIES.values() for n in names] + DENSE_GEMMS
    taxonomy = select_taxonomy(every)
    assert {"trtllm", "triton_moe", "aiter", "vllm"} <= set(taxonomy.label.split("+"))
    assert taxonomy.kind_of(dense) not in {"moe", "gate"}


def test_bmm_is_an_expert_gemm_only_beside_trtllm_moe_kernels():
    # TRT-LLM-gen's batched GEMM is the expert GEMM of its fused MoE; without moe::dev kernels in
    # the trace a bmm_… kernel is some other batched GEMM and keeps its category's kind
    name = "bmm_Bfloat16_Bfloat16Bfloat16_Fp32_t128x64x128_s5_et128x64_m256x64x16_c2x1x1_rM_BN_transOut"
    assert select_taxonomy([name]).kind_of(name) is None
