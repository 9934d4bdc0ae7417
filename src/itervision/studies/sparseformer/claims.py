"""The quantitative claims of seed document 003: every row of its two tables (data/reference/sparseformer.csv) and
its prose claims, each tied to what this pipeline measured for it (metrics/sparseformer/aggregate.json on this
scale's dataset, metrics/paper_costs.json at the paper configurations). The ledger
(itervision/claims/) tests them, adjusts within the document, and gives the verdicts."""

from __future__ import annotations

import re

from itervision.layout import LEDGER, study_metrics
from itervision.claims.model import Claim, accounting, differenced, quantity, untestable

ABSOLUTE = "an absolute figure of the document's setting; compare the differences between models instead"
DOC = "sparseformer"
# The document's settings (its README; docs/ledger.md): 200 epochs, focus 192 / cortex 384 wide
CLAIMED = {
    "imagenet100": {"img_size": 160, "size": "focus 192, cortex 384 x 3"},
    "imagenet200": {"img_size": 192, "size": "focus 192, cortex 384 x 5"},
}
EPOCHS = 200
TABLES = f"{study_metrics('sparseformer')['tables']}/"
ROUND_MAX_DEFICIT = 2.0  # points: round r may trail the static model with as many tokens by this much (docs/ledger.md)
ROUNDS_MIN_GAIN = 0.5  # points: the last round must add this much to the first (the recursive study's rule)


def claimed_setting(dataset: str) -> dict:
    return {"dataset": dataset, **CLAIMED[dataset], "epochs": EPOCHS}


def describe(setting: dict | None) -> str:
    if not setting:
        return ""
    return f"{setting['dataset']}, {setting['img_size']} px, {setting['size']}, {setting['epochs']:.3g} epochs"


def fidelity(claimed: dict, tested: dict | None) -> str:
    """same: the claim's dataset, resolution, model size and training budget (within 1 %); proxy: anything else;
    smoke: synthetic data."""
    if not tested:
        return "proxy"
    if tested.get("synthetic"):
        return "smoke"
    same = (
        all(tested[k] == claimed[k] for k in ("dataset", "img_size", "size"))
        and abs(tested["epochs"] - claimed["epochs"]) <= 0.01 * claimed["epochs"]
    )
    return "same" if same else "proxy"


def checks(agg: dict) -> dict:
    """Does this scale exercise the mechanisms the claims rest on? {name: {"ok", "figure"}} (docs/ledger.md).
    round<r>_trained: round r of the recurrent model within ROUND_MAX_DEFICIT points of the static model with as
    many tokens, on the calibration split (the rows themselves estimate on the test split, so a check never reads
    the estimate it gates). rounds_add: the recurrent model's last round at least ROUNDS_MIN_GAIN points above its
    first on test, for every row about later rounds (early exit, its savings, the memory between rounds)."""
    out = {}
    for ds, d in agg["datasets"].items():
        models, rec = d["models"], agg["recurrent"]
        tokens = models[rec]["tokens"]
        for r in range(min(2, len(tokens) - 1)):
            static = next((m for m in agg["static"] if models.get(m, {}).get("tokens") == [tokens[r]]), None)
            name = f"round{r + 1}_trained"
            if static is None:
                out[name] = {"ok": False, "figure": f"no static {tokens[r]}-token model to compare round {r + 1} with"}
                continue
            split = "top1_calib" if "top1_calib" in models[rec] else "top1"
            ours, theirs = 100 * models[rec][split][r]["mean"], 100 * models[static][split][-1]["mean"]
            out[name] = {
                "ok": theirs - ours <= ROUND_MAX_DEFICIT,
                "figure": (
                    f"round {r + 1} {ours:.2f} % vs {static} {theirs:.2f} % on {ds} "
                    f"{'calib' if split == 'top1_calib' else 'test'} ({ours - theirs:+.2f} points; the check allows "
                    f"-{ROUND_MAX_DEFICIT:g})"
                ),
            }
        per_round = models[rec]["top1"]
        if len(per_round) > 1:
            gain = 100 * (per_round[-1]["mean"] - per_round[0]["mean"])
            out["rounds_add"] = {
                "ok": gain >= ROUNDS_MIN_GAIN,
                "figure": (
                    f"{rec} round 1 {100 * per_round[0]['mean']:.2f} %, round {len(per_round)} "
                    f"{100 * per_round[-1]['mean']:.2f} % on {ds} test ({gain:+.2f} points; the check asks for >= "
                    f"+{ROUNDS_MIN_GAIN:g}): without it, exiting early saves compute that buys nothing"
                ),
            }
    return out


