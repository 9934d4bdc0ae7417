"""The claims ledger as files: metrics/claims.md|csv (by document and fidelity class, headline first; every cell
escaped for its format), metrics/claims.json (the headline counts, for `dvc metrics`), metrics/ledger.json (every
entry and each document's Holm family, which the report stages print from) and the forest plot of every tested
row (claims/forest.py)."""
from __future__ import annotations

from itervision.claims.model import FIDELITIES, UNTESTABLE, Entry, _finite, _num

def _published(e: Entry) -> str:
    vals = [x.published for x in e.claims if _finite(x.published)]
    if not vals:
        return "—"
    uniq = sorted(set(vals))
    return (_num(uniq[0]) if len(uniq) == 1 else f"{_num(uniq[0])} to {_num(uniq[-1])}") + \
        (f" {e.first.unit}" if e.first.unit else "")


def _estimate(e: Entry) -> str:
    c = e.first
    if c.kind == "accounting":
        return "; ".join(dict.fromkeys(_num(x.ours) for x in e.claims if x.ours is not None))
    est = c.estimate or {}
    if not est or not _finite(est.get("mean")):
        return "—" if c.ours is None else _num(c.ours)
    half = est.get("half_width")
    return (f"{_num(est['mean'])} ± {_num(half)} (n {est.get('n')})" if _finite(half)
            else f"{_num(est['mean'])} (n {est.get('n')})")


def _indicators(e: Entry) -> str:
    r = e.results
    if e.kind != "statistical":
        return ""
    parts = []
    if "published_in_ci" in r:
        parts.append(f"published {'inside' if r['published_in_ci'] else 'outside'} the 95 % CI")
    if _finite(r.get("tost_p")):
        parts.append(f"TOST ±|published| p {_num(r['tost_p'])}")
    if r.get("telescope"):
        parts.append(r["telescope"])
    if _finite(r.get("p_improvement_paired")):
        parts.append(f"paired P(A>B) {r['p_improvement_paired']:.2f}")
    if r.get("bootstrap_95"):
        parts.append(f"bootstrap [{_num(r['bootstrap_95'][0])}, {_num(r['bootstrap_95'][1])}]")
    return "; ".join(parts)


def _seeds(e: Entry) -> str:
    if "sequential" in e.results:
        return f"settling: max n {e.results['sequential']['max_n']}"
    s = e.results.get("seeds_needed")
    if e.results.get("outcome") != "inconclusive":
        return ""
    if s is None:
        return "n/a (no published size or no spread)"
    if s.get("opposite"):
        return "n/a (observed effect opposes the published one)"
    fmt = [str(s[k]) if s.get(k) is not None else f">{10_000}" for k in ("point", "low", "high", "at_05")]
    return f"{fmt[0]} ({fmt[1]}-{fmt[2]}) at Holm's alpha {s['alpha']:.2g}; {fmt[3]} at 0.05"


def _tests(e: Entry) -> str:
    c, r = e.first, e.results
    if e.kind != "statistical":
        return c.test
    out = f"direction: {c.test}"
    if "sequential" in r:
        seq = r["sequential"]
        out += (f"; settled by a {seq['procedure']} at alpha {seq['alpha']:.3g}, pilot n = {seq.get('pilot', 0)} "
                "(plans only), looks at n = " + ", ".join(str(x["n"]) for x in seq["looks"])
                + f" of max n {seq['max_n']}")
    if "size" in r:
        out += "; size: t-test against the published " + ("value" if len(set(
            x.published for x in e.claims)) == 1 else "range")
    return out


def rows(entries: list[Entry]) -> list[dict]:
    out = []
    for e in entries:
        c, r = e.first, e.results
        size = r.get("size") or {}
        out.append({
            "document": e.document, "test_id": e.test_id, "claims": "; ".join(x.id for x in e.claims),
            "claim": " | ".join(x.statement for x in e.claims),
            "reference": "; ".join("/".join(ref) for ref in e.refs) or "(prose)",
            "fidelity": c.fidelity, "claimed_setting": " | ".join(dict.fromkeys(x.claimed for x in e.claims)),
            "tested_setting": c.tested,
            "published": _published(e), "kind": c.kind, "estimate": _estimate(e), "n": r.get("n", ""),
            "per_seed": " ".join(_num(v) for v in (c.estimate or {}).get("per_seed", [])) if c.kind == "statistical"
            else "", "test": _tests(e), "p": _num(r.get("p")) if "p" in r else "",
            "p_holm": _num(r.get("p_holm")) if "p_holm" in r else "",
            "p_size_holm": _num(size.get("p_holm")) if size else "", "indicators": _indicators(e),
            "verdict": r["verdict"], "outcome": r.get("outcome", ""),
            "reason": r["reason"] + (f"; {c.note}" if c.note and c.kind != "untestable"
                                                             else ""),
            "seeds_needed_80pct": _seeds(e), "where": c.where, "plot": _plot_data(e)})
    return out


