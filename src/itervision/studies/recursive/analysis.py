"""Statistics of the recursive-classifier document (seed 000) over seeds, from the run records alone.

Every model name comes from params (recursive.main, .ablations, .baseline, .reference and the ablation
lists); what a model is (its k, steps, embedding) comes from each run's own record.
"""
from __future__ import annotations

import numpy as np

from itervision.config.matrix import common_seeds, seeds_for
from itervision.config.params import Params, model_config
from itervision.config.scales import SYNTHETIC_SCALES
from itervision.io import read_json_file
from itervision.studies.common import (budget, early_exit_summary, environments, interleaved_file, learning_curve,
                                       load_study, only_settled, per_exit, run_overhead, series, shared_cost_range,
                                       tested_setting, top1, training_speed)
from itervision.stats import mcnemar, mean_ci, paired_difference

ABLATIONS = (("k_ablation", "topk"), ("depth_ablation", "steps"), ("embedding_ablation", "embedding"))


def _compare(runs, dataset, model, base, seeds, with_mcnemar=False) -> dict:
    """model - base, paired over `seeds`; tagged with what make settle needs to add seeds to it."""
    out = paired_difference(series(runs, dataset, model, seeds, top1), series(runs, dataset, base, seeds, top1))
    out["paired"] = {"dataset": dataset, "models": [model, base], "seeds": list(seeds)}
    if with_mcnemar:
        out["mcnemar"] = [mcnemar(runs[(dataset, model, s)]["pred"]["test"]["correct"][:, -1],
                                  runs[(dataset, base, s)]["pred"]["test"]["correct"][:, -1]) for s in seeds]
    return out


def _measured_sparsity(run: dict):
    tr = run["metrics"].get("traces")
    return float(np.mean(tr["sparsity"])) if tr else float("nan")


def accuracy(p: Params, runs: dict) -> tuple[dict, list]:
    """Table 1: top-1 by dataset and main model; paired differences to the baseline (Holm-adjusted by the claims
    ledger, over every test of the document)."""
    s = p.study("recursive")
    acc, comps = {}, []
    for ds in s.datasets:
        for m in s.main:
            values = series(runs, ds, m, p.seeds, top1)
            acc.setdefault(ds, {})[m] = {"top1": mean_ci(values), "per_seed": values}
            if m != s.baseline:
                c = _compare(runs, ds, m, s.baseline, common_seeds(p, ds, m, s.baseline), with_mcnemar=True)
                comps.append({**c, "dataset": ds, "model": m, "against": s.baseline,
                              "test_id": test_id(ds, m, s.baseline)})
    return acc, comps


def efficiency(p: Params, runs: dict, profiles: dict) -> dict:
    """Table 2: costs (the same for every seed) and measured training speed (timing) on the first dataset."""
    s = p.study("recursive")
    ds0 = s.datasets[0]

    def seconds_per_image(r):
        return r["train"]["seconds"] / r["train"]["images_seen"]

    base_sec = series(runs, ds0, s.baseline, p.seeds, seconds_per_image)
    path = interleaved_file("recursive")
    interleaved = read_json_file(path, "regenerate it with `dvc repro timing_recursive`") if path.exists() else {}
    eff = {}
    for m in s.main:
        costs = profiles[(ds0, m)]["costs"]
        sec = series(runs, ds0, m, p.seeds, seconds_per_image)
        eff[m] = {"family": costs["family"], "stored_params": costs["stored_params"],
                  "active_params": costs["active_params"], "block_mac_ratio": costs.get("block_mac_ratio"),
                  "avg_sparsity_formula": costs.get("avg_sparsity"),
                  "avg_sparsity_measured": mean_ci(series(runs, ds0, m, p.seeds, _measured_sparsity)),
                  "macs_per_image": costs["macs_per_image"], "speed": training_speed(runs, ds0, m, p.seeds),
                  "time_ratio_to_baseline": mean_ci(np.array(sec) / np.array(base_sec)),
                  "time_ratio_per_seed": (np.array(sec) / np.array(base_sec)).tolist(),
                  # the interleaved measurement (stage timing_recursive): per round of chunks in one process
                  "time_ratio_interleaved": (interleaved.get("ratio") or {}).get(m) if m != s.baseline else None,
                  "interleaved": {k: interleaved.get(k) for k in ("chunk_steps", "rounds", "skipped")}
                  if interleaved else None,
                  "moe_kernel": model_config(p, m, ds0).get("moe_kernel") if costs["family"] != "encoder" else None}
    return eff


