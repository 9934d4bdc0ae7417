"""The claims ledger of both documents: metrics/claims.md and metrics/claims.csv (stage claims).

Every study lists its document's quantitative claims (studies/<study>/claims.py), each tied to the rows of
data/reference/<study>.csv it states, with what this pipeline measured for it. Three kinds:
* statistical: per-seed values of a difference or a quantity (a saving, a time ratio), tested against its null
  (0, or 1 for a ratio) with a two-sided t-test; mean ± 95 % t-interval (n), a bootstrap interval and, for a
  difference of two variants, P(A > B) beside it;
* accounting: a deterministic count (parameters, multiply-adds, GFLOPs, sparsity) at the paper configuration
  (metrics/paper_costs.json) against the published figure;
* untestable here: an absolute figure of a training budget this scale does not have, shown beside our analogue.

One multiple-comparison rule for every verdict: Holm over the distinct tests of each document (two claims that
rest on the same test, e.g. the smallest and largest published margin, share its p). Verdicts:
* reproduced: Holm p < 0.05 with the published sign; an accounting figure within its tolerance;
* contradicted: Holm p < 0.05 with the opposite sign, or the 95 % interval excludes the published effect on the
  side of no effect (the published size is ruled out at this scale); an accounting figure outside its tolerance;
* not shown (within noise): neither; the seeds a paired t-test needs to detect the published effect at 80 %
  power (alpha 0.05) with the observed spread of the per-seed values are given;
* not testable at this scale: with the reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

REPRODUCED, CONTRADICTED, NOT_SHOWN, UNTESTABLE = ("reproduced", "contradicted", "not shown (within noise)",
                                                    "not testable at this scale")
ALPHA = 0.05


@dataclass
class Claim:
    id: str
    document: str
    statement: str
    refs: list                      # [(dataset, row, quantity)] of data/reference/<document>.csv
    published: float | None         # the published effect or figure, in `unit`
    unit: str
    kind: str                       # statistical | accounting | untestable
    estimate: dict | None = None    # statistical: mean, half_width, n, sd, p, per_seed, bootstrap (in `unit`)
    null: float = 0.0
    direction: int = 1              # the sign of the claimed effect against the null
    test_id: str = ""
    test: str = ""
    note: str = ""
    ours: float | None = None       # accounting: our figure; untestable: our analogue, if any
    tolerance: float = 0.01         # accounting: relative (or absolute) agreement that counts as reproduced
    absolute: bool = False
    results: dict = field(default_factory=dict)  # filled by assess()


def untestable(cid, document, statement, refs, published, unit, reason, shown=None, scale=1.0) -> Claim:
    ours = None if shown is None else shown.get("mean") * scale
    return Claim(cid, document, statement, refs, published, unit, "untestable", note=reason, ours=ours,
                 estimate=None if shown is None else _scaled(shown, scale))


def accounting(cid, document, statement, refs, published, value, how, tolerance=0.01, absolute=False) -> Claim:
    return Claim(cid, document, statement, refs, published, "", "accounting", ours=value, test=how,
                 tolerance=tolerance, absolute=absolute)


def differenced(cid, document, statement, refs, published, diff, test_id, test, direction=None,
                unit="points", scale=100.0) -> Claim:
    """A claim on a paired difference of two variants' accuracies (stats.paired_difference, in fractions)."""
    if diff is None:
        return untestable(cid, document, statement, refs, published, unit, "the compared models are not in this "
                          "scale's study")
    direction = direction if direction is not None else (1 if (published or 0) >= 0 else -1)
    return Claim(cid, document, statement, refs, published, unit, "statistical", estimate=_scaled(diff, scale),
                 direction=direction, test_id=test_id, test=test)


def quantity(cid, document, statement, refs, published, per_seed, null, unit, test_id, test, note="",
             direction=None) -> Claim:
    """A claim on a per-seed quantity (a compute saving, a time ratio) tested against `null`."""
    from itervision.stats import one_sample

    direction = direction if direction is not None else (1 if published >= null else -1)
    return Claim(cid, document, statement, refs, published, unit, "statistical",
                 estimate=one_sample(per_seed, null), null=null, direction=direction, test_id=test_id, test=test,
                 note=note)


def _scaled(stat: dict, scale: float) -> dict:
    out = dict(stat)
    for k in ("mean", "half_width", "sd"):
        if isinstance(out.get(k), (int, float)):
            out[k] = out[k] * scale
    out["per_seed"] = [v * scale for v in stat.get("per_seed", [])]
    boot = dict(stat.get("bootstrap") or {})
    for k in ("diff_mean", "diff_low", "diff_high", "mean", "low", "high"):
        if isinstance(boot.get(k), (int, float)):
            boot[k] = boot[k] * scale
    out["bootstrap"] = boot
    return out


