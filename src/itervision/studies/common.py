"""What the studies' analyses share: reading every expected run once (naming every broken one), learning
curves over seeds, and the training budget each model had."""
from __future__ import annotations

import numpy as np

from itervision.errors import UserError
from itervision.config.matrix import expected_runs, study_models
from itervision.config.params import Params
from itervision.runs import RunRecord, load_all, load_profile
from itervision.stats import mean_ci

NAN = float("nan")


def interleaved_file(study: str):
    """metrics/STUDY/timing_interleaved.json: stage timing_STUDY's interleaved training-time measurement."""
    from pathlib import Path

    return Path("metrics") / study / "timing_interleaved.json"


def only_settled(p: Params, build):
    """An aggregate whose settle seeds serve only the tests they were added for (docs/settle.md): build(q) over the
    params without settle runs (every model on its base seeds), then, where make settle added seeds, each settled
    test's own comparison from build(p) (the base seeds plus its settle seeds). No other row's seeds grow after a
    look."""
    import dataclasses

    from itervision.stats.inference import tagged

    base = build(dataclasses.replace(p, settle_runs={}))
    if not p.settle_runs:
        return base
    settled = {n["test_id"]: n for n in tagged(build(p)) if n["test_id"] in p.settle_claims}
    for node in list(tagged(base)):
        if node["test_id"] in settled:
            new = settled[node["test_id"]]
            node.clear()
            node.update(new)
    return base


def load_study(p: Params, study: str) -> tuple[dict, dict]:
    """({(dataset, model, seed): run}, {(dataset, model): profile}) for every run params say exists.

    A run is {"config", "train", "metrics", "pred", "record"}: its own record of how it was trained and what
    it predicted. All seeds of a model must share one configuration (else the paired statistics are void)."""
    records = expected_runs(p, study)

    def read(r: RunRecord) -> dict:
        return {"config": r.config(), "train": r.train_log(), "metrics": r.metrics(), "pred": r.predictions(),
                "record": r}

    runs = {(r.dataset, r.model, r.seed): v for r, v in load_all(records, read).items()}
    profile_records = [RunRecord(study, ds, m, 0, m in p.study(study).ablations) for ds, m in study_models(p, study)]
    profiles = {(r.dataset, r.model): v for r, v in
                load_all(profile_records, lambda r: load_profile(study, r.dataset, r.model, r.ablation)).items()}
    for (ds, m) in profiles:
        configs = {(k[2], _config_key(v["config"])) for k, v in runs.items() if k[:2] == (ds, m)}
        if len({c for _, c in configs}) > 1:
            seeds = sorted(s for s, _ in configs)
            raise UserError(f"the runs of {m} on {ds} (seeds {seeds}) were trained with different configurations; "
                            f"rerun them with `dvc repro --force` on their run stages")
    return runs, profiles


ENVIRONMENT_KEYS = ("torch", "torchvision", "timm", "numpy", "cpu_model", "capability", "threads", "os", "gpu")


def environment_of(config: dict) -> dict:
    """The flat environment a run recorded (config.json "environment"); "unrecorded" for runs of older code."""
    env = config.get("environment") or {}
    pk, cpu = env.get("packages") or {}, env.get("cpu") or {}
    flat = {**{k: pk.get(k) for k in ("torch", "torchvision", "timm", "numpy")}, "cpu_model": cpu.get("model"),
            "capability": cpu.get("capability"), "threads": cpu.get("threads"), "os": env.get("os"),
            "gpu": env.get("gpu")}
    return {k: ("unrecorded" if v is None and not env else v) for k, v in flat.items()}


def environments(runs: dict) -> list[dict]:
    """The distinct environments behind a study's runs, each with the runs it produced (a table with several rows
    mixes machines or software stacks; the report says so)."""
    out: dict = {}
    for (ds, m, sd), run in sorted(runs.items(), key=lambda kv: tuple(map(str, kv[0]))):
        env = environment_of(run["config"])
        key = tuple(str(env[k]) for k in ENVIRONMENT_KEYS)
        out.setdefault(key, {**env, "runs": []})["runs"].append(f"{ds}/{m}/seed{sd}")
    return list(out.values())


