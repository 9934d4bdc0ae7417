"""Statistics of the recursive-classifier document (seed 000) over seeds, from the run records alone.

Every model name comes from params (recursive.main, .ablations, .baseline, .reference and the ablation
lists); what a model is (its k, steps, embedding) comes from each run's own record.
"""
from __future__ import annotations

import numpy as np

from itervision.analysis.common import (budget, learning_curve, load_study, per_exit, run_overhead, series,
                                        top1, training_speed)
from itervision.params import Params
from itervision.pipeline import seeds_for
from itervision.stats import holm_fill, mcnemar, mean_ci, paired_difference

ABLATIONS = (("k_ablation", "topk"), ("depth_ablation", "steps"), ("embedding_ablation", "embedding"))


def _compare(runs, dataset, model, base, seeds, with_mcnemar=False) -> dict:
    out = paired_difference(series(runs, dataset, model, seeds, top1), series(runs, dataset, base, seeds, top1))
    if with_mcnemar:
        out["mcnemar"] = [mcnemar(runs[(dataset, model, s)]["pred"]["test"]["correct"][:, -1],
                                  runs[(dataset, base, s)]["pred"]["test"]["correct"][:, -1]) for s in seeds]
    return out


def _measured_sparsity(run: dict):
    tr = run["metrics"].get("traces")
    return float(np.mean(tr["sparsity"])) if tr else float("nan")


def aggregate(p: Params) -> dict:
    s = p.recursive
    runs, profiles = load_study(p, "recursive")
    main_seeds, abl_seeds = p.seeds, p.ablation_seeds
    abl_ds = s.ablation_datasets[0] if s.ablation_datasets else s.datasets[0]
    ds0 = s.datasets[0]
    out = {"seeds": main_seeds, "ablation_seeds": abl_seeds, "datasets": s.datasets, "baseline": s.baseline,
           "reference": s.reference, "ablation_dataset": abl_ds}

    # 1. accuracy by dataset and variant, differences to the baseline (Holm over the whole table)
    acc, comps = {}, []
    for ds in s.datasets:
        for m in s.main:
            values = series(runs, ds, m, main_seeds, top1)
            acc.setdefault(ds, {})[m] = {"top1": mean_ci(values), "per_seed": values}
            if m != s.baseline:
                c = _compare(runs, ds, m, s.baseline, main_seeds, with_mcnemar=True)
                comps.append({**c, "dataset": ds, "model": m, "against": s.baseline})
    out["accuracy"], out["accuracy_differences"] = acc, holm_fill(comps)

    # 2. efficiency: costs (the same for every seed) and measured training speed (timing)
    base_sec = series(runs, ds0, s.baseline, main_seeds, lambda r: r["train"]["seconds"] / r["train"]["images_seen"])
    eff = {}
    for m in s.main:
        costs = profiles[(ds0, m)]["costs"]
        sec = series(runs, ds0, m, main_seeds, lambda r: r["train"]["seconds"] / r["train"]["images_seen"])
        eff[m] = {"family": costs["family"], "stored_params": costs["stored_params"],
                  "active_params": costs["active_params"], "block_mac_ratio": costs.get("block_mac_ratio"),
                  "avg_sparsity_formula": costs.get("avg_sparsity"),
                  "avg_sparsity_measured": mean_ci(series(runs, ds0, m, main_seeds, _measured_sparsity)),
                  "macs_per_image": costs["macs_per_image"], "speed": training_speed(runs, ds0, m, main_seeds),
                  "time_ratio_to_baseline": mean_ci(np.array(sec) / np.array(base_sec))}
    out["efficiency"] = eff

    # 3.-5. ablations on the ablation dataset and seeds, each compared with the reference model
    for name, key in ABLATIONS:
        rows, comps = [], []
        for m in getattr(s, name):
            r0 = runs[(abl_ds, m, abl_seeds[0])]
            costs = profiles[(abl_ds, m)]["costs"]
            row = {"model": m, key: r0["config"]["config"][key],
                   "top1": mean_ci(series(runs, abl_ds, m, abl_seeds, top1)),
                   "avg_sparsity_formula": costs.get("avg_sparsity"),
                   "avg_sparsity_measured": mean_ci(series(runs, abl_ds, m, abl_seeds, _measured_sparsity)),
                   "macs_per_image": costs["macs_per_image"]}
            if m != s.reference:
                row["difference"] = {**_compare(runs, abl_ds, m, s.reference, abl_seeds), "model": m,
                                     "against": s.reference}
                comps.append(row["difference"])
            rows.append(row)
        holm_fill(comps)
        out[name] = rows

    # 4b. accuracy at every step, every variant (main models on the main seeds, ablations on theirs)
    out["per_step"] = {m: {"dataset": ds, "seeds": seeds_for(p, m), "top1": per_exit(runs, ds, m, seeds_for(p, m))}
                       for m in s.main + s.ablations for ds in [ds0 if m in s.main else abl_ds]}

    # 6. interpretability traces of the reference model
    traces = [runs[(ds0, s.reference, sd)]["metrics"]["traces"] for sd in main_seeds]
    steps = len(traces[0]["role_mass"])
    out["traces"] = {
        "model": s.reference,
        "sparsity_measured": [mean_ci([t["sparsity"][i] for t in traces]) for i in range(steps)],
        "expert_utilisation": np.mean([t["expert_utilisation"] for t in traces], axis=0).tolist()
        if traces[0]["expert_utilisation"] else [],
        "role_mass": {role: [mean_ci([t["role_mass"][i][role] for t in traces]) for i in range(steps)]
                      for role in ("x", "y", "z")},
    }

    # learning curves and the training budget of every model
    out["curves"], out["budgets"] = {}, {}
    for m in s.main + s.ablations:
        ds, seeds = (ds0 if m in s.main else abl_ds), seeds_for(p, m)
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
        out[c["dataset"]][c["model"]][f"diff_vs_{c['against']}"] = {"mean": c["mean"], "ci95": c["half_width"],
                                                                      "p_holm": c["p_holm"]}
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
