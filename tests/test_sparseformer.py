"""SparseFormer units, static and recurrent models, early exit and cost."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers import sf_config
from itervision.errors import UserError
from itervision.evaluation.early_exit import early_exit, early_exit_model, exit_index, sweep
from itervision.evaluation.flops import count_flops
from itervision.models.configs import SparseFormerConfig
from itervision.models.sparseformer import (RecurrentSparseFormer, adjust_boxes, sample_features, sampling_points,
                                            tiling_boxes)

# the published configurations (seed document 003): ImageNet-200 at 192 px, ImageNet-100 at 160 px
PAPER = dict(img_size=192, stem_channels=96, stem_kernel=7, stem_stride=2, stem_pool=True, rounds=[9, 16, 25],
             points=36, focus_dim=192, focus_heads=6, focus_iters=4, cortex_dim=384, cortex_heads=6, cortex_depth=5,
             cortex_first_samples=True, mlp_ratio=4.0, memory=True, memory_at=0, memory_heads=6, drop_path=0.2,
             earlier_weight=0.1)


def tiny(**kw):
    torch.manual_seed(0)
    return RecurrentSparseFormer(sf_config(**kw))


def test_sampling_points_are_centred_on_the_box_with_a_third_of_its_size_as_spread():
    torch.manual_seed(0)
    boxes = torch.tensor([[[0.3, 0.6, 0.2, 0.4]]])  # cx, cy, w, h
    pts = sampling_points(boxes, torch.randn(1, 1, 36, 2))
    torch.testing.assert_close(pts.mean(2)[0, 0], torch.tensor([0.3, 0.6]))
    torch.testing.assert_close(pts.std(2, unbiased=False)[0, 0], torch.tensor([0.2, 0.4]) / 3, rtol=1e-4, atol=1e-6)


def test_grid_sample_read_equals_hand_bilinear():
    fmap = torch.arange(2 * 4 * 5, dtype=torch.float32).view(1, 2, 4, 5)
    x, y = 0.37, 0.61  # normalised image coordinates
    out = sample_features(fmap, torch.tensor([[[[x, y]]]]))
    # align_corners=False: pixel centres at (i + 0.5) / W
    px, py = x * 5 - 0.5, y * 4 - 0.5
    x0, y0 = math.floor(px), math.floor(py)
    fx, fy = px - x0, py - y0
    for c in range(2):
        f = fmap[0, c]
        hand = ((1 - fx) * (1 - fy) * f[y0, x0] + fx * (1 - fy) * f[y0, x0 + 1] + (1 - fx) * fy * f[y0 + 1, x0]
                + fx * fy * f[y0 + 1, x0 + 1])
        assert out[0, 0, 0, c].item() == pytest.approx(hand.item(), rel=1e-5)


def test_stem_equals_conv_relu_pool_layernorm_in_that_order():
    m = tiny(img_size=28, stem_stride=1)
    img = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        ref = F.max_pool2d(F.relu(F.conv2d(img, m.stem.conv.weight, m.stem.conv.bias, padding=m.cfg.stem_kernel // 2)),
                           3, 2, 1)
        ref = F.layer_norm(ref.permute(0, 2, 3, 1), ref.shape[1:2]).permute(0, 3, 1, 2)
        out = m.stem(img)
    assert out.shape == (4, m.cfg.stem_channels, 14, 14) and (ref < 0).any()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_box_adjusting_is_the_identity_at_init_and_tiling_is_non_overlapping():
    m = tiny()
    boxes = tiling_boxes(9)
    assert boxes[:, 2:].eq(1 / 3).all() and torch.allclose(boxes[:, 0].view(3, 3)[0], torch.tensor([1, 3, 5.]) / 6)
    blk = m.focus
    q = blk.norm_query(torch.randn(1, 9, 8))
    torch.testing.assert_close(adjust_boxes(boxes[None], blk.box_delta(q)), boxes[None])
    shifted = adjust_boxes(boxes[None], torch.tensor([0.5, 0.0, math.log(2), 0.0]).expand(1, 9, 4))
    torch.testing.assert_close(shifted[0, 0], torch.tensor([1 / 6 + 0.5 / 3, 1 / 6, 2 / 3, 1 / 3]))


def test_static_model_equals_a_recurrent_model_with_one_round():
    x = torch.randn(2, 1, 28, 28)
    static = tiny(rounds=[4], memory=False).eval()
    one_round = tiny(rounds=[4], memory=True).eval()  # one round: nothing to remember
    assert one_round.memory is None
    torch.testing.assert_close(static(x)["logits"][0], one_round(x)["logits"][0])


def test_without_memory_a_round_does_not_depend_on_earlier_rounds():
    m = tiny(memory=False).eval()
    x = torch.randn(2, 1, 28, 28)
    base = m(x)["logits"]
    with torch.no_grad():
        m.token_embed[0].add_(5.0)  # change only round 1
    changed = m(x)["logits"]
    assert not torch.allclose(base[0], changed[0])
    torch.testing.assert_close(base[1], changed[1])
    torch.testing.assert_close(base[2], changed[2])


def test_memory_scalar_zero_equals_the_no_memory_model():
    x = torch.randn(2, 1, 28, 28)
    with_mem, no_mem = tiny(memory=True).eval(), tiny(memory=False).eval()
    no_mem.load_state_dict({k: v for k, v in with_mem.state_dict().items() if not k.startswith("memory.")})
    assert not torch.allclose(with_mem(x)["logits"][2], no_mem(x)["logits"][2])
    with torch.no_grad():
        with_mem.memory.scale.zero_()
    for a, b in zip(with_mem(x)["logits"], no_mem(x)["logits"]):
        torch.testing.assert_close(a, b)


def test_exit_shapes_and_loss_weights():
    m = tiny()
    out = m(torch.randn(3, 1, 28, 28))
    assert [t.shape for t in out["logits"]] == [(3, 4)] * 3
    assert m.exit_loss_weights() == pytest.approx([0.05, 0.05, 1.0])
    assert len(m(torch.randn(3, 1, 28, 28), exits=2)["logits"]) == 2
    assert tiny(rounds=[4], memory=False).exit_loss_weights() == [1.0]


def test_small_images_work():
    m = tiny(img_size=28, stem_stride=2)
    assert m(torch.randn(1, 1, 28, 28))["logits"][-1].shape == (1, 4)


def test_gradients_reach_boxes_offsets_mixing_generator_and_memory():
    m = tiny()
    with torch.no_grad():  # move off the zero init so every path carries signal
        for blk in (m.focus, m.cortex[0]):
            blk.box_delta.weight.normal_(0, 0.1)
            blk.mixing.generator[1].weight.normal_(0, 0.01)
    out = m(torch.randn(4, 1, 28, 28))
    sum(F.cross_entropy(lg, torch.arange(4)) for lg in out["logits"]).backward()
    for name, p in [("boxes", m.token_boxes[1]), ("offsets", m.focus.offsets.weight),
                    ("generator", m.focus.mixing.generator[1].weight), ("memory", m.memory.attn.q.weight),
                    ("memory scale", m.memory.scale), ("box encoding", m.memory.box_encoding.weight)]:
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert "token_boxes.0" in m.no_weight_decay()


def test_early_exit_stops_at_the_first_confident_round():
    probs = np.array([[0.9, 0.95, 0.99], [0.3, 0.8, 0.6], [0.1, 0.2, 0.3]])
    pred = np.array([[1, 1, 1], [0, 2, 2], [3, 3, 0]])
    assert exit_index(probs, 0.7).tolist() == [0, 1, 2]
    p, idx = early_exit(pred, probs, 0.7)
    assert p.tolist() == [1, 2, 0] and idx.tolist() == [0, 1, 2]
    rows = sweep(pred, probs, np.array([1, 2, 3]), [1.0, 3.0, 6.0], thresholds=[0.0, 0.7, 1.01])
    assert rows[0] == {"threshold": 0.0, "accuracy": 2 / 3, "mean_cost": 1.0, "exit_histogram": [3, 0, 0]}
    assert rows[1]["mean_cost"] == pytest.approx((1 + 3 + 6) / 3) and rows[1]["accuracy"] == pytest.approx(2 / 3)
    assert rows[2]["exit_histogram"] == [0, 0, 3]


def test_early_exit_on_a_model_with_constructed_probabilities():
    class Fixed(torch.nn.Module):
        def forward(self, img):
            b = img.shape[0]
            return {"logits": [torch.log(torch.tensor([[0.6, 0.4]] * b)), torch.log(torch.tensor([[0.1, 0.9]] * b))]}

    pred, idx = early_exit_model(Fixed(), torch.zeros(2, 1), threshold=0.5)
    assert pred.tolist() == [0, 0] and idx.tolist() == [0, 0]
    pred, idx = early_exit_model(Fixed(), torch.zeros(2, 1), threshold=0.7)
    assert pred.tolist() == [1, 1] and idx.tolist() == [1, 1]


def hand_count(cfg: SparseFormerConfig, rounds: int) -> int:
    """What fvcore's convention counts: multiply-adds of convs, linears and matmuls, 4 per bilinear sample
    (fvcore's grid_sampler handle), 5 per element of an affine layer norm (4 without affine); the baddbmm
    mixing products are not counted."""
    H = W = cfg.img_size // cfg.stem_stride
    total = H * W * cfg.stem_channels * cfg.in_chans * cfg.stem_kernel ** 2
    H, W = (H + 1) // 2, (W + 1) // 2
    total += H * W * cfg.stem_channels * 4  # parameter-free layer norm over channels: 4 per element
    C, P = cfg.stem_channels, cfg.points

    def attn(n, d):
        return 4 * n * d * d + 2 * n * n * d

    def sampling_block(n, d):
        hidden = int(d * cfg.mlp_ratio)
        return (attn(n, d) + n * d * 4 + n * d * 2 * P + n * d * (d // 4) + n * (d // 4) * (C * C + P * P)
                + n * P * C * d + n * 2 * d * hidden + 3 * 5 * n * d  # 3 layer norms
                + 4 * n * P * C)  # bilinear sampling

    for r in range(rounds):
        n = cfg.rounds[r]
        total += cfg.focus_iters * sampling_block(n, cfg.focus_dim)
        total += n * cfg.focus_dim * cfg.cortex_dim + 5 * n * cfg.cortex_dim
        if r > 0 and cfg.memory:
            m, d = cfg.rounds[r - 1], cfg.cortex_dim
            total += 4 * (n + m) * d + 5 * (n + m + m) * d  # box encodings, 3 layer norms
            total += n * d * d + 2 * m * d * d + n * m * d * 2 + n * d * d  # q, k, v, scores, values, proj
        total += sampling_block(n, cfg.cortex_dim)
        for _ in range(cfg.cortex_depth - 1):
            total += attn(n, cfg.cortex_dim) + 2 * n * cfg.cortex_dim * int(cfg.cortex_dim * cfg.mlp_ratio) \
                + 2 * 5 * n * cfg.cortex_dim
        total += 5 * cfg.cortex_dim + cfg.cortex_dim * cfg.num_classes  # head LN + linear
    return total


def test_cost_of_each_exit_against_a_hand_count():
    cfg = sf_config(stem_stride=1)
    m = RecurrentSparseFormer(cfg)
    img = torch.zeros(1, 1, 28, 28)
    for e in range(3):
        got = count_flops(m, img, e)["flops"]
        assert got == pytest.approx(hand_count(cfg, e + 1), rel=0.01), e
    complete = count_flops(m, img, 0, complete=True)["flops"]
    n, C, P = cfg.rounds[0], cfg.stem_channels, cfg.points
    mixing = (cfg.focus_iters + 1) * n * (P * C * C + P * P * C)  # the baddbmm products fvcore skips
    assert complete - count_flops(m, img, 0)["flops"] == pytest.approx(mixing, rel=1e-6)


@pytest.mark.slow
def test_paper_configurations_match_published_gflops():
    img200, img100 = torch.zeros(1, 3, 192, 192), torch.zeros(1, 3, 160, 160)
    in200 = dict(num_classes=200, img_size=192, cortex_depth=5)
    in100 = dict(num_classes=100, img_size=160, cortex_depth=3, cortex_first_samples=False)
    checks = [(in200, (16,), img200, [0.419]), (in200, (25,), img200, [0.583]),
              (in200, (9, 16, 25), img200, [0.292, 0.589, 1.054]),
              (in100, (9,), img100, [0.199]), (in100, (49,), img100, [0.688]),
              (in100, (9, 16, 25), img100, [0.199, 0.399, 0.715])]
    for kw, rounds, img, published in checks:
        m = RecurrentSparseFormer(sf_config(**{**PAPER, **kw, "rounds": list(rounds)}, in_chans=3))
        for e, g in enumerate(published):
            assert count_flops(m, img, e)["flops"] / 1e9 == pytest.approx(g, rel=0.01), (kw, rounds, e)


def test_same_seed_same_outputs():
    x = torch.randn(2, 1, 28, 28)
    a, b = tiny().eval(), tiny().eval()
    assert all(torch.equal(u, v) for u, v in zip(a(x)["logits"], b(x)["logits"]))


def test_bad_config_is_rejected():
    with pytest.raises(UserError, match="rounds.*perfect square"):
        sf_config(rounds=[10])
    with pytest.raises(UserError, match="memory_at 3 must index a cortex block"):
        sf_config(cortex_depth=2, memory_at=3)
    assert sf_config(memory=False).memory_at is None and sf_config(rounds=[9]).earlier_weight is None
    assert isinstance(sf_config(), SparseFormerConfig)


def test_interleaved_inference_times_every_exit_of_every_model_in_each_round():
    """Stage timing_sparseformer's measurement (engine/interleaved.py): each round times every exit of every model
    (throughput on the batch, median latency on one image), so per model there is one row per round and one figure
    per exit; a model with more exits pays more for its last one than for its first."""
    from itervision.engine.interleaved import interleaved_inference

    models = {"static": sf_config(rounds=[9], memory=False), "recurrent": sf_config(rounds=[4, 9, 16], memory=True)}
    cfg = models["static"]
    out = interleaved_inference(models, (cfg.in_chans, cfg.img_size), batch=8, rounds=3, latency_repeats=3)
    assert set(out) == {"static", "recurrent"}
    for name, exits in (("static", 1), ("recurrent", 3)):
        for key in ("latency_ms", "images_per_s"):
            rows = out[name][key]
            assert len(rows) == 3 and all(len(r) == exits and all(v > 0 for v in r) for r in rows)
    first, last = np.median([r[0] for r in out["recurrent"]["latency_ms"]]), \
        np.median([r[-1] for r in out["recurrent"]["latency_ms"]])
    assert last > first  # three rounds of the recurrent model cost more than one
