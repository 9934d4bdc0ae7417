"""Recursive DSA-MoE classifier: shapes, attention, experts, gradients, traces, accounting."""
import math

import pytest
import torch
import torch.nn.functional as F

from itervision.evaluation import accounting
from itervision.evaluation.flops import count_flops
from itervision.models.recursive import MoE, RecursiveAttention, RecursiveClassifier, RecursiveConfig, formula_sparsity

TINY = dict(num_classes=5, in_chans=1, img_size=16, encoder_widths=(4, 8, 8), dim=16, heads=2, blocks=2, steps=5,
            topk=3, experts=3, experts_per_token=2, mlp_ratio=2.0)


def tiny(**kw):
    torch.manual_seed(0)
    return RecursiveClassifier(RecursiveConfig(**{**TINY, **kw}))


@pytest.mark.parametrize("attention,ffn", [("dense", "mlp"), ("dense", "moe"), ("dsa", "moe"), ("dsa", "mlp")])
def test_every_variant_gives_logits_at_every_step(attention, ffn):
    m = tiny(attention=attention, ffn=ffn)
    out = m(torch.randn(3, 1, 16, 16))
    assert len(out["logits"]) == 5 and all(t.shape == (3, 5) for t in out["logits"])
    assert out["aux_loss"].ndim == 0
    assert len(m(torch.randn(2, 1, 16, 16), steps=2)["logits"]) == 2


def test_dsa_equals_dense_multi_query_attention_when_L_le_k():
    torch.manual_seed(0)
    att = RecursiveAttention(16, 2, "dsa", topk=6).eval()
    x = torch.randn(4, 5, 16)  # L = 5 <= k
    out, _ = att(x)
    q = att.q(x).view(4, 5, 2, 8).transpose(1, 2)
    k, v = att.k(x)[:, None], att.v(x)[:, None]  # one shared head
    dense = F.scaled_dot_product_attention(q, k.expand(-1, 2, -1, -1), v.expand(-1, 2, -1, -1))
    ref = att.proj(dense.transpose(1, 2).reshape(4, 5, 16))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_dsa_uses_exactly_k_keys_the_indexer_ranks_highest():
    torch.manual_seed(1)
    att = RecursiveAttention(16, 2, "dsa", topk=3).eval()
    x = torch.randn(2, 7, 16)
    trace = {}
    att(x, trace)
    attn = trace["attn"][0]  # B L L, head-averaged, zero off the selection
    assert ((attn > 0).sum(-1) == 3).all()
    q = att.q(x).view(2, 7, 2, 8).mean(2)
    index = q @ att.k(x).transpose(-2, -1)
    expected = index.topk(3, -1).indices.sort(-1).values
    chosen = (attn > 0).nonzero()[:, 2].view(2, 7, 3).sort(-1).values
    assert torch.equal(chosen, expected)
    assert trace["masked_pairs"] == 2 * 7 * 4 and trace["total_pairs"] == 2 * 49


def test_measured_sparsity_equals_formula():
    for k in (2, 3, 6):
        m = tiny(attention="dsa", topk=k, steps=6).eval()
        measured = m(torch.randn(2, 1, 16, 16), trace=True)["trace"]["sparsity"]
        assert measured == pytest.approx(formula_sparsity(6, k), abs=1e-12)
    assert formula_sparsity(16, 6) == pytest.approx([0, 0, 0, 0] + [1 - 6 / L for L in range(7, 19)])
    assert sum(formula_sparsity(16, 6)) / 16 == pytest.approx(0.358, abs=5e-4)
    assert sum(formula_sparsity(16, 2)) / 16 == pytest.approx(0.751, abs=5e-4)


def test_moe_uses_m_experts_and_matches_a_hand_computed_mixture():
    torch.manual_seed(0)
    moe = MoE(4, 3, experts=3, top=2)
    x = torch.randn(5, 4)
    trace = {}
    out, _ = moe(x, trace)
    used = trace["experts_used"][0]
    assert used.shape == (5, 2) and all(len(set(r.tolist())) == 2 for r in used)
    probs = torch.softmax(moe.router(x), -1)
    for i in range(5):
        w, idx = probs[i].topk(2)
        w = w / w.sum()
        hand = sum(w[j] * moe.experts[int(idx[j])](x[i]) for j in range(2))
        torch.testing.assert_close(out[i], hand, rtol=1e-5, atol=1e-6)