def _plot_data(e: Entry) -> dict | None:
    """What the HTML report draws for a statistical entry: per-seed values, mean, interval, published, null."""
    c = e.first
    if c.kind != "statistical" or not c.estimate:
        return None
    est = c.estimate
    return {"per_seed": [v for v in est.get("per_seed", []) if _finite(v)],
            "mean": est.get("mean") if _finite(est.get("mean")) else None,
            "half_width": est.get("half_width") if _finite(est.get("half_width")) else None,
            "published": [x.published for x in e.claims if _finite(x.published)], "null": c.null, "unit": c.unit}


def headline(entries: list[Entry]) -> dict:
    """{document: {fidelity: {"tests": N, "claims": M, "verdicts": {word: count}}}} (entries, never claims,
    counted; classes never added)."""
    out = {}
    for e in entries:
        h = out.setdefault(e.document, {}).setdefault(e.fidelity, {"tests": 0, "claims": 0, "verdicts": {}})
        h["tests"] += 1
        h["claims"] += len(e.claims)
        h["verdicts"][e.results["verdict"]] = h["verdicts"].get(e.results["verdict"], 0) + 1
    return out


def headline_lines(tally: dict) -> list[str]:
    lines = []
    for doc, classes in tally.items():
        for fid in FIDELITIES:
            if fid in classes:
                h = classes[fid]
                verdicts = ", ".join(f"{v} {k}" for k, v in sorted(h["verdicts"].items(), key=lambda kv: -kv[1]))
                lines.append(f"- **{doc}, {fid}**: {h['tests']} tests ({h['claims']} claims): {verdicts}")
    return lines


COLUMNS = ["document", "test_id", "claims", "claim", "reference", "source", "fidelity", "claimed_setting",
           "tested_setting", "published", "kind", "estimate", "n", "per_seed", "test", "p", "p_holm", "p_size_holm",
           "indicators", "verdict", "reason", "seeds_needed_80pct", "where"]


def sources(document: str) -> dict:
    """{(dataset, row, quantity): source line} of a document's reference CSV."""
    import csv

    from itervision.layout import reference_csv

    with open(reference_csv(document)) as f:
        return {(r["dataset"], r["row"], r["quantity"]): r["source"] for r in csv.DictReader(f)}


# What a reader can learn from a row, in the order claims.md and the report show them
GROUPS = (
    ("decided", "Decided: held, reversed, or the published size ruled out",
     "A direction or size test below Holm's 0.05, with every mechanism check the row needs passing."),
    ("not_exercised", "Not exercised at the proxy",
     "The proxy does not exercise the mechanism where the claim acts (the failed check and its figure are in the "
     "why column): no verdict on the claim either way."),
    ("inconclusive", "Inconclusive", "Tested, and neither the direction nor the published size is decided (fewer "
     "than 5 seeds: descriptive only); the seeds column says how many would be needed."),
    ("accounting", "Accounting: parameters, multiply-adds, GFLOPs, sparsity",
     "Counts at the paper configuration: independent (nothing fitted to them) or consistency (fitted, or "
     "configured to match: agreement is not reproduction)."),
    ("untestable", "Not testable at this scale",
     "Absolute figures of the document's setting (our analogue shown), or comparisons this scale does not run."),
    ("none", "No verdict (synthetic data)", "Smoke runs exercise the code path, not the claim."),
)
DECIDED = ("holds", "holds_smaller", "holds_larger", "reversed", "smaller", "larger")


def reader_group(row: dict) -> str:
    """The GROUPS key of a row, from its outcome (or, for a row without one, its verdict words)."""
    outcome = row.get("outcome") or ""
    verdict = str(row.get("verdict", ""))
    if outcome in DECIDED or (not outcome and verdict.startswith(("holds", "reversed", "reproduced in",
                                                                  "contradicted (", "smaller", "larger"))):
        return "decided"
    if outcome == "not_exercised" or verdict.startswith("not exercised"):
        return "not_exercised"
    if outcome in ("match", "mismatch") or row.get("kind") == "accounting":
        return "accounting"
    if outcome == "untestable" or verdict == UNTESTABLE:
        return "untestable"
    if outcome == "none":
        return "none"
    return "inconclusive"