def _config_key(config: dict) -> str:
    import json

    return json.dumps({"config": config["config"], "train": config["train"]}, sort_keys=True)


def top1(run: dict, split: str = "test", exit_index: int = -1) -> float:
    return run["metrics"]["splits"][split]["top1_per_exit"][exit_index]


def series(runs: dict, dataset: str, model: str, seeds: list, fn) -> list:
    return [fn(runs[(dataset, model, s)]) for s in seeds]


def learning_curve(runs: dict, dataset: str, model: str, seeds: list) -> dict:
    """Images seen -> mean and t-interval over seeds of the last exit's top-1 on the curve slices."""
    curves = [runs[(dataset, model, s)]["train"]["curve"] for s in seeds]
    n = min(len(c) for c in curves)
    if n == 0:
        return {"images": [], "test": [], "calib": []}
    return {"images": [curves[0][i]["images"] for i in range(n)],
            "test": [mean_ci([c[i]["test_top1"] for c in curves]) for i in range(n)],
            "calib": [mean_ci([c[i]["calib_top1"] for c in curves]) for i in range(n)]}


def budget(runs: dict, dataset: str, model: str, seeds: list) -> dict:
    """Training budget of a model's runs (the same for every seed): images seen, epochs, training split size."""
    t = runs[(dataset, model, seeds[0])]["train"]
    return {"images_seen": t["images_seen"], "epochs": t["epochs"], "steps_per_epoch": t["steps_per_epoch"],
            "global_batch": t["global_batch"], "train_images": t["train_images"]}


def tested_setting(runs: dict, dataset: str, model: str, seeds: list, size: str, synthetic: bool) -> dict:
    """The setting a study's claims were tested in (claims ledger): dataset, resolution, model size, epochs of the
    training split seen, and whether the data were synthetic (a smoke scale)."""
    b = budget(runs, dataset, model, seeds)
    cfg = runs[(dataset, model, seeds[0])]["config"]["config"]
    return {"dataset": dataset, "img_size": cfg["img_size"], "size": size, "synthetic": synthetic,
            "epochs": b["images_seen"] / b["train_images"] if b["train_images"] else float("nan")}


def training_speed(runs: dict, dataset: str, model: str, seeds: list) -> dict:
    """Wall-clock of training and of each run's fixed overhead, start-up (process start to the first step) plus
    evaluation (timing: descriptive, never gated). Runs that lack a figure (a start-up measured without
    /proc, a run evaluated by older code) are left out of that figure only."""
    def known(get):
        return [v for v in series(runs, dataset, model, seeds, get) if v is not None]

    def overhead(r):
        s, e = r["train"].get("startup_seconds"), r["metrics"].get("evaluate_seconds")
        return None if s is None or e is None else s + e
    return {"images_per_s": mean_ci(series(runs, dataset, model, seeds, lambda r: r["train"]["images_per_s"])),
            "seconds": mean_ci(series(runs, dataset, model, seeds, lambda r: r["train"]["seconds"])),
            "startup_seconds": mean_ci(known(lambda r: r["train"].get("startup_seconds"))),
            "evaluate_seconds": mean_ci(known(lambda r: r["metrics"].get("evaluate_seconds"))),
            "overhead_seconds": mean_ci(known(overhead))}


def run_overhead(speed: dict) -> dict:
    """Mean seconds per run of start-up, evaluation and their sum (the issue's per-run overhead)."""
    return {k: speed[k]["mean"] for k in ("startup_seconds", "evaluate_seconds", "overhead_seconds")}


def per_exit(runs: dict, dataset: str, model: str, seeds: list, split: str = "test") -> list:
    values = np.array(series(runs, dataset, model, seeds, lambda r: r["metrics"]["splits"][split]["top1_per_exit"]))
    return [mean_ci(values[:, e]) for e in range(values.shape[1])]


