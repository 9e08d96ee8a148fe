"""The device-timeline summary that `--profile-steps` adds to its table: kinds, idle time and the
communication that computation did not hide, on hand-made traces whose answers are known."""

import json

from envkit.train.watching.trace_breakdown import breakdown, kind_of, main, render, top_kernels


def k(name, ts, dur, stream=7, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur}


def test_kinds_from_real_kernel_names():
    assert kind_of(k("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 0, 1)) == "communication"
    assert kind_of(k("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", 0, 1)) == "matmul"
    assert kind_of(k("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN", 0, 1)) == "matmul"
    assert kind_of(k("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>, true>", 0, 1)) == "attention"
    assert kind_of(k("triton_per_fused__log_softmax_nll_loss_forward_0", 0, 1)) == "fused (Inductor)"
    assert kind_of(k("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", 0, 1)) == "optimizer"
    assert kind_of(k("void at::native::embedding_backward_feature_kernel<float, float, long>", 0, 1)) == "embedding"
    assert kind_of(k("Memcpy HtoD (Pinned -> Device)", 0, 1, cat="gpu_memcpy")) == "copies"
    assert kind_of(k("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", 0, 1)) == "other kernels"


def test_idle_and_exposed_communication():
    # compute 0-40 and 50-90 on one stream; an all-reduce 30-60 on another: 10 of its 30 us are
    # not under any compute kernel (40-50), and nothing runs 90-100 before the last copy
    trace = {"traceEvents": [
        k("sm90_xmma_gemm_bf16", 0, 40), k("triton_poi_fused_add_0", 50, 40),
        k("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30, 30, stream=20),
        k("Memcpy DtoH (Device -> Pinned)", 100, 5, cat="gpu_memcpy"),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500},  # host events are not device time
    ]}
    s = breakdown(trace, steps=1)
    assert s["window_ms"] == 105e-3
    assert abs(s["busy_ms"] - 95e-3) < 1e-12 and abs(s["idle_ms"] - 10e-3) < 1e-12
    assert abs(s["communication_ms"] - 30e-3) < 1e-12
    assert abs(s["communication_exposed_ms"] - 10e-3) < 1e-12
    assert list(s["kinds_ms"]) == ["matmul", "fused (Inductor)", "communication", "copies"]
    text = render(s, top_kernels(trace))
    assert "idle 0.01 ms (9.5%" in text and "not overlapped with computation 0.01 ms" in text
    assert top_kernels(trace)[0][:2] == ("matmul", "sm90_xmma_gemm_bf16")


def test_fully_hidden_communication_and_cpu_trace(tmp_path, capsys):
    trace = [k("gemm", 0, 100), k("ncclKernel_AllReduce", 10, 50, stream=9)]
    assert breakdown(trace)["communication_exposed_ms"] == 0
    assert breakdown({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]}) is None
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": trace}))
    assert main([str(p)]) == 0
    assert "communication 0.05 ms, of which not overlapped with computation 0.00 ms" in capsys.readouterr().out


def test_where_the_device_sat_idle_and_how_many_compiled_graphs_a_step_ran():
    """What found the two-GPU loss on 2 x H200: the longest stretches with nothing on the device (and
    the kernel that ended each), and the compiled graphs called a step (DDP split one graph into 14)."""
    def compiled(ts):
        return {"ph": "X", "cat": "cpu_op", "name": "CompiledFunction", "ts": ts, "dur": 1}

    kernels = [k("gemm", 1000, 40), k("triton_poi_fused_add_0", 1050, 40), k("Memcpy DtoH (Device -> Pinned)", 1120, 5, cat="gpu_memcpy")]
    one = breakdown({"traceEvents": kernels + [compiled(0), compiled(500)]}, steps=2)
    gaps = one["longest_idle"]
    assert [(round(at * 1e3), round(length * 1e3), name) for at, length, name in gaps] == [
        (90, 30, "Memcpy DtoH (Device -> Pinned)"), (40, 10, "triton_poi_fused_add_0")]
    text = render(one)
    assert "compiled graphs called: 1 a step\n" in text + "\n" and "DDP splitting" not in text
    assert "longest idle stretches: 0.03 ms at 0.09 ms, before Memcpy DtoH" in text
    split = breakdown({"traceEvents": kernels + [compiled(t) for t in range(0, 2800, 100)]}, steps=2)
    assert "compiled graphs called: 14 a step (more than one a step: graph breaks, or DDP splitting" in render(split)