def ablation(p: Params, runs: dict, profiles: dict, name: str, key: str) -> list:
    """Tables 3-5: one ablation list on the ablation dataset and seeds, each row against the reference model."""
    s = p.study("recursive")
    ds, seeds = ablation_dataset(p), p.ablation_seeds
    rows = []
    for m in getattr(s, name):
        costs = profiles[(ds, m)]["costs"]
        row = {"model": m, key: runs[(ds, m, seeds[0])]["config"]["config"][key],
               "top1": mean_ci(series(runs, ds, m, seeds, top1)),
               "avg_sparsity_formula": costs.get("avg_sparsity"),
               "avg_sparsity_measured": mean_ci(series(runs, ds, m, seeds, _measured_sparsity)),
               "macs_per_image": costs["macs_per_image"]}
        if m != s.reference:
            pair = common_seeds(p, ds, m, s.reference)
            row["difference"] = {**_compare(runs, ds, m, s.reference, pair), "model": m, "against": s.reference,
                                 "test_id": test_id(ds, m, s.reference)}
        rows.append(row)
    return rows


def traces(p: Params, runs: dict) -> dict:
    """Table 6: the reference model's traces per step (sparsity, expert shares, attention mass per role)."""
    s = p.study("recursive")
    per_seed = [runs[(s.datasets[0], s.reference, sd)]["metrics"]["traces"] for sd in p.seeds]
    steps = len(per_seed[0]["role_mass"])
    return {
        "model": s.reference,
        "sparsity_measured": [mean_ci([t["sparsity"][i] for t in per_seed]) for i in range(steps)],
        "expert_utilisation": np.mean([t["expert_utilisation"] for t in per_seed], axis=0).tolist()
        if per_seed[0]["expert_utilisation"] else [],
        "role_mass": {role: [mean_ci([t["role_mass"][i][role] for t in per_seed]) for i in range(steps)]
                      for role in ("x", "y", "z")},
        # the feedback probe (evaluation/predict.py): last-step top-1 with own / true / wrong y fed back
        "feedback": {k: mean_ci([t["feedback"][k] for t in per_seed]) for k in ("own", "true_y", "wrong_y")}
        if all("feedback" in t for t in per_seed) else {},
    }


def exit_metrics(p: Params, runs: dict, profiles: dict) -> dict:
    """The early-exit quantities of every main model with several exits (steps): oracle, overthinking,
    calibration per step, accuracy at fractions of the costliest main model's cost, area under the frontier."""
    s = p.study("recursive")
    ds0 = s.datasets[0]
    costs = {m: profiles[(ds0, m)]["costs"]["gflops_per_exit"] for m in s.main}
    stepped = [m for m in s.main if len(costs[m]) > 1]
    if not stepped:
        return {}
    costliest = max(stepped, key=lambda m: costs[m][-1])
    span = shared_cost_range(runs, ds0, [(m, p.seeds) for m in stepped], costs)
    return {m: early_exit_summary(runs, ds0, m, p.seeds, costs[m], costs[costliest][-1], span, costliest)
            for m in stepped}


def extra_comparisons(p: Params, runs: dict) -> dict:
    """Paired comparisons the claims ledger tests beyond the tables (main seeds): DSA-MoE against SA-MoE, and the
    reference against its one-pass control (what recursion adds over one step)."""
    s = p.study("recursive")
    out, ds0 = {}, s.datasets[0]
    if "sa-moe" in s.main and s.reference != "sa-moe":
        out["reference_vs_sa-moe"] = {"model": s.reference, "against": "sa-moe", **_compare(
            runs, ds0, s.reference, "sa-moe", common_seeds(p, ds0, s.reference, "sa-moe")),
            "test_id": test_id(ds0, s.reference, "sa-moe")}
    if s.one_pass:
        out["reference_vs_one_pass"] = {"model": s.reference, "against": s.one_pass, **_compare(
            runs, ds0, s.reference, s.one_pass, common_seeds(p, ds0, s.reference, s.one_pass)),
            "test_id": test_id(ds0, s.reference, s.one_pass)}
    return out


