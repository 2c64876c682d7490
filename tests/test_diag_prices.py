"""benchmarks/diag_prices.py sorts the device's kernels and the planner's graph nodes into the
same kinds (names as torch.profiler reports them on an H200)."""

import torch

from benchmarks.diag_prices import kernel_kind, node_kind


def test_kernels_by_name():
    kinds = {
        "triton_poi_fused_native_layer_norm_backward_3": "pointwise",
        "triton_red_fused_sum_1": "reduction",
        "triton_per_fused__native_layer_norm_2": "reduction",
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopB_NNT": "matmul",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "matmul",
        "sm90_xmma_wgrad_implicit_gemm_indexed_bf16bf16_bf16f32_f32_nhwckrsc_nhwc": "conv",
        "void cudnn::engines_precompiled::conv2d_grouped_direct_kernel<float>": "conv",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>": "attention",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor>": "pointwise",
        "Memcpy DtoD (Device -> Device)": "pointwise",
    }
    assert {k: kernel_kind(k) for k in kinds} == kinds


def test_graph_nodes_by_target():
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    aten = torch.ops.aten
    nodes = {
        g.call_function(aten.mm.default, (x, w)): "matmul",
        g.call_function(
            aten.convolution.default, (x, w, None, [1], [0], [1], False, [0], 1)
        ): "conv",
        g.call_function(aten.sum.dim_IntList, (x, [0])): "reduction",
        g.call_function(aten.mul.Tensor, (x, w)): "pointwise",
    }
    assert {n.name: node_kind(n) for n in nodes} == {n.name: k for n, k in nodes.items()}
