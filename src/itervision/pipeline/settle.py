"""`make settle`: add exactly the seeds an open claim's test needs, under a sequential design that keeps its error
rate, and print the old and the new verdict side by side (docs/settle.md).

    python -m itervision.pipeline.settle --list                          # the open tests, their plans and costs
    python -m itervision.pipeline.settle "fashion_mnist: dsa-moe - sa-mlp" [--minutes N] [--interim] [--dry-run]
    python -m itervision.pipeline.settle --all-open --minutes N          # the most power per minute first

1. The test comes from the committed ledger (metrics/ledger.json) and the models it pairs from the aggregate
   (its "paired" record): only those models get seeds.
2. The plan: the design's maximum n at 80 % power at the published effect (the end of a published range nearest
   to no effect), from the pilot's SD and from its 80 % upper confidence limit (the one used); the runs and
   their minutes at this machine's measured per-run time (the aggregates' training and overhead seconds); at the
   paper scale's measured plan, the GPU-hours of the same seeds.
3. A budget (--minutes) that cannot buy the design is refused before anything trains, with the power it would
   buy; --interim takes the look the budget buys instead (the sequence continues at the next settle).
4. The seeds go into params (settle.claims: the design and its looks; settle.runs: the runs, stages
   run_settle@...), then `dvc repro` trains the new runs and reruns the statistics only.

Everything it adds lives in params.yaml's settle group and the settle runs' folders: `dvc exp save -n NAME` keeps
them as an experiment, `--reset` (make settle RESET=1) returns to the default run.
"""
from __future__ import annotations

import json
import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from itervision.errors import ArgumentParser, UserError, cli_entry
from itervision.io import read_json_file, write_text
from itervision.layout import LEDGER, study_metrics
from itervision.config.params import DEFAULT_PARAMS, Params, check_params, family_code, load_params
from itervision.stats.inference import tagged
from itervision.stats.sequential import PROCEDURE, design, sequence_power

ALPHA = 0.05
POWER = 0.8
SD_LEVEL = 0.8             # Browne's rule: the pilot SD's one-sided 80 % upper confidence limit
STATS_SECONDS = 150        # configure, aggregate, claims and report stages after the runs (measured: docs/settle.md)


@dataclass
class Target:
    """An open test of the ledger and what settling it involves."""
    document: str
    test_id: str
    dataset: str
    models: list
    pilot: list                # per-seed values in the claimed direction, seed order
    effect: float              # the published effect nearest to no effect, claimed direction
    unit: str
    verdict: str
    design: dict | None = None  # the sequence so far (params settle.claims), if any
    family: int = 1            # m, the tests of the document's Holm family

    @property
    def alpha(self) -> float:
        """The level the verdict needs: Holm's first step, alpha / m (conservative for any other rank)."""
        return ALPHA / self.family


@dataclass
class Plan:
    target: Target
    n_now: int
    max_n: int
    max_n_point: int | None
    sd: float
    sd_planning: float
    look: int                  # the n this settle brings the sequence to
    runs: list = field(default_factory=list)   # (model, seed)
    seconds: float = 0.0
    power: float = float("nan")   # P(a crossing by this look) at the published effect and the planning SD
    power_point: float = float("nan")   # the same at the pilot's SD
    design: dict = field(default_factory=dict)   # the sequence's design (new, or as it started)

    @property
    def minutes(self) -> float:
        return (self.seconds + STATS_SECONDS) / 60


# ------------------------------------------------------------------------------------------ open tests

def targets(ledger: dict, aggregates: dict) -> list[Target]:
    """Every statistical test with a published size that pairs runs of named models (the ones settle can add seeds
    to), with its pilot values."""
    out = []
    for doc, d in ledger["documents"].items():
        pairs = {n["test_id"]: n["paired"] for n in tagged(aggregates.get(doc, {}))
                 if isinstance(n.get("paired"), dict)}
        for e in d["entries"]:
            plot = e.get("plot")
            if e["kind"] != "statistical" or e["test_id"] not in pairs or not plot or not plot.get("published"):
                continue
            sign = 1 if min(plot["published"], key=abs) - plot["null"] >= 0 else -1
            pilot = [sign * (v - plot["null"]) for v in plot["per_seed"]]
            effect = min(abs(x - plot["null"]) for x in plot["published"])
            paired = pairs[e["test_id"]]
            design = (aggregates[doc].get("settle") or {}).get(e["test_id"])
            out.append(Target(doc, e["test_id"], paired["dataset"], paired["models"], pilot, effect,
                              plot.get("unit", ""), e["verdict"], design, family_size(d.get("family", {}))))
    return out