def findings(table: list[dict]) -> list[str]:
    """The short block claims.md and the report open with: what held, what reversed or missed the published size,
    what the proxy does not exercise, and how many rows are inconclusive, accounting or not testable."""
    def short(row):
        return f"{row.get('document', '')}: {row['test_id']} — **{row['verdict']}** ({row['estimate']} vs " \
               f"published {row['published']})"

    decided = [r for r in table if reader_group(r) == "decided"]
    lines = ["## Findings", ""]
    lines += [f"- {_md(short(r))}" for r in decided] or ["- no claim is decided at this scale"]
    blocked = [r for r in table if reader_group(r) == "not_exercised"]
    if blocked:
        lines.append(f"- **not exercised at the proxy** ({len(blocked)}): " + _md("; ".join(
            f"{r.get('document', '')}: {r['test_id']}" for r in blocked)))
    counts = {key: sum(1 for r in table if reader_group(r) == key) for key, _, _ in GROUPS}
    acc = [r for r in table if reader_group(r) == "accounting"]
    fitted = sum(1 for r in acc if r["fidelity"] == "consistency")
    lines.append(f"- {counts['inconclusive']} inconclusive; {counts['accounting']} accounting rows "
                 f"({counts['accounting'] - fitted} independent, {fitted} consistency: fitted or configured to "
                 f"match); {counts['untestable']} not testable at this scale" + (
                     f"; {counts['none']} without a verdict (synthetic data)" if counts["none"] else ""))
    return lines


def _md(text: str) -> str:
    from itervision.reporting.escape import md_cell

    return md_cell(text)


def write(entries: list[Entry], families_: dict, md_path, csv_path, json_path, ledger_path, forest_path=None) -> None:
    """metrics/claims.md (findings first, then the rows grouped by what a reader can learn from them), .csv (the
    same cells), .json (the headline counts, for `dvc metrics`) and ledger.json (rows and Holm families, which the
    report stages read)."""
    import csv
    import io

    from itervision.io import write_json, write_text
    from itervision.reporting.escape import csv_cell, md_cell

    table = rows(entries)
    src = {}
    for row, e in zip(table, entries):
        s = src.setdefault(e.document, sources(e.document))
        row["source"] = "; ".join(dict.fromkeys(s.get(tuple(r), "") for r in e.refs)) or "prose"
    buf = io.StringIO()
    writer = csv.DictWriter(buf, COLUMNS, extrasaction="ignore")  # the report's plot data stays in ledger.json
    writer.writeheader()
    writer.writerows([{k: csv_cell(v) for k, v in row.items()} for row in table])
    write_text(csv_path, buf.getvalue())
    tally = headline(entries)
    md = ["# Claims ledger", "",
          "Every quantitative claim of both documents, one entry per test (claims resting on one test are listed "
          "together), with the setting the claim was made in and the setting tested here. Verdict words carry their "
          "scope: at the proxy they say nothing about the document's own setting. Rules and reasons: docs/ledger.md "
          "(and src/itervision/claims/). Estimates are mean ± 95 % t-interval (n seeds); p-values are "
          "Holm-adjusted once per document over every test its report prints; indicators are unadjusted and never "
          "decide a verdict. Seeds needed: 80 % power at the published effect at the level the verdict needs "
          "(Holm's alpha / m over the document's m tests), at the observed SD (and at the ends of its 95 % "
          "interval); the figure at alpha 0.05 beside it.", ""]
    md += findings(table) + ["", "Counts per document and fidelity class (classes are never added):", ""]
    md += headline_lines(tally)
    for key, title, blurb in GROUPS:
        sel = [row for row in table if reader_group(row) == key]
        if not sel:
            continue
        md += ["", f"## {title} ({len(sel)})", "", blurb, "",
               "| document | test (claim id) | claims (reference) | fidelity: claimed → tested | published | ours | "
               "tests | Holm p (direction; size) | indicators | verdict | why | seeds needed |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in sel:
            setting = f"{row['claimed_setting']} → {row['tested_setting']}" if row["tested_setting"] else \
                row["claimed_setting"]
            holm_p = "; ".join(x for x in (row["p_holm"], row["p_size_holm"]) if x)
            cells = [row["document"], row["test_id"], f"{row['claim']} ({row['reference']})",
                     f"{row['fidelity']}: {setting}", row["published"], row["estimate"], row["test"], holm_p,
                     row["indicators"], f"**{md_cell(row['verdict'])}**", row["reason"], row["seeds_needed_80pct"]]
            md.append("| " + " | ".join(c if i == 9 else md_cell(c) for i, c in enumerate(cells)) + " |")
    write_text(md_path, "\n".join(md) + "\n")
    write_json(json_path, {doc: {fid: {"tests": h["tests"], "claims": h["claims"],
                                       **dict(sorted(h["verdicts"].items()))} for fid, h in classes.items()}
                           for doc, classes in tally.items()})
    for row in table:  # what the report colours and filters by (it reads ledger.json, not this package)
        row["group"] = reader_group(row)
    forest = []
    if forest_path is not None:
        from itervision.claims.forest import write_forest

        forest = write_forest(table, forest_path)
    write_json(ledger_path, {"documents": {doc: {"family": families_.get(doc, {}),
                                                 "entries": [row for row in table if row["document"] == doc]}
                                           for doc in tally},
                             "findings": [line[2:] for line in findings(table) if line.startswith("- ")],
                             "forest": {"path": str(forest_path) if forest_path else None, "rows": forest}})