# ------------------------------------------------------------------------------------------ assessment

def assess(claims: list[Claim]) -> list[Claim]:
    """Holm within each document over its distinct tests, then a verdict and the seeds needed, in place."""
    from itervision.stats import holm, seeds_needed

    for doc in dict.fromkeys(c.document for c in claims):
        tests = {}
        for c in claims:
            if c.document == doc and c.kind == "statistical" and _finite(c.estimate.get("p")):
                tests.setdefault(c.test_id, c.estimate["p"])
        adjusted = dict(zip(tests, holm(list(tests.values()))))
        for c in claims:
            if c.document == doc and c.kind == "statistical":
                c.results["p_holm"] = adjusted.get(c.test_id, float("nan"))
                c.results["family"] = f"the {len(tests)} distinct tests of this document"
    for c in claims:
        c.results["verdict"], c.results["reason"] = verdict(c)
        if c.results["verdict"] == NOT_SHOWN and c.published is not None:
            c.results["seeds_needed"] = seeds_needed(c.published - c.null, c.estimate.get("sd"))
    return claims


def verdict(c: Claim) -> tuple[str, str]:
    if c.kind == "untestable":
        return UNTESTABLE, c.note
    if c.kind == "accounting":
        if c.ours is None or not _finite(c.ours):
            return UNTESTABLE, "no figure at the paper configuration"
        off = abs(c.ours - c.published) if c.absolute else abs(c.ours - c.published) / abs(c.published)
        within = off <= c.tolerance
        what = f"{off:.3g}" if c.absolute else f"{100 * off:.2f} %"
        return (REPRODUCED if within else CONTRADICTED), f"ours {c.ours:,.4g} vs published {c.published:,.4g} " \
            f"({what} apart; tolerance {c.tolerance if c.absolute else f'{100 * c.tolerance:g} %'})"
    est, p = c.estimate, c.results.get("p_holm", float("nan"))
    mean, half = est.get("mean", float("nan")), est.get("half_width", float("nan"))
    if est.get("n", 0) < 2 or not _finite(mean):
        return NOT_SHOWN, "fewer than 2 seeds: no test"
    side = 1 if mean > c.null else -1 if mean < c.null else 0
    if _finite(p) and p < ALPHA and side == c.direction:
        return REPRODUCED, f"Holm p {p:.3g} < {ALPHA}, in the claimed direction"
    if _finite(p) and p < ALPHA:
        return CONTRADICTED, f"Holm p {p:.3g} < {ALPHA}, against the claimed direction"
    if c.published is not None and _finite(half):
        low, high = mean - half, mean + half
        effect_toward_null = (c.published - c.null) * c.direction > 0
        excluded = (c.published < low) if c.direction < 0 else (c.published > high)
        if effect_toward_null and excluded:
            return CONTRADICTED, (f"the published {c.published:g} lies outside the 95 % interval "
                                  f"[{low:.3g}, {high:.3g}]: an effect that large is ruled out at this scale")
    return NOT_SHOWN, (f"Holm p {p:.3g}" if _finite(p) else "no p (constant differences)") + ", within noise"


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


# ------------------------------------------------------------------------------------------ rendering

def rows(claims: list[Claim]) -> list[dict]:
    out = []
    for c in claims:
        est = c.estimate or {}
        boot = est.get("bootstrap") or {}
        low = boot.get("diff_low", boot.get("low"))
        high = boot.get("diff_high", boot.get("high"))
        out.append({
            "document": c.document, "id": c.id, "claim": c.statement,
            "reference": "; ".join("/".join(r) for r in c.refs) or "(prose)",
            "published": _num(c.published), "unit": c.unit, "kind": c.kind,
            "estimate": _estimate(c), "n": est.get("n", ""),
            "bootstrap_95": f"[{_num(low)}, {_num(high)}]" if _finite(low) and _finite(high) else "",
            "p_improvement": _num(boot.get("p_improvement")) if _finite(boot.get("p_improvement")) else "",
            "test": c.test, "p": _num(est.get("p")) if c.kind == "statistical" else "",
            "p_holm": _num(c.results.get("p_holm")) if c.kind == "statistical" else "",
            "verdict": c.results["verdict"], "reason": c.results["reason"] + (f"; {c.note}" if c.note and
                                                                            c.kind != "untestable" else ""),
            "seeds_needed_80pct": _seeds(c)})
    return out