def family_size(family: dict) -> int:
    """m, the tests of a document's Holm family (metrics/ledger.json)."""
    sizes = [f.get("family_size") for f in family.values() if isinstance(f, dict) and f.get("family_size")]
    return max(sizes) if sizes else max(1, len(family))


def find(tests: list[Target], name: str, ledger: dict | None = None) -> Target:
    exact = [t for t in tests if t.test_id == name]
    if exact:
        return exact[0]
    hits = [t for t in tests if name.lower() in t.test_id.lower()]
    if len(hits) == 1:
        return hits[0]
    others = [e for d in (ledger or {}).get("documents", {}).values() for e in d["entries"]
              if e["test_id"] == name or (not hits and name.lower() in e["test_id"].lower())]
    if not hits and len(others) == 1:
        e = others[0]
        why = ("it is not a statistical test" if e["kind"] != "statistical" else
               "it has no published size: settle plans its seeds for power at the published effect, and the "
               "document gives none for this test" if not (e.get("plot") or {}).get("published") else
               "it pairs no runs of named models this pipeline can add seeds to")
        raise UserError(f"'{e['test_id']}' cannot be settled: {why} (its verdict stays {e['verdict']!r})")
    known = "; ".join(t.test_id for t in tests)
    what = "matches several tests" if hits else "matches no test settle can add seeds to"
    raise UserError(f"claim '{name}' {what}; give one of: {known}")


# ------------------------------------------------------------------------------------------ costs

def run_seconds(aggregates: dict, document: str, dataset: str, model: str) -> tuple[float, str]:
    """Measured seconds of one run of `model` (training + start-up + evaluation, the committed aggregate's means),
    or the reference model's scaled by multiply-adds where the aggregate times no run of it."""
    agg = aggregates[document]
    per_dataset = agg["datasets"].get(dataset, {}) if isinstance(agg.get("datasets"), dict) else {}
    speed = (per_dataset.get("speed") or {}).get(model) or ((agg.get("efficiency") or {}).get(model) or {}).get("speed")
    if speed:
        return speed["seconds"]["mean"] + (speed.get("overhead_seconds") or {}).get("mean", 0.0), "measured"
    macs = {r["model"]: r["macs_per_image"] for name in ("k_ablation", "depth_ablation", "embedding_ablation")
            for r in agg.get(name) or []}
    ref = agg.get("reference")
    ref_speed = ((agg.get("efficiency") or {}).get(ref) or {}).get("speed")
    if ref_speed and model in macs and ref in macs:
        seconds = ref_speed["seconds"]["mean"] * macs[model] / macs[ref] + ref_speed["overhead_seconds"]["mean"]
        return seconds, f"estimated from {ref} by multiply-adds"
    raise UserError(f"no timing of {model} in metrics/{document}/aggregate.json; run make repro first")


def missing_runs(p: Params, t: Target, n: int) -> list[tuple[str, int]]:
    """(model, seed) of every run the sequence's first n seeds (0 .. n-1) lack."""
    have = {m: set(p.base_seeds(t.document, m)) | set(p.settle_runs.get((t.dataset, m), [])) for m in t.models}
    return [(m, s) for s in range(n) for m in t.models if s not in have[m]]