BUDGET_FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def early_exit_summary(runs: dict, dataset: str, model: str, seeds: list, costs: list, reference_cost: float,
                       shared_range: tuple[float, float] | None = None, reference_model: str = "") -> dict:
    """What the early-exit literature reports of a model with several exits, per seed then mean and t-interval:
    oracle-exit accuracy and its cost (the bound of any exit policy), the overthinking rate, the expected
    calibration error of every exit, the accuracy at 25/50/75/100 % of `reference_cost` (the threshold chosen on
    the calibration split, scored on test; NaN where even the first exit costs more), and the area under the
    frontier over `shared_range` (mean accuracy per unit of log cost): `auc` from the thresholds of the
    calibration split's frontier scored on test, `auc_paper_style` from the test split's own envelope
    (optimistic: chosen on the data it is scored on)."""
    from itervision.evaluation.early_exit import (apply_threshold, area_under_frontier, area_under_points,
                                                  calib_chosen_points, choose_for_budget, exact_sweep, oracle,
                                                  overthinking)
    from itervision.stats import expected_calibration_error

    per = {"oracle_accuracy": [], "oracle_cost": [], "overthinking": [], "auc": [], "auc_paper_style": [],
           "ece": [], **{f"accuracy_at_{int(f * 100)}": [] for f in BUDGET_FRACTIONS}}
    for sd in seeds:
        pred = runs[(dataset, model, sd)]["pred"]
        test, calib = pred["test"], pred["calib"]
        o = oracle(test["pred"], test["label"], costs)
        per["oracle_accuracy"].append(o["accuracy"])
        per["oracle_cost"].append(o["cost"])
        per["overthinking"].append(overthinking(test["pred"], test["label"]))
        per["ece"].append([expected_calibration_error(test["prob"][:, e], test["correct"][:, e])
                           for e in range(test["pred"].shape[1])])
        cal = exact_sweep(calib["pred"], calib["prob"], calib["label"], costs)
        for f in BUDGET_FRACTIONS:
            i = choose_for_budget(cal, f * reference_cost)
            per[f"accuracy_at_{int(f * 100)}"].append(
                NAN if i is None else apply_threshold(test["pred"], test["prob"], test["label"], costs,
                                                      cal["threshold"][i])["accuracy"])
        if shared_range:
            sw = exact_sweep(test["pred"], test["prob"], test["label"], costs)
            per["auc"].append(area_under_points(*calib_chosen_points(cal, sw), *shared_range))
            per["auc_paper_style"].append(area_under_frontier(sw["cost"], sw["accuracy"], *shared_range))
    out = {k: mean_ci(v) for k, v in per.items() if k not in ("ece", "auc", "auc_paper_style")}
    out["ece"] = [mean_ci([e[i] for e in per["ece"]]) for i in range(len(per["ece"][0]))]
    for k in ("auc", "auc_paper_style"):
        out[k] = mean_ci(per[k]) if per[k] else mean_ci([])
    out["auc_range"] = list(shared_range) if shared_range else None
    out["reference_cost"], out["reference_model"] = reference_cost, reference_model  # budgets are fractions of it
    return out


def shared_cost_range(runs: dict, dataset: str, models_seeds: list[tuple[str, list]], costs: dict) -> tuple:
    """The log-cost range every (model, seed) test frontier covers: from the largest first-exit cost to the
    smallest last-exit cost of the models' envelopes."""
    from itervision.evaluation.early_exit import exact_sweep
    from itervision.stats import monotone_envelope

    lows, highs = [], []
    for model, seeds in models_seeds:
        for sd in seeds:
            test = runs[(dataset, model, sd)]["pred"]["test"]
            sw = exact_sweep(test["pred"], test["prob"], test["label"], costs[model])
            c, _ = monotone_envelope(sw["cost"], sw["accuracy"])
            lows.append(c[0])
            highs.append(c[-1])
    return (max(lows), min(highs)) if lows and max(lows) < min(highs) else None
