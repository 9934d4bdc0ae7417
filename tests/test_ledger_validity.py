"""Ledger validity, round 2 (issue 47): every proxy verdict rests on a check of its mechanism where the claim acts,
accounting is classed by what was chosen to match, failures are data, settle seeds serve only the settled test,
and the forest plot draws every tested row."""
import csv
import json

import numpy as np
import pytest

from helpers import ROOT
from itervision.claims.judge import assess
from itervision.claims.model import differenced, quantity
from itervision.stats import paired_difference

PROXY = {"fidelity": "proxy"}
SEEDS = [84.0, 85.0, 86.0, 85.5, 84.5]


def stat(v):
    return {"mean": v, "half_width": 0.1, "n": 5}


def sparseformer_agg(rounds_top1: list, calib_round1: float = 0.85) -> dict:
    """The parts of a SparseFormer aggregate the checks read: a recurrent model of three rounds and its static
    models, top-1 per exit on test and on calib (fractions)."""
    rec = {"tokens": [9, 16, 25], "top1": [stat(v) for v in rounds_top1],
           "top1_calib": [stat(calib_round1), stat(0.86), stat(0.86)]}
    static = {f"sf-static-{t}": {"tokens": [t], "top1": [stat(0.86)], "top1_calib": [stat(0.86)]} for t in (9, 16, 25)}
    return {"recurrent": "sf-recurrent", "static": list(static),
            "datasets": {"fashion_mnist": {"models": {"sf-recurrent": rec, **static}}}}


def test_a_row_about_later_rounds_whose_rounds_are_flat_is_not_exercised():
    from itervision.studies.sparseformer.claims import LATER, checks

    flat = checks(sparseformer_agg([0.8486, 0.8531, 0.8491]))
    assert flat["rounds_add"]["ok"] is False and "+0.05 points" in flat["rounds_add"]["figure"]
    assert flat["round1_trained"]["ok"] and "calib" in flat["round1_trained"]["figure"]
    rising = checks(sparseformer_agg([0.80, 0.83, 0.86]))
    assert rising["rounds_add"]["ok"] is True
    saving = quantity("s", "sparseformer", "early exit saves 38 %", refs=[], published=0.38,
                      per_seed=[0.75, 0.8, 0.78, 0.79, 0.81], null=0.0, unit="fraction", test_id="saving", test="t",
                      needs=LATER, **PROXY)
    (entry,), _ = assess([saving], {}, {"sparseformer": flat})
    assert entry.results["verdict"] == "not exercised at the proxy" and "round 3" in entry.results["reason"]
    (entry,), _ = assess([saving], {}, {"sparseformer": rising})
    assert entry.results["verdict"].startswith("holds at the proxy")


def test_the_trained_round_check_reads_the_calibration_split_not_the_rows_estimate():
    from itervision.studies.sparseformer.claims import checks

    agg = sparseformer_agg([0.80, 0.83, 0.86], calib_round1=0.80)  # 6 points behind static-9 on calib
    agg["datasets"]["fashion_mnist"]["models"]["sf-recurrent"]["top1"][0] = stat(0.86)  # level on test
    assert checks(agg)["round1_trained"]["ok"] is False


def recursive_agg(sparsity: list, steps_top1: list, feedback=(0.86, 0.87, 0.80)) -> dict:
    return {"reference": "dsa-moe", "per_step": {"dsa-moe": {"top1": [stat(v) for v in steps_top1]}},
            "traces": {"sparsity_measured": [stat(v) for v in sparsity],
                       "feedback": dict(zip(("own", "true_y", "wrong_y"), (stat(v) for v in feedback)))}}


def test_a_dsa_row_whose_answer_is_fixed_at_a_dense_step_is_not_exercised():
    from itervision.studies.recursive.claims import DSA, checks

    sparsity = [0, 0, 0.2, 0.33, 0.43, 0.5, 0.56, 0.6]
    fixed = checks(recursive_agg(sparsity, [0.8620, 0.8622] + [0.8623] * 6))
    assert fixed["dsa_sparse"]["ok"] and not fixed["dsa_decides"]["ok"], fixed
    assert "dense at steps 1-2" in fixed["dsa_decides"]["figure"]
    deciding = checks(recursive_agg(sparsity, [0.80, 0.81, 0.82, 0.83, 0.84, 0.85, 0.86, 0.86]))
    assert deciding["dsa_decides"]["ok"]
    assert checks(recursive_agg([0.3] * 8, [0.86] * 8))["dsa_decides"]["ok"]  # sparse from step 1
    gap = differenced("g", "recursive", "DSA-MoE beats SA-MoE", refs=[], published=None,
                      diff=paired_difference([s + 1 for s in SEEDS], SEEDS), test_id="g", test="t", direction=1,
                      needs=DSA, **PROXY)
    (entry,), _ = assess([gap], {}, {"recursive": fixed})
    assert entry.results["verdict"] == "not exercised at the proxy" and "dense" in entry.results["reason"]


def test_the_feedback_check_reads_the_probe():
    from itervision.studies.recursive.claims import checks

    assert checks(recursive_agg([0.3] * 8, [0.86] * 8, (0.86, 0.87, 0.80)))["feedback_live"]["ok"]
    dead = checks(recursive_agg([0.3] * 8, [0.86] * 8, (0.86, 0.861, 0.858)))["feedback_live"]
    assert not dead["ok"] and "+0.20 points" in dead["figure"]