def plan(p: Params, t: Target, aggregates: dict, minutes: float | None = None) -> Plan:
    v = np.asarray(t.pilot, dtype=np.float64)
    n_pilot = len(v)
    if n_pilot < 2 or not float(v.std(ddof=1)) > 0:
        raise UserError(f"'{t.test_id}' has {n_pilot} seed(s) without spread: no SD to plan from; run make repro "
                        f"with at least 2 seeds")
    d = dict(t.design) if t.design else {"study": t.document, "dataset": t.dataset, "models": t.models,
                                         **design(t.pilot, t.effect, POWER, SD_LEVEL, alpha=t.alpha)}
    # the sequence continues with its design as it started (a design from before pilots planned only: pilot 0)
    looks, max_n, sd, sd_c = list(d["looks"]), d["max_n"], d["sd_pilot"], d["sd_planning"]
    point, pilot, alpha = d.get("max_n_point"), d.get("pilot", 0), d.get("alpha", t.alpha)
    if max_n is None:
        raise UserError(f"'{t.test_id}': the published effect {t.effect:g} against an SD of {sd_c:.3g} needs more "
                        f"than 10,000 new seeds at alpha {alpha:.2g}; settle cannot reach it")
    n_now = looks[-1]
    if n_now >= max_n:
        raise UserError(f"'{t.test_id}' is settled: its sequence reached its maximum n = {max_n}")
    seconds = {m: run_seconds(aggregates, t.document, t.dataset, m)[0] for m in t.models}

    def cost(n):
        return sum(seconds[m] for m, _ in missing_runs(p, t, n))

    look = max_n
    if minutes is not None and cost(max_n) + STATS_SECONDS > minutes * 60:
        lo, hi = n_now, max_n  # the largest n the budget buys (cost rises with n): cost(lo) fits, cost(hi) not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if cost(mid) + STATS_SECONDS <= minutes * 60 else (lo, mid)
        look = lo
    taken = looks + ([look] if look > n_now else [])  # P(a crossing by this look) at the published effect
    return Plan(t, n_now, max_n, point, sd, sd_c, look, missing_runs(p, t, look), cost(look),
                sequence_power(taken, max_n, pilot, t.effect, sd_c, alpha),
                sequence_power(taken, max_n, pilot, t.effect, sd, alpha), d)


def paper_gpu_hours(pl: Plan) -> str:
    """GPU-hours of this look's runs at the paper scale's measured plan (make paper-plan): the same models and
    number of seeds, on the paper datasets the test would pair them on (the ablation datasets where one of them is
    an ablation model)."""
    import contextlib
    import io

    from itervision.config.scales import render_scale
    from itervision.planning.plan import load_rates, plan_runs, run_hours, utilisation

    t = pl.target
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            paper = check_params(render_scale("paper"))  # quiet: its threads warning is about another machine
        s = paper.study(t.document)
        datasets = s.ablation_datasets if any(m in s.ablations for m in t.models) else s.datasets
        plans = {(mp.model, mp.dataset): mp for mp in plan_runs(paper, memory=False, fast=True,
                                                                 rates=load_rates("nvidia-h200"))
                 if mp.study == t.document and mp.model in t.models and mp.dataset in datasets}
    except UserError as err:
        return f"paper scale: not planned ({err})"
    if not plans:
        return "paper scale: these models are not in the paper scale's study"
    u = utilisation(list(plans.values()), fast=True)
    hours = sum(run_hours(plans[(m, ds)], u) for m, _ in pl.runs for ds in datasets if (m, ds) in plans)
    basis = "measured rates" if all(mp.measured for mp in plans.values()) else \
        "FLOP estimates where no rate was measured"
    return (f"paper scale: the same {len(pl.runs)} runs on {', '.join(datasets)} take {hours:.1f} H200 GPU-hours "
            f"({basis}; make paper-plan)")


def describe(pl: Plan) -> list[str]:
    t = pl.target
    point = f"{pl.max_n_point}" if pl.max_n_point else "n/a"
    lines = [f"{t.document} | {t.test_id} | now: {t.verdict}",
             f"  published effect {t.effect:g} {t.unit}; pilot n {len(t.pilot)}, SD {pl.sd:.3g} "
             f"(80 % upper limit {pl.sd_planning:.3g})",
             f"  design: {PROCEDURE} at alpha {pl.design.get('alpha', t.alpha):.2g} (Holm's first step over the "
             f"document's {t.family} tests); the pilot plans, the new seeds test; max n {pl.max_n} at 80 % "
             f"power from the upper-limit SD (from the point SD: {point})",
             f"  this look: n {pl.n_now} -> {pl.look}: {len(pl.runs)} runs "
             f"({', '.join(f'{m} x {sum(1 for x, _ in pl.runs if x == m)}' for m in t.models)}), "
             f"{pl.minutes:.1f} min here; power by this look at the published effect {pl.power:.2f} (at the "
             f"upper-limit SD; {pl.power_point:.2f} at the pilot SD)"]
    return lines


