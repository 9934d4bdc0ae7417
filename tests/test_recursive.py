"""Recursive DSA-MoE classifier: shapes, attention kernels, experts, gradients, traces, accounting."""
import dataclasses
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from helpers import rec_config
from itervision.evaluation import accounting
from itervision.evaluation.accounting import formula_sparsity
from itervision.evaluation.flops import count_flops
from itervision.models.recursive import EncoderClassifier, MoE, RecursiveAttention, RecursiveClassifier


def tiny(**kw):
    torch.manual_seed(0)
    return RecursiveClassifier(rec_config(**kw))


class _Call(torch.nn.Module):
    def __init__(self, fn, module):
        super().__init__()
        self.fn, self.module = fn, module

    def forward(self, x):
        return self.fn(x)


def traced_call(fn, module, x):
    """fn(x) run through torch.jit.trace, as fvcore runs a model (the code takes its traced path)."""
    with torch.no_grad():
        return torch.jit.trace(_Call(fn, module), x, check_trace=False)(x)


@pytest.mark.parametrize("attention,ffn", [("dense", "mlp"), ("dense", "moe"), ("dsa", "moe"), ("dsa", "mlp")])
def test_every_variant_gives_logits_at_every_step(attention, ffn):
    m = tiny(attention=attention, ffn=ffn)
    out = m(torch.randn(3, 1, 16, 16))
    assert len(out["logits"]) == 5 and all(t.shape == (3, 5) for t in out["logits"])
    assert out["aux_loss"].ndim == 0
    assert len(m(torch.randn(2, 1, 16, 16), exits=2)["logits"]) == 2


def test_keys_that_do_not_apply_are_none():
    cfg = rec_config(attention="dense", ffn="mlp", step_loss="mean")
    assert cfg.topk is None and cfg.dsa_kernel is None and cfg.experts is None and cfg.earlier_weight is None
    assert rec_config(attention="dsa", ffn="moe").mlp_ratio is None


def test_dsa_equals_dense_multi_query_attention_when_L_le_k():
    torch.manual_seed(0)
    att = RecursiveAttention(16, 2, "dsa", topk=6).eval()
    x = torch.randn(4, 5, 16)  # L = 5 <= k
    out, _ = att(x)
    q, k, v = att.qkv(x).split((16, 8, 8), -1)
    q = q.view(4, 5, 2, 8).transpose(1, 2)
    k, v = k[:, None], v[:, None]  # one shared head
    dense = F.scaled_dot_product_attention(q, k.expand(-1, 2, -1, -1), v.expand(-1, 2, -1, -1))
    ref = att.proj(dense.transpose(1, 2).reshape(4, 5, 16))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", ["masked", "gathered"])
def test_dsa_uses_exactly_k_keys_the_indexer_ranks_highest(kernel):
    torch.manual_seed(1)
    att = RecursiveAttention(16, 2, "dsa", topk=3, kernel=kernel).eval()
    x = torch.randn(2, 7, 16)
    trace = {}
    att(x, trace)
    attn = trace["attn"][0]  # B L L, head-averaged, zero off the selection
    assert ((attn > 0).sum(-1) == 3).all()
    q, k, _ = att.qkv(x).split((16, 8, 8), -1)
    index = q.view(2, 7, 2, 8).mean(2) @ k.transpose(-2, -1)
    expected = index.topk(3, -1).indices.sort(-1).values
    chosen = (attn > 0).nonzero()[:, 2].view(2, 7, 3).sort(-1).values
    assert torch.equal(chosen, expected)
    assert trace["masked_pairs"] == 2 * 7 * 4 and trace["total_pairs"] == 2 * 49


