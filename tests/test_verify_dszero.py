"""DeepSpeed ZeRO's optimizer step on the simulated device: the bytes its temporaries add, against DeepSpeed's code."""

from __future__ import annotations

import pytest

from tests.sim_states import step_bytes

torch = pytest.importorskip("torch")

WORLD = 4
SCALAR_SLACK = 4096  # the step's few scalars (norms, the total norm), 512 bytes each


def _run(**params):
    from oomdoctor.verify.workload import Ctx, Transformer, transformer

    base = {"layers": 2, "width": 128, "heads": 4, "vocab": 1024, "seq_len": 32, "batch": 2, "dtype": "bfloat16",
            "master_weights": True, "world_size": WORLD, **params}
    trainable = []

    def build(device):
        from oomdoctor.verify.params import TransformerParams

        p = TransformerParams.model_validate(base)  # the parameters as this rank holds them, counted on meta
        model = Transformer(Ctx(p, torch.device("meta")))
        trainable.extend(-(-q.numel() // WORLD) if p.zero_stage < 3 else q.numel()
                         for q in model.parameters() if q.requires_grad)
        return transformer(base, device)
    start, peak = step_bytes(build)
    return start, peak, trainable


def _partition(numels: list[int]) -> int:
    """Elements of this rank's flat partition: its 1/N of every trainable parameter (at stage 3 the shards the model
    holds; its norms stay whole there)."""
    return sum(numels)


@pytest.mark.parametrize("stage", [1, 2])
def test_zero12_step_adds_the_flat_16bit_copy_and_its_fp32_upcast(stage):
    # stage_1_and_2.py step(): flatten(averaged_gradients) (2 bytes/element), .to(fp32) (4), then the flat copy and the
    # 16-bit gradients are freed and FusedAdam updates in place: the peak is 6 bytes per partition element
    start, peak, numels = _run(zero_stage=stage, optimizer="adamw_fused")
    p = _partition(numels)
    assert peak - start == pytest.approx(6 * p, abs=SCALAR_SLACK)


def test_zero3_step_with_torch_adamw_adds_the_fp32_gradient_and_adamws_temporary():
    # stage3.py: the 16-bit gradients stay in grad_partitions_flat_buffer, so the fp32 sub-group gradient (4 bytes) and
    # torch AdamW's sqrt(v) (4 bytes) are live together: 8 bytes per partition element
    start, peak, numels = _run(zero_stage=3, optimizer="adamw")
    assert peak - start == pytest.approx(8 * _partition(numels), abs=SCALAR_SLACK)


def test_the_gradient_norm_copies_each_gradient_to_fp64():
    # get_grad_norm_direct: vector_norm(g.double()) per gradient; with one tied embedding holding almost every
    # parameter its 8-byte copy outgrows the flatten-and-upcast (6 bytes per element of the whole partition)
    start, peak, numels = _run(zero_stage=2, optimizer="adamw_fused", layers=1, width=64, vocab=50304,
                               tie_embeddings=True)
    largest = max(numels)
    assert 8 * largest > 6 * _partition(numels)
    assert peak - start == pytest.approx(8 * largest, abs=len(numels) * 512 + SCALAR_SLACK)


def test_zero_states_are_one_flat_fp32_tensor_each():
    # single_partition_of_fp32_groups and FusedAdam's zeros_like moments: three allocations of the whole partition
    from oomdoctor.verify import simgpu
    from oomdoctor.verify.dszero import DeepSpeedStep

    simgpu.setup()
    from torch._subclasses.fake_tensor import FakeTensorMode

    tracker = simgpu.StorageTracker()
    with FakeTensorMode(allow_non_fake_inputs=True), tracker:
        params = [torch.empty(1000, dtype=torch.bfloat16, device="simgpu") for _ in range(3)]
        ds = DeepSpeedStep(params, lambda q: q.numel(), 2, True, torch.device("simgpu"))
        before = len([e for e in tracker.trace if e[0] == "a"])
        ds.init_state()
    sizes = [e[2] for e in tracker.trace if e[0] == "a"][before:]
    assert sizes == [12_288, 12_288, 12_288]  # 3,000 fp32 elements, rounded up to 512 bytes