# ------------------------------------------------------------------------------------------ params

def settle_block(claims: dict, runs: dict) -> str:
    """The settle group of params.yaml as text (JSON flow values are YAML), so the rest of the file, comments
    included, stays as it is; with no claim, exactly the default run's group (configs/scales/cpu.yaml)."""
    head = ("settle:                        # make settle (docs/settle.md) writes this group: extra seeds for an "
            "open claim's test")
    if not claims:
        return "\n".join([head, "  claims: {}                   # test id -> its sequential design and the looks "
                                 "taken (none: the default run)",
                          "  runs: {}                     # the extra runs those claims need (stage "
                          "run_settle)"]) + "\n"
    lines = [head, "  claims:                      # test id -> its sequential design and the looks taken"]
    lines += [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in claims.items()]
    lines.append("  runs:                        # the extra runs those claims need (stage run_settle)")
    lines += [f"    {json.dumps(k)}: {json.dumps(r)}" for k, r in runs.items()]
    return "\n".join(lines) + "\n"


def write_settle(path: Path, p: Params, claims: dict) -> None:
    """Rewrite params.yaml's settle group (the file's last group) from `claims`; every run they need, derived."""
    runs = {}
    for tid, d in claims.items():
        have = {m: set(p.base_seeds(d["study"], m)) for m in d["models"]}
        for seed in range(d["looks"][-1]):
            for m in d["models"]:
                if seed not in have[m]:
                    key = f"{d['study']}-{d['dataset']}-{m}-seed{seed}"
                    runs[key] = {"study": d["study"], "dataset": d["dataset"], "model": m, "seed": seed,
                                 "code": family_code(p, m, d["dataset"])}
    text = path.read_text()
    start = text.find("\nsettle:")
    if start < 0 or any(line and not line.startswith((" ", "#")) for line in text[start + 1:].splitlines()[1:]):
        raise UserError(f"{path} must end with the settle group (copy it from configs/scales/cpu.yaml)")
    new = text[: start + 1] + settle_block(claims, runs)
    import yaml

    check_params(yaml.safe_load(new))  # refuse before writing anything
    write_text(path, new)


def check_contiguous(p: Params) -> None:
    for name, seeds in (("seeds", p.seeds), ("ablation_seeds", p.ablation_seeds)):
        if seeds != list(range(len(seeds))):
            raise UserError(f"settle extends seeds 0, 1, 2, ...; params {name} is {seeds}: make it 0 .. n-1")


# ------------------------------------------------------------------------------------------ the command

def load(params_path: Path):
    p = load_params(params_path)
    ledger = read_json_file(LEDGER["ledger"], "regenerate it with make repro")
    aggregates = {name: read_json_file(study_metrics(name)["aggregate"], "regenerate it with make repro")
                  for name in ledger["documents"]}
    return p, ledger, aggregates