EARLY = ("round1_trained", "round2_trained")
LATER = EARLY + ("rounds_add",)  # rows about what later rounds buy: early exit, its savings, the memory


def claims(agg: dict, paper: dict, ref: dict) -> list[Claim]:
    ds0 = next(iter(agg["datasets"]))
    d = agg["datasets"][ds0]
    ours = _OurRows(agg, d, ds0)
    tested = d.get("setting")

    def at(dataset: str) -> dict:
        claimed = claimed_setting(dataset)
        return {"fidelity": fidelity(claimed, tested), "claimed": describe(claimed), "tested": describe(tested)}

    out, fitted, computations = [], fitted_choices(), {}
    for (ds, row, q), value in ref.items():
        if q == "gflops" and ours.model_of(row):
            model, exit_index = ours.model_of(row)
            fig = (paper.get(DOC, {}).get(ds, {}).get(model) or {}).get("gflops_per_exit")
            figure = fig[exit_index] if fig else None
            chosen = fitted.get(ds, [])
            # one computation, one row: published rows whose configurations count the same operations (round 1
            # and the static model with as many tokens)
            # share one entry, named after the first of them
            test_id = computations.setdefault((ds, f"{figure:.6g}"), f"003-{ds}-{_slug(row)}-gflops") \
                if figure is not None else f"003-{ds}-{_slug(row)}-gflops"
            how = "fvcore count at the paper configuration, published convention (metrics/paper_costs.json)"
            if chosen:
                how += "; " + "; ".join(f"{c['setting']} = {c['value']} {c['because']}" for c in chosen)
            out.append(
                accounting(
                    f"003-{ds}-{_slug(row)}-gflops",
                    DOC,
                    f"{row} on {ds}: {value:g} GFLOPs",
                    refs=[(ds, row, q)],
                    published=value,
                    value=figure,
                    how=how,
                    test_id=test_id,
                    fidelity="consistency" if chosen else "independent",
                    where=str(LEDGER["paper_costs"]),
                    claimed=describe(claimed_setting(ds)),
                    tested="fvcore at the paper configuration",
                )
            )
        elif q in ("top1", "gflops"):
            out.append(
                untestable(
                    f"003-{ds}-{_slug(row)}-{q}",
                    DOC,
                    f"{row} on {ds}: {value:g}" + (" % top-1" if q == "top1" else " GFLOPs"),
                    refs=[(ds, row, q)],
                    published=value,
                    unit="%" if q == "top1" else "GFLOPs",
                    reason=ABSOLUTE,
                    shown=ours.top1(row) if q == "top1" else None,
                    scale=100,
                    where=f"{TABLES}table1_exits_{ds0}.md",
                    **at(ds),
                )
            )
        elif q == "gain":
            budget = re.search(r"static-(\d+)", row).group(1)
            diff = ours.matched(f"static-{budget}")
            out.append(
                differenced(
                    f"003-{ds}-{_slug(row)}",
                    DOC,
                    f"on {ds}, early exit at the cost of the static "
                    f"{budget}-token model is {value:g} points more accurate than it",
                    refs=[(ds, row, q)],
                    published=value,
                    diff=diff and diff["difference"],
                    test_id=f"early exit - static-{budget}",
                    test=f"paired t, early exit (threshold chosen on calib) - static-{budget}, test top-1 on {ds0}",
                    needs=LATER,
                    where=f"{TABLES}table2_early_exit_{ds0}.md",
                    **at(ds),
                )
            )
        elif q == "saving":
            key = "reach_static" if "static" in row else "reach_all_rounds"
            r = d[key]
            target = "the static 25-token accuracy" if key == "reach_static" else "the all-rounds accuracy"
            per_seed, reached_note = failures_as_data(r["saving_per_seed"])
            out.append(
                quantity(
                    f"003-{ds}-{_slug(row)}",
                    DOC,
                    f"on {ds}, early exit reaches {target} with {value:.0%} less compute",
                    refs=[(ds, row, q)],
                    published=value,
                    per_seed=per_seed,
                    null=0.0,
                    unit="fraction of compute",
                    test_id=key,
                    test=f"one-sample t of the per-seed compute saving against 0 over every seed, a seed "
                    f"that never reached the target counted as no saving (threshold chosen on "
                    f"calib, cost read on test, {ds0})",
                    note="; ".join(x for x in (reached_note, _on_test(r)) if x),
                    needs=LATER,
                    where=f"{TABLES}table2_early_exit_{ds0}.md",
                    **at(ds),
                )
            )
    out += _memory_claims(agg, d, ds0, ref, at("imagenet200")) + _static_claims(d, ds0, ref, at("imagenet100"))
    return out


