"""The ONNX backend conformance cases (``tests/onnx_conformance.py``) in CI.

Every case runs (the whole run takes under a minute) and is compared with onnx's expected
outputs as onnx's runner compares them. The cases that do not pass yet are listed, with the
category of their failure, in ``tests/onnx_conformance_failing.txt``; they are expected
failures, strict ones, so a case that starts passing is taken off the list (rewrite it with
``PYTHONPATH=$PWD python -m tests.onnx_conformance --write-failing``). No case of the op
types of common CNNs, transformers and RNNs (``COMMON``) may be on it, and the list may
not grow past ``2033 - FLOOR`` cases. The full report, per op type:
``PYTHONPATH=$PWD python -m tests.onnx_conformance``.
"""
from __future__ import annotations

import functools

import pytest

pytest.importorskip("onnx")
import onnx_conformance as conf  # noqa: E402

# The passing count measured on the full run; raise it when more cases pass.
FLOOR = 1420
COMMON = {
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Relu", "LeakyRelu", "PRelu", "Sigmoid",
    "Tanh", "Elu", "Selu", "Gelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Erf",
    "BatchNormalization", "LayerNormalization", "InstanceNormalization", "MaxPool",
    "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize", "Reshape", "Transpose",
    "Concat", "Split", "Slice", "Gather", "Expand", "Where", "ReduceSum", "ReduceMean",
    "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "Softmax", "LogSoftmax", "LSTM", "GRU", "RNN",
    "Attention", "If", "Loop", "Scan",
}
# Cases of the common op types that do not pass yet (the remaining work).
COMMON_NOT_YET = {
    "test_attention_23_boolmask_fullymasked_row_nan_robustness",
    "test_attention_23_fullymasked_qk_matmul_output_mode3_zero",
    "test_attention_24_fullymasked_qk_matmul_output_mode3_zero",
    "test_attention_24_qk_matmul_output_mode3_softmax_precision",
    "test_attention_3d",
    "test_attention_3d_attn_mask",
    "test_attention_3d_causal",
    "test_attention_3d_causal_bf16",
    "test_attention_3d_diff_heads_sizes",
    "test_attention_3d_diff_heads_sizes_attn_mask",
    "test_attention_3d_diff_heads_sizes_causal",
    "test_attention_3d_diff_heads_sizes_scaled",
    "test_attention_3d_diff_heads_sizes_softcap",
    "test_attention_3d_diff_heads_with_past_and_present",
    "test_attention_3d_gqa",
    "test_attention_3d_gqa_attn_mask",
    "test_attention_3d_gqa_causal",
    "test_attention_3d_gqa_scaled",
    "test_attention_3d_gqa_softcap",
    "test_attention_3d_gqa_with_past_and_present",
    "test_attention_3d_local_window",
    "test_attention_3d_scaled",
    "test_attention_3d_softcap",
    "test_attention_3d_transpose_verification",
    "test_attention_3d_with_past_and_present",
    "test_attention_3d_with_past_and_present_qk_matmul",
    "test_attention_3d_with_past_and_present_qk_matmul_bias",
    "test_attention_3d_with_past_and_present_qk_matmul_softcap",
    "test_attention_3d_with_past_and_present_qk_matmul_softmax",
    "test_attention_4d",
    "test_attention_4d_attn_mask",
    "test_attention_4d_attn_mask_3d",
    "test_attention_4d_attn_mask_3d_causal",
    "test_attention_4d_attn_mask_4d",
    "test_attention_4d_attn_mask_4d_causal",
    "test_attention_4d_attn_mask_bool",
    "test_attention_4d_attn_mask_bool_4d",
    "test_attention_4d_attn_mask_causal_bf16",
    "test_attention_4d_causal",
    "test_attention_4d_causal_bf16",
    "test_attention_4d_causal_fp16",
    "test_attention_4d_causal_fp16_expanded",
    "test_attention_4d_causal_nonpad_attn_mask_composition",
    "test_attention_4d_causal_nonpad_batch_prefill",
    "test_attention_4d_causal_nonpad_continued_prefill",
    "test_attention_4d_causal_nonpad_negative_offset_structural_empty",
    "test_attention_4d_causal_padded_kv_bf16",
    "test_attention_4d_causal_with_past_and_present",
    "test_attention_4d_diff_heads_mask4d_padded_kv",
    "test_attention_4d_diff_heads_sizes",
    "test_attention_4d_diff_heads_sizes_attn_mask",
    "test_attention_4d_diff_heads_sizes_causal",
    "test_attention_4d_diff_heads_sizes_scaled",
    "test_attention_4d_diff_heads_sizes_softcap",
    "test_attention_4d_diff_heads_with_past_and_present",
    "test_attention_4d_diff_heads_with_past_and_present_mask3d",
    "test_attention_4d_diff_heads_with_past_and_present_mask4d",
    "test_attention_4d_fp16",
    "test_attention_4d_gqa",
    "test_attention_4d_gqa_attn_mask",
    "test_attention_4d_gqa_causal",
    "test_attention_4d_gqa_causal_nonpad_decode",
    "test_attention_4d_gqa_causal_nonpad_decode_fp16",
    "test_attention_4d_gqa_scaled",
    "test_attention_4d_gqa_softcap",
    "test_attention_4d_gqa_with_past_and_present",
    "test_attention_4d_gqa_with_past_and_present_fp16",
    "test_attention_4d_padded_kv_bf16",
    "test_attention_4d_scaled",
    "test_attention_4d_softcap",
    "test_attention_4d_softcap_neginf_mask",
    "test_attention_4d_softcap_neginf_mask_poison",
    "test_attention_4d_with_past_and_present",
    "test_attention_4d_with_past_and_present_qk_matmul",
    "test_attention_4d_with_past_and_present_qk_matmul_bias",
    "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask",
    "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal",
    "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask",
    "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal",
    "test_attention_4d_with_qk_matmul",
    "test_attention_4d_with_qk_matmul_bias",
    "test_attention_4d_with_qk_matmul_softcap",
    "test_attention_4d_with_qk_matmul_softmax",
    "test_attention_bidirectional_window",
    "test_attention_causal_boolmask_nan_robustness",
    "test_attention_local_window",
    "test_attention_local_window_default",
    "test_attention_local_window_ext_cache_float16_mask",
    "test_attention_local_window_ext_cache_rank2_mask",
    "test_attention_local_window_ext_cache_rank3_head_mask",
    "test_attention_local_window_ext_cache_rank4_batch_mask",
    "test_attention_local_window_gqa_rank4_mask",
    "test_attention_local_window_rank1_boolean_mask",
    "test_attention_local_window_with_past",
    "test_averagepool_2d_dilations",
    "test_averagepool_2d_pads",
    "test_averagepool_2d_pads_count_include_pad",
    "test_averagepool_2d_same_lower",
    "test_averagepool_2d_same_upper",
    "test_averagepool_3d_default",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
    "test_averagepool_3d_dilations_small",
    "test_convtranspose_1d",
    "test_convtranspose_3d",
    "test_convtranspose_autopad_same",
    "test_convtranspose_kernel_shape",
    "test_convtranspose_output_shape",
    "test_gru_batchwise",
    "test_gru_bidirectional",
    "test_gru_defaults",
    "test_gru_reverse",
    "test_gru_seq_length",
    "test_gru_with_initial_bias",
    "test_if_opt",
    "test_if_seq",
    "test_loop11",
    "test_loop13_seq",
    "test_loop16_seq_none",
    "test_lstm_batchwise",
    "test_lstm_bidirectional",
    "test_lstm_defaults",
    "test_lstm_reverse",
    "test_lstm_with_initial_bias",
    "test_lstm_with_peepholes",
    "test_maxpool_2d_pads",
    "test_maxpool_2d_same_lower",
    "test_maxpool_2d_same_upper",
    "test_maxpool_3d_default",
    "test_maxpool_3d_dilations",
    "test_maxpool_3d_dilations_use_ref_impl",
    "test_maxpool_3d_dilations_use_ref_impl_large",
    "test_maxpool_with_argmax_2d_precomputed_strides",
    "test_reduce_log_sum_exp_empty_set",
    "test_reduce_max_empty_set",
    "test_reduce_max_empty_set_bool",
    "test_reduce_min_empty_set",
    "test_resize_downsample_scales_cubic",
    "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_downsample_scales_cubic_align_corners",
    "test_resize_downsample_scales_cubic_antialias",
    "test_resize_downsample_scales_linear",
    "test_resize_downsample_scales_linear_align_corners",
    "test_resize_downsample_scales_linear_antialias",
    "test_resize_downsample_scales_linear_half_pixel_symmetric",
    "test_resize_downsample_scales_nearest",
    "test_resize_downsample_sizes_cubic",
    "test_resize_downsample_sizes_cubic_antialias",
    "test_resize_downsample_sizes_linear_antialias",
    "test_resize_downsample_sizes_linear_pytorch_half_pixel",
    "test_resize_downsample_sizes_nearest",
    "test_resize_downsample_sizes_nearest_not_larger",
    "test_resize_downsample_sizes_nearest_not_smaller",
    "test_resize_tf_crop_and_resize",
    "test_resize_tf_crop_and_resize_axes_2_3",
    "test_resize_tf_crop_and_resize_axes_3_2",
    "test_resize_tf_crop_and_resize_extrapolation_value",
    "test_resize_upsample_scales_cubic",
    "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_upsample_scales_cubic_align_corners",
    "test_resize_upsample_scales_cubic_asymmetric",
    "test_resize_upsample_scales_linear",
    "test_resize_upsample_scales_linear_align_corners",
    "test_resize_upsample_scales_linear_half_pixel_symmetric",
    "test_resize_upsample_scales_nearest",
    "test_resize_upsample_scales_nearest_axes_2_3",
    "test_resize_upsample_scales_nearest_axes_3_2",
    "test_resize_upsample_sizes_cubic",
    "test_resize_upsample_sizes_nearest",
    "test_resize_upsample_sizes_nearest_axes_2_3",
    "test_resize_upsample_sizes_nearest_axes_3_2",
    "test_resize_upsample_sizes_nearest_ceil_half_pixel",
    "test_resize_upsample_sizes_nearest_floor_align_corners",
    "test_resize_upsample_sizes_nearest_not_larger",
    "test_resize_upsample_sizes_nearest_not_smaller",
    "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric",
    "test_rnn_seq_length",
    "test_scan_sum",
    "test_simple_rnn_batchwise",
    "test_simple_rnn_bidirectional",
    "test_simple_rnn_defaults",
    "test_simple_rnn_reverse",
    "test_simple_rnn_with_initial_bias",
}


@functools.cache
def _cases():
    return {c.name: c for c in conf.cases()}


@pytest.mark.parametrize("name", sorted(_cases()))
def test_case(name):
    if name in conf.failing():
        pytest.xfail(f"listed as failing ({conf.failing()[name]})")
    category, message = conf.run_case(_cases()[name])
    assert category == "pass", f"{name}: {category}: {message}"


def test_the_failing_list_is_short_and_spares_the_common_ops():
    failing = conf.failing()
    assert set(failing) <= set(_cases())
    assert len(_cases()) == 2033
    assert len(_cases()) - len(failing) >= FLOOR
    common = {n for n in failing if _cases()[n].op in COMMON}
    assert common <= COMMON_NOT_YET, sorted(common - COMMON_NOT_YET)


def test_failures_are_classified():
    assert conf.classify("m.onnx: node #0 (Foo): op type Foo is not supported by "
                         "dualgraph's ONNX import at the model's opsets") == "unsupported op"
    assert conf.classify("m.onnx: input 'x' has ONNX type UINT2, which dualgraph has no "
                         "dtype for") == "dtype"
    assert conf.classify("m.onnx: node #1 (Pad): asymmetric pads") == "refused"