def _env() -> dict:
    """This interpreter's bin folder first on PATH: DVC's stages run `python` and must get this venv's."""
    import os
    import sys

    return {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def stale_stages() -> list[str]:
    out = subprocess.run(["dvc", "status", "--json"], capture_output=True, text=True, env=_env())
    if out.returncode != 0:
        raise UserError(f"dvc status failed: {out.stderr.strip()[-300:]}")
    return sorted(json.loads(out.stdout or "{}"))


def is_open(t: Target) -> bool:
    return not t.design or "inconclusive so far" in t.verdict


def settle(params_path: Path, plans: list[Plan], dry_run: bool, experiment: str | None = None) -> None:
    p = load_params(params_path)
    for pl in plans:
        print("\n".join(describe(pl)))
        print("  " + paper_gpu_hours(pl))
    if dry_run or not plans:
        return
    from itervision.config.params import MAX_RUNS
    from itervision.pipeline.workspace import hold

    new_runs, have = sum(len(pl.runs) for pl in plans), sum(len(v) for v in p.settle_runs.values())
    if new_runs + have > MAX_RUNS:  # refused before the lock, the status or params are touched
        raise UserError(f"this settle adds {new_runs:,} runs ({have} settle runs already); at most {MAX_RUNS:,} runs "
                        f"in one params file: give a smaller --minutes")
    with hold("make settle"):  # first: a second settle or a `make repro` beside it is refused before anything
        claims = dict(p.settle_claims)
        for pl in plans:
            t = pl.target
            d = dict(pl.design)
            d["looks"] = list(d["looks"]) + [pl.look]
            claims[t.test_id] = d
        resuming = claims == dict(p.settle_claims)  # this very look is in params already: an interrupted settle
        if not resuming:
            stale = stale_stages()
            if stale:
                raise UserError(f"the pipeline is not up to date ({len(stale)} stages, e.g. {stale[0]}); run make "
                                f"repro first, so that settle trains only the new seeds")
            write_settle(params_path, p, claims)
        command = ["dvc", "exp", "run", "-n", experiment] if experiment else ["dvc", "repro"]
        try:
            rc = subprocess.call(command, env=_env())
        except KeyboardInterrupt:
            raise UserError("interrupted (Ctrl-C) while the look trained: the look is in params.yaml and the runs "
                            "that finished are kept; run the same make settle command again to train the rest "
                            "(make settle RESET=1 drops the look)") from None
    if rc:
        raise UserError(f"{' '.join(command)} failed (exit {rc}); fix the cause and run make settle again: the "
                        f"looks are in params.yaml, so it resumes")
    _, ledger, _ = load(params_path)
    after = {e["test_id"]: e for d in ledger["documents"].values() for e in d["entries"]}
    for pl in plans:
        e = after[pl.target.test_id]
        print(f"{pl.target.test_id}\n  before: {pl.target.verdict}\n  after:  {e['verdict']} ({e['reason']})")
    try:  # everything the ledger changed against the committed one (make diff): the settled rows, and only them
        from itervision.pipeline.diff import changes, ledger_at

        lines = changes(ledger_at("HEAD"), ledger)
        print("make diff (the ledger against HEAD):" + ("".join(f"\n  {x}" for x in lines) or " nothing changed"))
    except UserError as err:
        print(f"make diff: not compared ({err})")


def reset(params_path: Path) -> None:
    """Back to the default run: the settle group emptied, the settle runs' folders removed (they would change the
    aggregate stages' `runs/<study>` dependency), the statistics rerun. A saved experiment keeps them (dvc exp
    apply restores them from the DVC cache)."""
    import shutil

    from itervision.runs import RunRecord

    from itervision.config.matrix import study_of
    from itervision.pipeline.workspace import hold

    p = load_params(params_path)
    if not p.settle_claims and not p.settle_runs:  # nothing to undo: params.yaml stays byte for byte
        print("settle: nothing is settled; the default run is in place (params.yaml unchanged)")
        return
    with hold("make settle RESET=1"):  # first: nothing is removed or written while another command runs
        for (dataset, model), seeds in p.settle_runs.items():
            for seed in seeds:
                folder = RunRecord(study_of(p, model), dataset, model, seed).dir
                if folder.exists():
                    shutil.rmtree(folder)
        write_settle(params_path, p, {})
        rc = subprocess.call(["dvc", "repro"], env=_env())
    if rc:
        raise UserError(f"dvc repro failed (exit {rc}) after the reset; run make repro")
    locks = [Path("dvc.lock"), *Path("pipelines").glob("*/dvc.lock")]
    pruned = sum(prune_lock(lock) for lock in locks if lock.exists())
    print(f"settle: {len(p.settle_claims)} settled test(s), their runs and {pruned} dvc.lock entries removed; the "
          f"default run is back")


def prune_lock(path: Path) -> int:
    """Drop the entries of settle stages from a dvc.lock (DVC keeps the entries of foreach stages that no longer
    exist); the rest of the file, as DVC wrote it, stays byte for byte. Returns the entries dropped."""
    out, dropping, dropped = [], False, 0
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("  ") and not line.startswith("   "):  # a stage's name (indent 2)
            dropping = "_settle@" in line.split(":")[0]
            dropped += dropping
        if not dropping:
            out.append(line)
    if dropped:
        write_text(path, "".join(out))
    return dropped


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.pipeline.settle", description=__doc__.split("\n\n")[0])
    ap.add_argument("claim", nargs="?", help="a test id of metrics/ledger.json (or a unique part of one)")
    ap.add_argument("--minutes", type=float, help="the budget on this machine; refused if it cannot buy the design")
    ap.add_argument("--interim", action="store_true", help="take the look the budget buys even if it is short of "
                                                           "the design's maximum n (the sequence continues later)")
    ap.add_argument("--all-open", action="store_true", help="settle the open tests that fit --minutes, the most "
                                                            "power per minute first")
    ap.add_argument("--list", action="store_true", help="print every open test's plan and cost, train nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, train nothing")
    ap.add_argument("--reset", action="store_true", help="back to the default run: no settled test, their runs "
                                                         "removed (save them first with dvc exp save -n NAME)")
    ap.add_argument("--exp", metavar="NAME", help="run the new seeds as `dvc exp run -n NAME` (a DVC experiment of the "
                                                  "settle group) instead of `dvc repro`")
    ap.add_argument("--params", type=Path, default=Path(DEFAULT_PARAMS))
    args = ap.parse_args(argv)
    if args.minutes is not None and not (math.isfinite(args.minutes) and args.minutes > 0):
        raise UserError(f"--minutes (MINUTES) must be a positive number of minutes, got {args.minutes}")
    if args.reset:
        reset(args.params)
        return
    p, ledger, aggregates = load(args.params)
    check_contiguous(p)
    tests = targets(ledger, aggregates)
    if args.list or args.all_open:
        plans = []
        for t in tests:
            if is_open(t):
                try:
                    plans.append(plan(p, t, aggregates))
                except UserError as err:
                    print(f"{t.test_id}: {err}")
        plans.sort(key=lambda pl: pl.power / pl.minutes, reverse=True)
        if args.list:
            for pl in plans:
                print("\n".join(describe(pl)))
            return
        if args.minutes is None:
            raise UserError("--all-open needs --minutes N (the budget it fills)")
        chosen, left = [], args.minutes
        for pl in plans:
            if pl.minutes <= left:
                chosen.append(pl)
                left -= pl.seconds / 60
        if not chosen:
            cheapest = min(plans, key=lambda pl: pl.minutes) if plans else None
            raise UserError("no open test's design fits --minutes " + f"{args.minutes:g}" + (
                f"; the cheapest, '{cheapest.target.test_id}', needs {cheapest.minutes:.0f} min" if cheapest else ""))
        settle(args.params, chosen, args.dry_run, args.exp)
        return
    if not args.claim:
        raise UserError("name a claim's test (make settle CLAIM='...'), or pass --list or --all-open")
    t = find(tests, args.claim, ledger)
    full = plan(p, t, aggregates)
    pl = plan(p, t, aggregates, args.minutes) if args.minutes is not None else full
    if pl.look <= pl.n_now:
        raise UserError(f"--minutes {args.minutes:g} buys no seed of '{t.test_id}': power stays "
                        f"{pl.power:.2f} at the published effect {t.effect:g} {t.unit}; the design (power {POWER:.2f}) "
                        f"needs {full.minutes:.0f} min")
    if pl.look < full.max_n and not args.interim:
        raise UserError(f"--minutes {args.minutes:g} buys n = {pl.look} of the design's {full.max_n} for "
                        f"'{t.test_id}': power {pl.power:.2f} at the published effect {t.effect:g} {t.unit} "
                        f"({pl.power_point:.2f} at the pilot SD; the "
                        f"design: {POWER:.2f} in {full.minutes:.0f} min); give --minutes {math.ceil(full.minutes)}, "
                        f"or --interim to take that look and continue later")
    settle(args.params, [pl], args.dry_run, args.exp)


if __name__ == "__main__":
    main()