def test_id(dataset: str, model: str, against: str) -> str:
    """The name of a paired comparison in the document's Holm family (ledger.py): one comparison, one test."""
    return f"{dataset}: {model} - {against}"


def ablation_dataset(p: Params) -> str:
    s = p.study("recursive")
    return s.ablation_datasets[0] if s.ablation_datasets else s.datasets[0]


def aggregate(p: Params) -> dict:
    runs, profiles = load_study(p, "recursive")
    return only_settled(p, lambda q: _aggregate(q, runs, profiles))


def _aggregate(p: Params, runs: dict, profiles: dict) -> dict:
    s = p.study("recursive")
    ds0 = s.datasets[0]

    def home(m):  # where a model's per-step, curve and budget figures come from
        return (ds0 if m in s.main else ablation_dataset(p)), seeds_for(p, m)

    out = {"seeds": p.seeds, "ablation_seeds": p.ablation_seeds, "datasets": s.datasets, "baseline": s.baseline,
           "reference": s.reference, "ablation_dataset": ablation_dataset(p)}
    cfg = runs[(ds0, s.reference, p.seeds[0])]["config"]["config"]
    out["setting"] = tested_setting(runs, ds0, s.reference, p.seeds, f"d {cfg['dim']}, {cfg['blocks']} blocks, "
                                    f"{cfg['steps']} steps", synthetic=p.scale in SYNTHETIC_SCALES)
    out["accuracy"], out["accuracy_differences"] = accuracy(p, runs)
    out["efficiency"] = efficiency(p, runs, profiles)
    for name, key in ABLATIONS:
        out[name] = ablation(p, runs, profiles, name, key)
    out["traces"] = traces(p, runs)
    out["environments"] = environments(runs)
    out["early_exit_metrics"] = exit_metrics(p, runs, profiles)
    out["extra_comparisons"] = extra_comparisons(p, runs)
    out["per_step"], out["curves"], out["budgets"] = {}, {}, {}
    for m in s.main + s.ablations:
        ds, seeds = home(m)
        out["per_step"][m] = {"dataset": ds, "seeds": seeds, "top1": per_exit(runs, ds, m, seeds)}
        out["curves"][m] = learning_curve(runs, ds, m, seeds)
        out["budgets"][m] = budget(runs, ds, m, seeds)
    return out


def summary_metrics(agg: dict) -> dict:
    """Nested dict that `dvc metrics show` flattens into keys like fashion_mnist.dsa-moe.top1.mean."""
    out = {}
    for ds, models in agg["accuracy"].items():
        for m, v in models.items():
            out.setdefault(ds, {})[m] = {"top1": {"mean": v["top1"]["mean"], "ci95": v["top1"]["half_width"],
                                                  "n": v["top1"]["n"]}}
    for c in agg["accuracy_differences"]:
        out[c["dataset"]][c["model"]][f"diff_vs_{c['against']}"] = {"mean": c["mean"], "ci95": c["half_width"]}
    for m, e in agg["efficiency"].items():
        out.setdefault("costs", {})[m] = {"active_params": e["active_params"], "macs_per_image": e["macs_per_image"],
                                          **({"block_mac_ratio": e["block_mac_ratio"]}
                                             if e["block_mac_ratio"] is not None else {})}
    for name, _ in ABLATIONS:
        for row in agg[name]:
            out.setdefault(name, {})[row["model"]] = {"top1": {"mean": row["top1"]["mean"],
                                                               "ci95": row["top1"]["half_width"],
                                                               "n": row["top1"]["n"]}}
    return out


def timing_metrics(agg: dict) -> dict:
    """Wall-clock figures: they change from run to run and machine to machine, so they live apart from the
    gated metrics."""
    return {"training": {m: {"images_per_s": e["speed"]["images_per_s"]["mean"],
                             "seconds_per_run": e["speed"]["seconds"]["mean"],
                             "time_ratio_to_baseline": e["time_ratio_to_baseline"]["mean"],
                             **run_overhead(e["speed"])}
                         for m, e in agg["efficiency"].items()}}