def test_failures_are_data_a_target_reached_in_one_seed_is_tested_on_all_five():
    from itervision.studies.sparseformer.claims import failures_as_data

    values, note = failures_as_data([0.5, float("nan"), float("nan"), float("nan"), float("nan")])
    assert values == [0.5, 0.0, 0.0, 0.0, 0.0]
    assert "reached in 1 of 5 seeds" in note and "0.375" in note  # scipy binomtest(1, 5): 0.375
    q = quantity("q", "sparseformer", "saves 38 %", refs=[], published=0.38, per_seed=values, null=0.0,
                 unit="fraction", test_id="q", test="t", **PROXY)
    assert q.estimate["n"] == 5


def test_power_is_planned_at_the_holm_level():
    from itervision.claims.judge import holm_level, seeds_range
    from itervision.stats.power import seeds_needed

    rng = np.random.default_rng(0)
    claims = [differenced(f"c{i}", "doc", "A beats B by 1", refs=[], published=1.0,
                          diff=paired_difference(list(rng.normal(0.006, 0.01, 5) + 0.8), [0.8] * 5), test_id=f"t{i}",
                          test="t", **PROXY) for i in range(10)]
    entries, fam = assess(claims)
    e = entries[0]
    assert e.results["family_size"] == 20  # 10 direction and 10 size tests
    assert holm_level(e) == pytest.approx(0.05 / 20)
    s = seeds_range(e)
    sd = e.first.estimate["sd"]
    assert s["point"] == seeds_needed(1.0, sd, alpha=0.0025) > s["at_05"] == seeds_needed(1.0, sd)


def test_settle_seeds_serve_only_the_settled_test():
    """only_settled: every comparison reads the base seeds except the settled test's own, which reads its settle
    seeds too; the other row of the same models keeps its original n."""
    import dataclasses

    from itervision.config.matrix import common_seeds
    from itervision.config.params import check_params
    from itervision.config.scales import render_scale
    from itervision.studies.common import only_settled

    p = check_params(render_scale("cpu", ROOT))
    settled_id = "fashion_mnist: dsa-moe - sa-mlp"
    p = dataclasses.replace(p, settle_claims={settled_id: {"study": "recursive"}},
                            settle_runs={("fashion_mnist", "dsa-moe"): [5, 6], ("fashion_mnist", "sa-mlp"): [5, 6]})

    def build(q):
        return {"margin": {"test_id": settled_id, "seeds": common_seeds(q, "fashion_mnist", "dsa-moe", "sa-mlp")},
                "other": [{"test_id": "fashion_mnist: sa-mlp - dsa-moe (another row)",
                           "seeds": common_seeds(q, "fashion_mnist", "sa-mlp", "dsa-moe")}]}

    agg = only_settled(p, build)
    assert agg["margin"]["seeds"] == [0, 1, 2, 3, 4, 5, 6]
    assert agg["other"][0]["seeds"] == [0, 1, 2, 3, 4]


def test_a_fitted_choice_is_recorded_beside_it_and_makes_its_rows_consistency():
    """data/reference/fitted.csv names a setting of the paper scale with its value as configured there, and the
    paper scale's file comments it as fitted; the claims builder classes that dataset's GFLOPs rows consistency."""
    import yaml

    from itervision.studies.sparseformer.claims import fitted_choices

    paper = yaml.safe_load((ROOT / "configs/scales/paper.yaml").read_text())
    with open(ROOT / "data/reference/fitted.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for r in rows:
        node = paper
        for key in r["setting"].split("."):
            node = node[key]
        assert str(node).lower() == r["value"].lower(), r
        assert "FITTED" in (ROOT / "configs/scales/paper.yaml").read_text()
    assert set(fitted_choices()) == {r["dataset"] for r in rows if r["document"] == "sparseformer"}


@pytest.mark.slow
def test_the_built_ledger_classes_fitted_accounting_and_counts_one_computation_once(built_repo):
    ledger = json.loads((built_repo / "metrics/ledger.json").read_text())
    gflops = [e for e in ledger["documents"]["sparseformer"]["entries"] if e["kind"] == "accounting"]
    by_dataset = {}
    for e in gflops:
        by_dataset.setdefault(e["reference"].split("/")[0], set()).add(e["fidelity"])
    assert by_dataset["imagenet100"] == {"consistency"} and by_dataset["imagenet200"] == {"independent"}
    shared = [e for e in gflops if "imagenet100/static-9" in e["reference"]]
    assert len(shared) == 1 and "imagenet100/recurrent exit 1" in shared[0]["reference"]


@pytest.mark.slow
def test_the_forest_plot_lists_every_tested_row(built_repo):
    ledger = json.loads((built_repo / "metrics/ledger.json").read_text())
    tested = [e["test_id"] for d in ledger["documents"].values() for e in d["entries"]
              if e["kind"] == "statistical" and e.get("plot") and e["plot"].get("mean") is not None
              and e["plot"].get("half_width") is not None]
    assert tested and ledger["forest"]["rows"] == tested
    png = built_repo / ledger["forest"]["path"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
