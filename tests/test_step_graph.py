"""A training step reads nothing back from the device and compiles as one graph, for every model family; the
MoE dispatch equals a loop over experts; op counts at the paper configuration (issue: GPU speed)."""
import contextlib

import pytest
import torch

from helpers import rec_config, sf_config
from itervision.engine.opcount import OpCounter, fake_step, step_ops, training_step
from itervision.models.configs import EncoderConfig
from itervision.models.recursive import MoE
from itervision.models.registry import build_model

VARIANTS = {
    "sa-mlp": lambda: rec_config(attention="dense", ffn="mlp"),
    "sa-moe": lambda: rec_config(attention="dense", ffn="moe"),
    "dsa-moe": lambda: rec_config(attention="dsa", ffn="moe"),
    "dsa-moe-grouped": lambda: rec_config(attention="dsa", ffn="moe", moe_kernel="grouped"),
    "dsa-moe-gathered-soft": lambda: rec_config(attention="dsa", ffn="moe", dsa_kernel="gathered", embedding="soft"),
    "encoder-only": lambda: EncoderConfig(img_size=16, encoder_widths=(4, 8, 8), dim=16, num_classes=5, in_chans=1),
    "sf-recurrent": lambda: sf_config(),
    "sf-static": lambda: sf_config(rounds=[4], memory=False),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_step_has_no_data_dependent_host_read(name):
    """FakeTensorMode: tensors without data, so an op whose output shape depends on values (bincount, nonzero,
    .item()) raises; the op counter: no `_local_scalar_dense` (a tensor read back to a Python number)."""
    torch.manual_seed(0)
    model = build_model(VARIANTS[name]())
    # torch._grouped_mm's fake kernel takes bf16 only (as on CUDA): the grouped kernel's step under the paper
    # scale's bf16 autocast
    with torch.autocast("cpu", dtype=torch.bfloat16) if "grouped" in name else contextlib.nullcontext():
        fake_step(model)
    cfg = model.cfg
    with OpCounter() as counter:
        training_step(model.train(), torch.randn(3, cfg.in_chans, cfg.img_size, cfg.img_size), cfg.num_classes)
        with torch.no_grad():
            model.eval()(torch.randn(3, cfg.in_chans, cfg.img_size, cfg.img_size))
    assert counter.ops["aten._local_scalar_dense"] == 0, name
    assert sum(counter.ops.values()) > 50


def test_the_checks_catch_a_host_read():
    """The two checks fail on what they exist to catch: a bincount (FakeTensorMode) and an .item()."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with pytest.raises(Exception), FakeTensorMode(allow_non_fake_inputs=True):
        torch.bincount(torch.randint(0, 4, (10,)))
    with OpCounter() as counter:
        torch.randn(3).sum().item()
    assert counter.ops["aten._local_scalar_dense"] == 1


@pytest.mark.parametrize("name", ["dsa-moe", "sf-recurrent"])
def test_every_model_compiles_as_one_graph(name):
    """torch.compile(fullgraph=True) raises on a graph break (a host read, an unsupported op); dynamo's tracing
    alone (the eager backend) checks that without minutes of code generation."""
    torch.manual_seed(0)
    model = build_model(VARIANTS[name]())
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    cfg = model.cfg
    img = torch.randn(3, cfg.in_chans, cfg.img_size, cfg.img_size)
    out = compiled(img)
    torch.testing.assert_close(out["logits"][-1], model(img)["logits"][-1])


def loop_over_experts(moe, x2d):
    """The reference: each expert on exactly its routed tokens, weighted, summed (reads the routing to the host)."""
    _, weight, idx = moe.route(x2d)
    ref = torch.zeros_like(x2d)
    for e in range(moe.num_experts):
        token, slot = (idx == e).nonzero(as_tuple=True)
        ref = ref.index_add(0, token, (torch.nn.functional.gelu(x2d[token] @ moe.w1[e].t() + moe.b1[e]) @ moe.w2[e]
                                        + moe.b2[e]) * weight[token, slot, None])
    return ref


@pytest.mark.parametrize("kernel", ["dense", "grouped"])
def test_moe_equals_the_loop_over_experts_forward_and_gradients(kernel, monkeypatch):
    """Both kernels against a plain loop over experts, fp32, 1e-5; each runs its own path (the other is
    disabled)."""
    other = {"dense": "_grouped", "grouped": "_dense"}[kernel]
    monkeypatch.setattr(MoE, other, lambda *a: pytest.fail(f"{kernel} ran {other}"))
    torch.manual_seed(4)
    moe = MoE(8, 8, experts=4, top=2, kernel=kernel)
    x1 = torch.randn(3, 7, 8, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    w = torch.linspace(-1, 1, 8)
    out, _ = moe(x1)
    (out * w).sum().backward()
    grads = [p.grad.clone() for p in moe.parameters()]
    moe.zero_grad()
    ref = loop_over_experts(moe, x2.reshape(-1, 8))
    torch.testing.assert_close(out.reshape(-1, 8), ref, rtol=1e-5, atol=1e-5)
    (ref * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    for g, p in zip(grads, moe.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-5)


def test_grouped_moe_in_bf16_is_within_its_rounding_of_the_dense_kernel():
    """Under bf16 autocast (the paper scale's precision) the grouped kernel equals the dense one within bf16
    rounding: max absolute difference <= 0.05 at outputs up to ~2 (bf16 keeps 8 bits of mantissa, a relative step
    of 2^-8 = 0.004 per rounding, and the two kernels round at different places). Both route alike (the router
    runs under the same autocast; against an fp32 reference a near-tie token may pick another expert). An expert
    that gets no token (an empty group) is fine."""
    torch.manual_seed(5)
    moe = MoE(64, 64, experts=8, top=2, kernel="grouped")
    x = torch.randn(300, 64)
    outs = {}
    for kernel in ("grouped", "dense"):
        moe.kernel = kernel
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outs[kernel] = moe(x)[0].float()
    assert outs["grouped"].abs().max() > 0.5
    err = (outs["grouped"] - outs["dense"]).abs().max().item()
    assert 0 < err <= 0.05, err  # 0 would mean the same code ran twice
    moe.kernel = "grouped"
    with torch.no_grad():  # every token to experts 0 and 1: six empty groups
        moe.router.bias[:] = torch.tensor([50.0, 40.0] + [0.0] * 6)
    out, _ = moe(x)
    torch.testing.assert_close(out, loop_over_experts(moe, x), rtol=1e-5, atol=1e-5)


def test_op_counts_at_the_paper_configuration():
    """Dispatcher-level ops of one training step (batch 4) at the paper configuration. Measured with this code:
    sa-mlp 8,529, dsa-moe 15,461 (1.81x; the issue's 1.2x target is NOT met, see the closing note). The bound
    keeps what was gained from being lost: 19,213 / 11,004 = 1.75x before, with 2 host reads per step in every
    recursive model (F.one_hot) and 192 in dsa-moe."""
    from itervision.config.matrix import model_spec
    from itervision.config.params import check_params
    from itervision.config.scales import render_scale

    p = check_params(render_scale("paper"))
    counts = {}
    for m in ("sa-mlp", "dsa-moe"):
        torch.manual_seed(0)
        ops = step_ops(build_model(model_spec(p, m, "cifar10").config), 4)
        assert ops["aten._local_scalar_dense"] == 0 and ops["aten.bincount"] == 0, m
        counts[m] = sum(ops.values())
    assert counts["sa-mlp"] < 11_004 and counts["dsa-moe"] < 19_213
    assert counts["dsa-moe"] / counts["sa-mlp"] < 1.9