def test_masked_and_gathered_kernels_give_the_same_attention_and_gradients():
    torch.manual_seed(2)
    masked = RecursiveAttention(16, 2, "dsa", topk=3, kernel="masked").train()
    gathered = RecursiveAttention(16, 2, "dsa", topk=3, kernel="gathered").train()
    gathered.load_state_dict(masked.state_dict())
    x1 = torch.randn(3, 9, 16, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    (o1, a1), (o2, a2) = masked(x1), gathered(x2)
    torch.testing.assert_close(o1, o2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a1, a2)
    (o1.sum() + a1).backward()
    (o2.sum() + a2).backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    # traced (FLOP counting) and fused paths give the same output too
    m = tiny().eval()
    img = torch.randn(2, 1, 16, 16)
    traced = traced_call(lambda t: m(t)["logits"][-1], m, img)
    torch.testing.assert_close(traced, m(img)["logits"][-1], rtol=1e-4, atol=1e-5)


def test_measured_sparsity_equals_formula():
    for k in (2, 3, 6):
        m = tiny(attention="dsa", topk=k, steps=6).eval()
        measured = m(torch.randn(2, 1, 16, 16), trace=True)["trace"]["sparsity"]
        assert measured == pytest.approx(formula_sparsity(6, k), abs=1e-12)
    assert formula_sparsity(16, 6) == pytest.approx([0, 0, 0, 0] + [1 - 6 / L for L in range(7, 19)])
    assert sum(formula_sparsity(16, 6)) / 16 == pytest.approx(0.358, abs=5e-4)
    assert sum(formula_sparsity(16, 2)) / 16 == pytest.approx(0.751, abs=5e-4)


def test_moe_matches_a_hand_computed_mixture_of_its_top_m_experts():
    torch.manual_seed(0)
    moe = MoE(4, 4, experts=3, top=2)
    x = torch.randn(5, 4)
    out, _ = moe(x, {})
    probs = torch.softmax(moe.router(x), -1)
    for i in range(5):
        w, idx = probs[i].topk(2)
        w = w / w.sum()
        hand = sum(w[j] * (F.gelu(moe.w1[idx[j]] @ x[i] + moe.b1[idx[j]]) @ moe.w2[idx[j]] + moe.b2[idx[j]])
                   for j in range(2))
        torch.testing.assert_close(out[i], hand, rtol=1e-5, atol=1e-6)


def test_moe_batched_dispatch_equals_the_per_expert_products():
    """The padded batched matmul (training) and the exact per-expert path (under tracing) agree."""
    torch.manual_seed(3)
    moe = MoE(8, 8, experts=4, top=2)
    x = torch.randn(2, 11, 8)
    batched, balance = moe(x)
    torch.testing.assert_close(traced_call(lambda t: moe(t)[0], moe, x), batched, rtol=1e-5, atol=1e-6)
    counts = torch.bincount(moe.route(x.reshape(-1, 8))[2].flatten(), minlength=4)
    assert int(counts.sum()) == 2 * 11 * 2  # every token assigned to exactly m = 2 experts
    trace = {}
    moe(x, trace)
    assert trace["expert_counts"][0].tolist() == counts.float().tolist()  # counted on the device, no bincount


def test_moe_batched_dispatch_gradients_equal_the_per_expert_loop():
    """Gradients through the gathered, padded buffer equal those of a plain loop over experts."""
    torch.manual_seed(4)
    moe = MoE(8, 8, experts=4, top=2)
    x1 = torch.randn(3, 7, 8, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    out, _ = moe(x1)
    (out * torch.linspace(-1, 1, 8)).sum().backward()
    batched = [p.grad.clone() for p in moe.parameters()]
    moe.zero_grad()
    x2d = x2.reshape(-1, 8)
    probs, weight, idx = moe.route(x2d)
    ref = torch.zeros_like(x2d)
    for e in range(4):
        token, slot = (idx == e).nonzero(as_tuple=True)
        ref = ref.index_add(0, token, moe.expert(e, x2d[token]) * weight[token, slot, None])
    (ref * torch.linspace(-1, 1, 8)).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-6)
    for g, p in zip(batched, moe.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)


def test_encoder_convolutions_run_channels_last_on_one_channel_images():
    """A 1-channel image is contiguous in both layouts, so only channels_last weights make the convolutions
    (and the max-pool after them) run channels_last; it must survive a state_dict round trip."""
    m = tiny()
    m.load_state_dict({k: v.contiguous() for k, v in m.state_dict().items()})
    seen = []
    m.encoder.features[0].register_forward_hook(lambda mod, i, o: seen.append(o))
    m(torch.randn(2, 1, 16, 16))
    assert seen[0].is_contiguous(memory_format=torch.channels_last) and not seen[0].is_contiguous()


def test_balancing_loss_is_one_at_uniform_routing_and_larger_when_collapsed():
    moe = MoE(4, 3, experts=4, top=2)
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.bias.zero_()
    x = torch.randn(8, 4)
    # zero router: every probability 1/E; top-2 of ties picks experts 0,1 -> f uneven but P uniform: E*sum f/E = 1
    assert moe(x)[1].item() == pytest.approx(1.0)
    with torch.no_grad():
        moe.router.bias.copy_(torch.tensor([5.0, 4.0, -5.0, -5.0]))
    assert moe(x)[1].item() > 1.8  # collapsed on two experts: close to E * (0.5 * 0.5 + 0.5 * 0.5) = 2


def test_gradients_reach_indexer_router_experts_and_encoder():
    m = tiny(attention="dsa", ffn="moe", topk=2, steps=4)
    out = m(torch.randn(4, 1, 16, 16))
    loss = sum(F.cross_entropy(lg, torch.arange(4) % 5) for lg in out["logits"]) + out["aux_loss"]
    loss.backward()
    blk = m.blocks[0]
    for name, p in [("router", blk.ffn.router.weight), ("expert", blk.ffn.w1),
                    ("encoder", m.encoder.features[0].weight), ("class_embed", m.class_embed)]:
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    # the indexer has no weights of its own: its scores (head-averaged q . shared k) learn through the KL term
    m = RecursiveClassifier(dataclasses.replace(m.cfg, balance_weight=0.0))
    m(torch.randn(4, 1, 16, 16))["aux_loss"].backward()
    grad = m.blocks[0].attn.qkv.weight.grad
    assert grad[:16].abs().sum() > 0 and grad[16:24].abs().sum() > 0  # query and shared key rows


@pytest.mark.parametrize("embedding", ["hard", "soft"])
def test_prediction_embedding(embedding):
    m = tiny(embedding=embedding)
    logits = torch.tensor([[2.0, 0.5, 0.1, -1.0, 0.0]], requires_grad=True)
    y = m.embed_prediction(logits)
    p = torch.softmax(logits, -1)
    expected = m.class_embed[0] if embedding == "hard" else (p @ m.class_embed)[0]
    torch.testing.assert_close(y[0], expected.detach() if embedding == "hard" else expected)
    y.sum().backward()
    assert logits.grad.abs().sum() > 0  # hard: straight-through gradient


def test_exit_loss_weights():
    assert tiny(step_loss="mean").exit_loss_weights() == pytest.approx([0.2] * 5)
    assert tiny(step_loss="last_plus", earlier_weight=0.4).exit_loss_weights() == pytest.approx([0.1] * 4 + [1.0])


def test_accounting_against_hand_counts_on_a_tiny_config():
    cfg = rec_config(attention="dsa", ffn="moe")
    d, dh, C = 16, 8, 5
    # encoder: conv3x3 at 16, 8, 4 px, then projection
    enc = 16 * 16 * 1 * 4 * 9 + 8 * 8 * 4 * 8 * 9 + 4 * 4 * 8 * 8 * 9 + 8 * 16
    assert accounting.encoder_macs(cfg) == enc
    L = 6  # step 4: Q,O dense; one shared K/V head; indexer L*L*dh; k=3 keys per query; 2 of 3 experts d->d->d
    block = 2 * d * d * L + 2 * d * dh * L + L * L * dh + 2 * L * 3 * d + 2 * 2 * d * d * L + d * 3 * L
    assert sum(accounting.block_macs(cfg, L).values()) == block
    assert accounting.step_macs(cfg, 4) == 2 * block + 2 * d * C
    stored = sum(p.numel() for p in RecursiveClassifier(cfg).parameters())
    assert accounting.analytic_params(cfg)["stored"] == stored
    per_expert = 2 * d * d + 2 * d
    assert accounting.analytic_params(cfg)["active"] == stored - 2 * 1 * per_expert


def test_fvcore_matmul_count_equals_the_analytic_count():
    from itervision.evaluation.costs import model_costs

    for kw in (dict(attention="dense", ffn="mlp"), dict(attention="dsa", ffn="moe")):
        m = tiny(**kw)
        m.family = "recursive"
        c = model_costs(m)
        assert c["fvcore"]["matmul_vs_analytic"] == pytest.approx(1.0, rel=0.02)
    m = tiny()
    full = count_flops(m, torch.zeros(1, 1, 16, 16), exit_index=-1)["flops"]
    first = count_flops(m, torch.zeros(1, 1, 16, 16), exit_index=0)["flops"]
    assert first < full


def test_encoder_only_baseline_costs_and_shape():
    from itervision.evaluation.costs import model_costs
    from itervision.models.configs import EncoderConfig

    cfg = EncoderConfig(img_size=16, encoder_widths=(4, 8, 8), dim=16, num_classes=5, in_chans=1)
    m = EncoderClassifier(cfg)
    m.family = "encoder"
    assert m(torch.randn(3, 1, 16, 16))["logits"][0].shape == (3, 5) and m.num_exits == 1
    c = model_costs(m)
    assert c["macs_per_image"] == accounting.encoder_macs(cfg) + 16 * 5
    assert c["fvcore"]["matmul_vs_analytic"] == pytest.approx(1.0, rel=0.02)


def test_paper_configuration_reproduces_published_figures():
    base = dict(num_classes=10, in_chans=3, img_size=32, encoder_widths=[64, 128, 256], dim=512, heads=8, blocks=4,
                steps=16, topk=6, experts=4, experts_per_token=2, mlp_ratio=4.0)
    sa = rec_config(**base, attention="dense", ffn="mlp")
    dsa = rec_config(**base, attention="dsa", ffn="moe")
    assert accounting.analytic_params(sa)["stored"] == pytest.approx(13.13e6, rel=0.01)
    assert accounting.analytic_params(dsa)["active"] == pytest.approx(7.10e6, rel=0.01)
    assert accounting.block_mac_ratio(dsa) == pytest.approx(0.52, rel=0.01)
    assert accounting.average_sparsity(dsa) == pytest.approx(0.358, rel=0.01)
    assert accounting.average_sparsity(rec_config(**{**base, "topk": 2})) == pytest.approx(0.751, rel=0.01)
    # same formulas at another size: the built model agrees with the analytic count
    other = rec_config(**{**base, "dim": 96, "heads": 4, "blocks": 3, "encoder_widths": [8, 16, 32]},
                       attention="dsa", ffn="moe")
    built = RecursiveClassifier(other)
    assert accounting.analytic_params(other)["stored"] == sum(p.numel() for p in built.parameters())


def test_same_seed_same_model_and_outputs():
    x = torch.randn(2, 1, 16, 16)
    a, b = tiny().eval(), tiny().eval()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert all(torch.equal(u, v) for u, v in zip(a(x)["logits"], b(x)["logits"]))
    assert accounting.average_sparsity(rec_config(attention="dense")) == 0.0


def test_a_config_resolved_by_older_code_fails_with_a_one_line_fix():
    """A resolved config missing a key this code needs (or carrying one it does not know, or a value the schema
    refuses) is an error that says to regenerate configs/resolved, not a TypeError from the dataclass: a config
    read back from JSON is checked exactly like one from params.yaml."""
    from itervision.errors import UserError
    from itervision.models.registry import build_model, config_from_dict

    cfg = {"family": "recursive", **{k: v for k, v in dataclasses.asdict(rec_config()).items()
                                     if k not in ("num_classes", "in_chans")}}
    assert build_model(config_from_dict(cfg, 5, 1)).num_exits == 5
    stale = {k: v for k, v in cfg.items() if k != "experts"}
    with pytest.raises(UserError, match=r"lacks \['experts'\].*rerun `dvc repro configure`"):
        config_from_dict(stale, 5, 1)
    with pytest.raises(UserError, match=r"unknown keys \['width'\]"):
        config_from_dict({**cfg, "width": 3}, 5, 1)
    with pytest.raises(UserError, match="unknown model family 'vit'"):
        config_from_dict({**cfg, "family": "vit"}, 5, 1)
    with pytest.raises(UserError, match=r"topk' = 0 is out of range.*rerun `dvc repro configure`"):
        config_from_dict({**cfg, "topk": 0}, 5, 1)


def test_the_prediction_fed_back_matters_and_is_not_weight_decayed():
    """Issue 47: the class embeddings are unit-scale and exempt from weight decay, so y stays live beside the role
    embedding it is added to. With the role embeddings at a trained scale (std 1; they start at 0), feeding a
    wrong class instead of the true one changes the next step's logits by a large share of their size; at the
    old std 0.02 the y token is the role embedding alone and the class barely matters."""
    from itervision.engine.recipe import build_optimizer

    m = tiny().eval()
    img, y = torch.randn(16, 1, 16, 16), torch.arange(16) % 5
    with torch.no_grad():
        m.role.normal_()

    def change() -> float:
        with torch.no_grad():
            right = m(img, exits=2, y_given=y)["logits"][1]
            wrong = m(img, exits=2, y_given=(y + 1) % 5)["logits"][1]
        return float((right - wrong).norm() / right.norm())

    with torch.no_grad():
        assert torch.equal(m(img, exits=2)["logits"][0], m(img, exits=1)["logits"][0])  # step 1 reads no y
    live = change()
    with torch.no_grad():
        m.class_embed.mul_(0.02)
    dead = change()
    assert live > 0.2 and dead < live / 10, (live, dead)
    assert abs(float(m.class_embed.detach().std()) / 0.02 - 1.0) < 0.3  # unit-scale before the multiply
    opt = build_optimizer(m, SimpleNamespace(weight_decay=0.05, peak_lr=lambda: 1e-3))
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert id(m.class_embed) not in decayed and id(m.head.weight) in decayed