def fitted_choices() -> dict:
    """{dataset: [{setting, value, because}]}: configuration choices made because they matched a published figure
    (data/reference/fitted.csv, each also commented beside the choice in configs/scales/paper.yaml). The accounting
    rows of such a dataset are consistency, never independent reproduction (docs/ledger.md)."""
    import csv

    from itervision.layout import FITTED_CSV

    out: dict = {}
    if FITTED_CSV.exists():
        with open(FITTED_CSV, newline="") as f:
            for r in csv.DictReader(f):
                if r["document"] == DOC:
                    out.setdefault(r["dataset"], []).append(r)
    return out


def failures_as_data(saving_per_seed: list) -> tuple[list, str]:
    """Reaching a target is a result on every seed, the ones that did not reach it included (docs/ledger.md
    "failures are data"): a seed whose threshold never reached the target on calib (NaN) counts as a saving of 0,
    so the t-test runs on all n seeds; the count and its exact binomial (sign) test against one half go beside it.
    Returns (per-seed values, note)."""
    from scipy.stats import binomtest

    n = len(saving_per_seed)
    k = sum(1 for v in saving_per_seed if v == v)  # finite: reached
    values = [float(v) if v == v else 0.0 for v in saving_per_seed]
    if not n:
        return values, ""
    p = binomtest(k, n, 0.5).pvalue
    return values, (
        f"reached in {k} of {n} seeds (exact binomial p {p:.3g} against one half); {n - k} counted as no saving"
        if k < n
        else f"reached in {k} of {n} seeds"
    )


def _on_test(r: dict) -> str:
    """How far the test accuracy at the chosen threshold lands from the target it reached on calib."""
    gap = r.get("accuracy_vs_target") or {}
    if not isinstance(gap.get("mean"), (int, float)):
        return ""
    return (
        f"the threshold reached the target on calib; on test the early exit is {100 * gap['mean']:+.2f} ± "
        f"{100 * gap['half_width']:.2f} points from it (n {gap['n']})"
    )


def _memory_claims(agg: dict, d: dict, ds0: str, ref: dict, setting: dict) -> list[Claim]:
    out = []
    for m in d["memory_ablation"]["rounds"]:
        r = m["round"]
        with_key, without_key = (
            ("imagenet200", f"recurrent exit {r}", "top1"),
            ("imagenet200", f"no-memory exit {r}", "top1"),
        )
        if with_key in ref and without_key in ref:
            published = ref[with_key] - ref[without_key]
            out.append(
                differenced(
                    f"003-memory-round{r}",
                    DOC,
                    f"on imagenet200, round {r} with the memory is "
                    f"{published:+.2f} points against the rounds without it",
                    refs=[with_key, without_key],
                    published=published,
                    diff=m["difference"],
                    test_id=f"memory round {r}",
                    test=f"paired t, with - without memory at round {r}, {ds0}, seeds {d['memory_ablation']['seeds']}",
                    needs=LATER,
                    where=f"{TABLES}table1_exits_{ds0}.md",
                    **setting,
                )
            )
    for row in d.get("memory_early_exit", []):
        tok = d["models"][row["budget_model"]]["tokens"][0]
        with_key = ("imagenet200", f"early exit at static-{tok}", "top1")
        without_key = ("imagenet200", f"no-memory early exit at static-{tok}", "top1")
        if with_key in ref and without_key in ref:
            published = ref[with_key] - ref[without_key]
            out.append(
                differenced(
                    f"003-memory-early-exit-{tok}",
                    DOC,
                    f"on imagenet200, early exit at the static "
                    f"{tok}-token cost is {published:+.2f} points with the memory than without",
                    refs=[with_key, without_key],
                    published=published,
                    diff=row["difference"],
                    test_id=f"memory early exit {tok}",
                    test=f"paired t, early exit with - without memory at the static-{tok} cost, {ds0}",
                    needs=LATER,
                    where=f"{TABLES}table2_early_exit_{ds0}.md",
                    **setting,
                )
            )
    return out