def test_moe_runs_only_the_selected_experts(monkeypatch):
    moe = MoE(4, 3, experts=4, top=1)
    seen = []
    for e, expert in enumerate(moe.experts):
        orig = expert.forward
        monkeypatch.setattr(expert, "forward", lambda t, e=e, orig=orig: (seen.append((e, t.shape[0])), orig(t))[1])
    x = torch.randn(10, 4)
    _, idx = moe.route(x)[1:]
    moe(x)
    counts = torch.bincount(idx.flatten(), minlength=4)
    assert sum(n for _, n in seen) == 10  # each token computed by exactly one expert, not all four
    assert {e: n for e, n in seen} == {e: int(c) for e, c in enumerate(counts) if c > 0}


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
    loss = sum(F.cross_entropy(l, torch.arange(4) % 5) for l in out["logits"]) + out["aux_loss"]
    loss.backward()
    blk = m.blocks[0]
    for name, p in [("router", blk.ffn.router.weight), ("expert", blk.ffn.experts[0].fc1.weight),
                    ("encoder", m.encoder.features[0].weight), ("class_embed", m.class_embed)]:
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    # the indexer has no weights of its own: its scores (head-averaged q . shared k) learn through the KL term
    m.zero_grad()
    m.cfg.balance_weight = 0.0
    out = m(torch.randn(4, 1, 16, 16))
    out["aux_loss"].backward()
    assert blk.attn.q.weight.grad.abs().sum() > 0 and blk.attn.k.weight.grad.abs().sum() > 0


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


def test_accounting_against_hand_counts_on_a_tiny_config():
    cfg = RecursiveConfig(**{**TINY, "attention": "dsa", "ffn": "moe"})
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
        c = model_costs(tiny(**kw))
        assert c["fvcore"]["matmul_vs_analytic"] == pytest.approx(1.0, rel=0.02)
    m = tiny()
    full = count_flops(m, torch.zeros(1, 1, 16, 16), exit_index=-1)["flops"]
    first = count_flops(m, torch.zeros(1, 1, 16, 16), exit_index=0)["flops"]
    assert first < full


def test_paper_configuration_reproduces_published_figures():
    base = dict(num_classes=10, in_chans=3, img_size=32, encoder_widths=(64, 128, 256), dim=512, heads=8, blocks=4,
                steps=16, topk=6, experts=4, experts_per_token=2)
    sa = RecursiveConfig(**base, attention="dense", ffn="mlp")
    dsa = RecursiveConfig(**base, attention="dsa", ffn="moe")
    assert accounting.analytic_params(sa)["stored"] == pytest.approx(13.13e6, rel=0.01)
    assert accounting.analytic_params(dsa)["active"] == pytest.approx(7.10e6, rel=0.01)
    assert accounting.block_mac_ratio(dsa) == pytest.approx(0.52, rel=0.01)
    assert accounting.average_sparsity(dsa) == pytest.approx(0.358, rel=0.01)
    assert accounting.average_sparsity(RecursiveConfig(**{**base, "topk": 2})) == pytest.approx(0.751, rel=0.01)
    # same formulas at another size: the built model agrees with the analytic count
    other = RecursiveConfig(**{**base, "dim": 96, "heads": 4, "blocks": 3, "encoder_widths": (8, 16, 32)},
                            attention="dsa", ffn="moe")
    assert accounting.analytic_params(other)["stored"] == sum(p.numel() for p in RecursiveClassifier(other).parameters())


def test_same_seed_same_model_and_outputs():
    x = torch.randn(2, 1, 16, 16)
    a, b = tiny().eval(), tiny().eval()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert all(torch.equal(u, v) for u, v in zip(a(x)["logits"], b(x)["logits"]))


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="attention"):
        RecursiveConfig(attention="sparse")
    with pytest.raises(ValueError, match="divisible"):
        RecursiveConfig(dim=10, heads=3)
    assert math.isclose(accounting.average_sparsity(RecursiveConfig(attention="dense")), 0.0)
