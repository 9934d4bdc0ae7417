"""What the studies' analyses share: reading every expected run once (naming every broken one), learning
curves over seeds, and the training budget each model had."""
from __future__ import annotations

import numpy as np

from itervision.errors import UserError
from itervision.params import Params
from itervision.matrix import expected_runs, study_models
from itervision.runs import RunRecord, load_all, load_profile
from itervision.stats import mean_ci


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