def _estimate(c: Claim) -> str:
    if c.kind == "accounting":
        return "" if c.ours is None else _num(c.ours)
    est = c.estimate or {}
    if not est or not _finite(est.get("mean")):
        return "—" if c.ours is None else _num(c.ours)
    half = est.get("half_width")
    return (f"{_num(est['mean'])} ± {_num(half)} ({est.get('n')})" if _finite(half)
            else f"{_num(est['mean'])} (n={est.get('n')})")


def _seeds(c: Claim) -> str:
    if c.results.get("verdict") != NOT_SHOWN:
        return ""
    if c.published is None:
        return "n/a (no published size)"
    n = c.results.get("seeds_needed")
    return "n/a (no spread observed)" if n is None else str(n)


def _num(v) -> str:
    if v is None or not _finite(v):
        return "—"
    if abs(v) >= 1e5:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def counts(claims: list[Claim]) -> dict:
    """{document: {verdict: count}}."""
    out = {}
    for c in claims:
        doc = out.setdefault(c.document, {})
        doc[c.results["verdict"]] = doc.get(c.results["verdict"], 0) + 1
    return out


# ------------------------------------------------------------------------------------------ the stage

def gather(metrics_root, paper_costs: dict) -> list[Claim]:
    """Every registered study's claims, from its aggregate.json and reference CSV."""
    from itervision.io import read_json_file
    from itervision.layout import reference_csv, study_metrics
    from itervision.reporting.tables import load_reference
    from itervision.studies import STUDIES

    out = []
    for name, study in STUDIES.items():
        if not study.has_part("claims"):
            continue
        agg = read_json_file(study_metrics(name)["aggregate"], f"regenerate it with `dvc repro aggregate_{name}`",
                             required=("seeds",))
        out += study.part("claims").claims(agg, paper_costs, load_reference(reference_csv(name)))
    return out


def sources(document: str) -> dict:
    """{(dataset, row, quantity): source line} of a document's reference CSV."""
    import csv

    from itervision.layout import reference_csv

    with open(reference_csv(document)) as f:
        return {(r["dataset"], r["row"], r["quantity"]): r["source"] for r in csv.DictReader(f)}


COLUMNS = ["document", "id", "claim", "reference", "source", "published", "unit", "kind", "estimate", "n",
           "bootstrap_95", "p_improvement", "test", "p", "p_holm", "verdict", "reason", "seeds_needed_80pct"]


def write(claims: list[Claim], md_path, csv_path, json_path) -> None:
    """metrics/claims.md (by document, verdict counts first), .csv (the same cells), .json (counts)."""
    import csv
    import io

    from itervision.io import write_json, write_text

    table = rows(claims)
    src = {}
    for c in claims:
        src.setdefault(c.document, sources(c.document))
    for row, c in zip(table, claims):
        row["source"] = "; ".join(dict.fromkeys(src[c.document].get(tuple(r), "") for r in c.refs)) or "prose"
    buf = io.StringIO()
    writer = csv.DictWriter(buf, COLUMNS)
    writer.writeheader()
    writer.writerows(table)
    write_text(csv_path, buf.getvalue())
    tally = counts(claims)
    md = ["# Claims ledger", "",
          "Every quantitative claim of both documents, what this pipeline measured for it and a verdict "
          "(itervision/ledger.py states the rules). One multiple-comparison rule: Holm over the distinct tests of "
          "each document. Estimates are mean ± 95 % t-interval (n seeds); the bootstrap interval and P(A > B) stand "
          "beside them (at 3-5 seeds a bootstrap interval is too narrow). Seeds needed: a paired t-test detecting "
          "the published effect at 80 % power, alpha 0.05, with the observed spread.", ""]
    for doc, verdicts in tally.items():
        md.append(f"- **{doc}**: " + ", ".join(f"{v} {k}" for k, v in sorted(verdicts.items(), key=lambda kv: -kv[1])))
    for doc in tally:
        md += ["", f"## {doc}", "", "| claim | published | ours | test | Holm p | verdict | why | seeds needed |",
               "|---|---|---|---|---|---|---|---|"]
        for row in table:
            if row["document"] == doc:
                ours = row["estimate"] + (f"; bootstrap {row['bootstrap_95']}" if row["bootstrap_95"] else "") + (
                    f"; P(A>B) {row['p_improvement']}" if row["p_improvement"] else "")
                md.append(f"| {row['claim']} ({row['reference']}) | {row['published']} {row['unit']} | {ours} | "
                          f"{row['test']} | {row['p_holm']} | **{row['verdict']}** | {row['reason']} | "
                          f"{row['seeds_needed_80pct']} |")
    write_text(md_path, "\n".join(md) + "\n")
    write_json(json_path, {doc: dict(sorted(v.items())) for doc, v in tally.items()})