def _static_claims(d: dict, ds0: str, ref: dict, setting: dict) -> list[Claim]:
    out = []
    checks = {c.get("model"): c for c in d["other_checks"]}
    r1, s9 = ("imagenet100", "recurrent exit 1", "top1"), ("imagenet100", "static-9", "top1")
    first = next((c for c in d["other_checks"] if c["what"].startswith("round 1")), None)
    if r1 in ref and s9 in ref:
        out.append(
            differenced(
                "003-round1-vs-static9",
                DOC,
                f"on imagenet100, round 1 is {ref[r1] - ref[s9]:+.2f} "
                "points against a static 9-token model of the same cost",
                refs=[r1, s9],
                published=ref[r1] - ref[s9],
                diff=first and first["difference"],
                test_id="round 1 - static-9",
                test=f"paired t, round 1 - static-9, {ds0}",
                needs=("round1_trained",),
                where=f"{TABLES}table1_exits_{ds0}.md",
                **setting,
            )
        )
    last = ("imagenet100", "recurrent exit 3", "top1")
    for tok in (36, 49):
        key = ("imagenet100", f"static-{tok}", "top1")
        if last in ref and key in ref:
            check = checks.get(f"sf-static-{tok}")
            out.append(
                differenced(
                    f"003-last-vs-static{tok}",
                    DOC,
                    f"on imagenet100, the static {tok}-token model "
                    f"is more accurate than the recurrent model's last exit "
                    f"({ref[last] - ref[key]:+.2f} points)",
                    refs=[last, key],
                    published=ref[last] - ref[key],
                    diff=check and check["difference"],
                    test_id=f"last exit - static-{tok}",
                    test=f"paired t, last exit - static-{tok}, {ds0}",
                    where=f"{TABLES}table1_exits_{ds0}.md",
                    **setting,
                )
            )
    return out


class _OurRows:
    """This scale's analogue of a published row: which model and exit it is, and its top-1 here."""

    def __init__(self, agg: dict, d: dict, ds0: str):
        self.agg, self.d, self.ds0 = agg, d, ds0

    def model_of(self, row: str):
        m = re.fullmatch(r"static-(\d+)", row)
        if m:
            return f"sf-static-{m.group(1)}", -1
        m = re.fullmatch(r"(recurrent|no-memory) exit (\d)", row)
        if m:
            return (self.agg["recurrent"] if m.group(1) == "recurrent" else self.agg["no_memory"]), int(m.group(2)) - 1
        return None

    def top1(self, row: str):
        found = self.model_of(row)
        if found and found[0] in self.d["models"]:
            return self.d["models"][found[0]]["top1"][found[1]]
        m = re.fullmatch(r"(no-memory )?early exit at static-(\d+)", row)
        if m:
            rows = self.d["matched_cost_no_memory" if m.group(1) else "matched_cost"]
            hit = next((r for r in rows if r["budget_model"] == f"sf-static-{m.group(2)}"), None)
            return hit and hit["accuracy"]
        return None

    def matched(self, budget: str):
        return next((r for r in self.d["matched_cost"] if r["budget_model"] == f"sf-{budget}"), None)


def _slug(row: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", row.lower()).strip("-")
