"""The op taxonomy: rule files, validation, selection, precedence."""

from __future__ import annotations

import pytest

from asaptrace.enrich.taxonomy import PROFILES, load_profile, select_taxonomy
from asaptrace.errors import UsageError

DEEPEP_NAMES = {
    "void deep_ep::internode::dispatch<true, 4>(int4*)": "dispatch",
    "void deep_ep::intranode::notify_dispatch<8>(int const*)": "dispatch",
    "void deep_ep::internode_ll::combine<__nv_bfloat16>(void*)": "combine",
    "void dpsk::ep::internode::dispatch<1>(int4*)": "dispatch",
    "void deep_ep::layout::get_dispatch_layout<256>(long const*)": "compute",
    "void deep_ep::async::combine_recv<__nv_bfloat16, 16>(int4*)": "combine",
}


def test_builtin_profiles_are_registered():
    assert {"deepep", "nccl", "ascend", "vllm", "sglang", "common"} <= set(PROFILES.names())


@pytest.mark.parametrize(("name", "kind"), sorted(DEEPEP_NAMES.items()))
def test_deepep_kernels(name, kind):
    assert select_taxonomy([name]).kind_of(name) == kind


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "collective"),
        ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "collective"),
        ("hcom_alltoallv_123_1_1", "collective"),
        ("MoeDistributeDispatch_8_1", "dispatch"),
        ("MoeDistributeCombineV2", "combine"),
        ("GroupedMatmul_15", "moe"),
        ("FusedInferAttentionScore_3", "attention"),
        ("void flash::flash_fwd_splitkv_mla_kernel<x>(p)", "attention"),
        ("fused_moe_kernel", "moe"),
        ("void moe_gate::topk_gating_softmax_kernel<float>(float const*)", "gate"),
    ],
)
def test_names_of_other_profiles(name, kind):
    assert select_taxonomy([name]).kind_of(name) == kind


def test_communication_is_not_recognised_by_prefix_alone():
    name = "nccl_helper_elementwise_add"  # starts with nccl, is no NCCL collective kernel
    assert select_taxonomy([name]).kind_of(name) is None


def test_profiles_are_selected_from_what_the_trace_contains():
    assert select_taxonomy(["ncclKernel_AllReduce_x"]).label == "nccl+common"
    assert (
        select_taxonomy(["void deep_ep::internode::dispatch<1>()", "ncclDevKernel_AllGather"]).label
        == "deepep+nccl+common"
    )
    assert select_taxonomy(["volta_sgemm_128x32_nt"]).label == "common"


def test_context_rule_needs_its_annotation():
    tax = select_taxonomy([])
    gemm = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu>(Params)"
    assert tax.kind_of(gemm, "prefill_step#N/layer#N/shared_expert") == "shared_expert"
    assert tax.kind_of(gemm, "prefill_step#N/layer#N/dense_mlp") == "dense_mlp"
    assert tax.kind_of(gemm, "prefill_step#N/layer#N") is None


def test_user_rules_come_first(tmp_path):
    rules = tmp_path / "mine.toml"
    rules.write_text(
        '[profile]\nname = "mine"\n\n[[rule]]\nmatch = "my_all_to_all_kernel"\nkind = "dispatch"\n\n'
        '[[rule]]\nmatch = "flash_fwd"\nkind = "compute"\n'
    )
    tax = select_taxonomy(["my_all_to_all_kernel", "flash_fwd_kernel"], user=rules)
    assert tax.label == "mine+common"
    assert tax.kind_of("my_all_to_all_kernel") == "dispatch"
    assert tax.kind_of("flash_fwd_kernel") == "compute"  # overrides common's attention rule


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[rule]]\nmatch = "x"\nkind = "moe"\n', "lacks a \\[profile\\] table"),
        ('[profile]\nname = "u"\n\n[[rule]]\nmatch = "x"\nkind = "banana"\n', "kind 'banana' is not one of"),
        ('[profile]\nname = "u"\n\n[[rule]]\nmatch = "(unclosed"\nkind = "moe"\n', "bad regex"),
        ('[profile]\nname = "u"\ncolour = "red"\n', "unknown keys \\['colour'\\]"),
        ('[profile]\nname = "u"\n\n[[rule]]\nkind = "moe"\n', "lacks a 'match' regex"),
        ('[profile]\nname = "u"\n[[rule]\n', "not valid TOML"),
    ],
)
def test_bad_rule_files_are_one_line_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message) as info:
        load_profile(path)
    assert str(path) in str(info.value)
