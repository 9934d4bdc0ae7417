"""The verdicts of the claims ledger: each document's Holm family, the tests behind a statistical entry, the
mechanism checks, the sequential decisions of settled tests, and the side indicators (docs/ledger.md).

The tests behind a statistical entry, each named in its row:
* direction: the two-sided paired (or one-sample) t-test, i.e. a one-sided test in the claimed direction and one
  against it, each at alpha / 2;
* size (where a size is published): a t-test of the per-seed values against the published range, i.e. a
  one-sided test below its low end and one above its high end, each at alpha / 2 (for one published value, the
  two-sided test against it; stats.inference.size_test). Undershoot and overshoot are treated alike.
Both p-values are Holm-adjusted once, in one family per document: every test that document's report prints
(the aggregate's comparisons, tagged with a test_id) plus the ledger's size tests. Tables print these same
adjusted values.

Verdict words carry their scope. At `same`: reproduced / contradicted / not shown. At `proxy`: holds at the proxy
/ reversed at the proxy / smaller (larger) than published at the proxy / inconclusive at the proxy, and
"not exercised at the proxy: ..." where a mechanism check the claim names fails (every check measures the
mechanism where the claim acts: studies/<study>/claims.py, checks). Fewer than MIN_N_VERDICT seeds give
"inconclusive (n = k)" at any fidelity: descriptive only.

Side indicators, as replication projects report them (unadjusted, never a verdict): the published value inside
the 95 % t-interval; TOST equivalence within +-|published|; the seed-to-seed SD of the effect against the
published effect (no original variance exists, so this stands in for Simonsohn's small telescopes); paired
P(A > B) (the share of seeds A wins); a bootstrap interval only from MIN_N_BOOTSTRAP seeds; seeds needed as a
range from the SD's 95 % chi-square interval, at Holm's alpha / m (the level the verdict needs), and only where
the observed effect has the published sign.
"""
from __future__ import annotations

from itervision.claims.model import (ALPHA, MIN_N_BOOTSTRAP, MIN_N_VERDICT, NO_VERDICT, UNTESTABLE, WORDS, Claim,
                                     Entry, _finite, _num, group)
from itervision.stats.inference import size_test, tagged, tost

def tagged_tests(tree) -> dict:
    """{test_id: raw p} of every comparison in an aggregate (dicts carrying a test_id and a p), in order."""
    out = {}
    for node in tagged(tree):
        if "p" in node:
            out.setdefault(node["test_id"], node["p"])
    return out


def _directed(c: Claim) -> list:
    """Per-seed values in the claimed direction's units: direction * (value - null)."""
    return [c.direction * (v - c.null) for v in c.estimate.get("per_seed", [])]


def families(entries: list[Entry], aggregates: dict) -> dict:
    """{document: {test_id: {"p", "p_holm", "what"}}}: Holm once per document over every test its report prints
    (the aggregate's tagged comparisons), the ledger's own direction tests, and its size tests. A settled test
    (make settle) enters with its sequential design's stagewise p, and keeps its size test: over the seeds the
    sequence used (after the pilot, up to where it stopped)."""
    from itervision.stats import holm

    out = {}
    for doc in dict.fromkeys(e.document for e in entries):
        tests = {tid: {"p": p, "what": "direction"} for tid, p in tagged_tests(aggregates.get(doc, {})).items()}
        for e in entries:
            if e.document != doc or e.kind != "statistical":
                continue
            tests.setdefault(e.test_id, {"p": e.first.estimate.get("p"), "what": "direction"})
            values = _directed(e.first)
            if "sequential" in e.results:
                seq = e.results["sequential"]
                tests[e.test_id] = {"p": seq["p"], "what": "direction (sequential)"}
                values = values[seq.get("pilot", 0): seq["stopped_at"]]
            rng = e.published_range
            if rng is not None:
                e.results["size"] = size_test(values, *rng)
                tests[size_id(e.test_id)] = {"p": e.results["size"]["p"], "what": "size"}
        adjusted = holm([t["p"] if _finite(t["p"]) else float("nan") for t in tests.values()])
        size = sum(1 for p in adjusted if _finite(p))
        for t, p in zip(tests.values(), adjusted):
            t["p_holm"] = p
            t["family"] = f"Holm over the {size} tests of this document's report"
            t["family_size"] = size
        out[doc] = tests
    return out


def size_id(test_id: str) -> str:
    return f"{test_id} [against the published size]"


# ------------------------------------------------------------------------------------------ verdicts

def assess(claims: list[Claim], aggregates: dict | None = None, checks: dict | None = None):
    """Group the claims into entries, build each document's Holm family, and judge every entry in place.
    aggregates: {document: aggregate.json}; checks: {document: {name: {"ok", "figure"}}} (mechanism checks).
    Returns (entries, families)."""
    entries = group(claims)
    for e in entries:
        design = ((aggregates or {}).get(e.document, {}).get("settle") or {}).get(e.test_id)
        if design and e.kind == "statistical":
            e.results["sequential"] = settled(e, design)
    fam = families(entries, aggregates or {})
    for e in entries:
        if e.kind == "statistical":
            t = fam[e.document][e.test_id]
            e.results.update(p=t["p"], p_holm=t["p_holm"], family=t["family"], family_size=t["family_size"])
            if "size" in e.results:
                e.results["size"]["p_holm"] = fam[e.document][size_id(e.test_id)]["p_holm"]
            e.results.update(indicators(e))
        e.results["outcome"], e.results["verdict"], e.results["reason"] = judge(e, (checks or {}).get(e.document, {}))
        if e.results["outcome"] == "inconclusive" and "sequential" not in e.results:
            e.results["seeds_needed"] = seeds_range(e)
    return entries, fam


def settled(e: Entry, design: dict) -> dict:
    """The sequential test of a settled entry over its per-seed values (in seed order) at the looks make settle
    took (stats/sequential.py)."""
    from itervision.stats.sequential import evaluate

    return {**evaluate(_directed(e.first), design["looks"], design["max_n"], design.get("alpha", ALPHA),
                       pilot=design.get("pilot", 0)), "design": design}


def judge(e: Entry, checks: dict) -> tuple[str, str, str]:
    """(outcome, verdict word, reason) of one entry."""
    c = e.first
    if c.fidelity == "smoke":
        return "none", NO_VERDICT, "synthetic data exercise the code path, not the claim"
    if c.kind == "untestable":
        return "untestable", UNTESTABLE, c.note
    if c.kind == "accounting":
        return _judge_accounting(e)
    n = c.estimate.get("n", 0)
    if c.fidelity == "proxy":
        failed = [checks.get(name, {"ok": False, "figure": f"no check {name!r} computed"}) for name in c.needs]
        failed = [f for f in failed if not f["ok"]]
        if failed:
            return "not_exercised", "not exercised at the proxy", "; ".join(f["figure"] for f in failed)
    if "sequential" in e.results:
        return _judge_sequential(e)
    if n < MIN_N_VERDICT:
        return "descriptive", f"inconclusive (n = {n})", f"fewer than {MIN_N_VERDICT} seeds: descriptive only"
    outcome, reason = _outcome(e)
    word = WORDS[outcome][0 if c.fidelity == "same" else 1]
    return outcome, word, reason


def _outcome(e: Entry) -> tuple[str, str]:
    c, r = e.first, e.results
    mean, p = c.direction * (c.estimate["mean"] - c.null), r.get("p_holm")
    size = r.get("size") or {}
    size_sig = _finite(size.get("p_holm")) and size["p_holm"] < ALPHA
    direction = f"direction test Holm p {_num(p)}"
    size_txt = f"size test Holm p {_num(size.get('p_holm'))}" if size else ""
    if _finite(p) and p < ALPHA and mean < 0:
        return "reversed", f"{direction} < {ALPHA}, against the claimed direction"
    if _finite(p) and p < ALPHA:
        if size_sig:
            return f"holds_{size['side']}", f"{direction} < {ALPHA} in the claimed direction; {size_txt} < {ALPHA}"
        return "holds", f"{direction} < {ALPHA} in the claimed direction" + (f"; {size_txt}" if size else "")
    if size_sig:
        return size["side"], f"{size_txt} < {ALPHA}: the published size is ruled out ({direction})"
    if not _finite(p):
        return "inconclusive", "no p (constant per-seed values)"
    return "inconclusive", f"{direction}" + (f", {size_txt}" if size else "") + f": neither below {ALPHA}"


def _judge_sequential(e: Entry) -> tuple[str, str, str]:
    """A settled entry: the sequential design's decision, gated by the document's Holm family like every test."""
    c, r, seq = e.first, e.results, e.results["sequential"]
    looks = seq["looks"]
    if not looks:
        return "open", f"inconclusive so far (settling: no look of the sequence yet, max n {seq['max_n']})", \
            f"the seeds of the sequence's first look are not trained yet; make settle CLAIM='{e.test_id}'"
    last = looks[-1]
    pilot = seq.get("pilot", 0)
    where = (f"settled by a {seq['procedure']} (alpha {seq['alpha']:.3g}, max n {seq['max_n']}; "
             + (f"the pilot's {pilot} seeds planned it, the seeds after them test; " if pilot else "")
             + f"{len(looks)} look{'s' if len(looks) > 1 else ''} at n = {', '.join(str(x['n']) for x in looks)}): "
             f"t {_num(last['t'])} against the boundary +-{_num(last['t_bound'])} at n = {last['n']}, stagewise p "
             f"{_num(seq['p'])}, Holm p {_num(r.get('p_holm'))}")
    scope = 0 if c.fidelity == "same" else 1
    size = r.get("size") or {}
    size_sig = _finite(size.get("p_holm")) and size["p_holm"] < ALPHA and seq["decision"] != "open"
    if size:
        where += f"; size test over the sequence's seeds Holm p {_num(size.get('p_holm'))}"
    if seq["decision"] == "holds" and _finite(r.get("p_holm")) and r["p_holm"] < ALPHA:
        outcome = f"holds_{size['side']}" if size_sig else "holds"
        return outcome, WORDS[outcome][scope], where
    if seq["decision"] == "reversed" and _finite(r.get("p_holm")) and r["p_holm"] < ALPHA:
        return "reversed", WORDS["reversed"][scope], where
    if size_sig:  # the direction undecided, the published size ruled out (a settled row keeps its size test)
        return size["side"], WORDS[size["side"]][scope], where
    if seq["decision"] == "done" or seq["decision"] in ("holds", "reversed"):
        return "inconclusive", WORDS["inconclusive"][scope] + f" (settled, n = {last['n']})", \
            where + ": no boundary crossed at the design's last look" * (seq["decision"] == "done")
    return "open", f"inconclusive so far (settling: n = {last['n']} of {seq['max_n']})", \
        where + f"; the sequence continues with make settle CLAIM='{e.test_id}'"


def _judge_accounting(e: Entry) -> tuple[str, str, str]:
    reasons, ok = [], True
    for c in e.claims:
        if c.ours is None or not _finite(c.ours):
            return "untestable", UNTESTABLE, "no figure at the paper configuration"
        off = abs(c.ours - c.published) if c.absolute else abs(c.ours - c.published) / abs(c.published)
        ok = ok and off <= c.tolerance
        what = f"{off:.3g}" if c.absolute else f"{100 * off:.2f} %"
        tol = f"{c.tolerance:g}" if c.absolute else f"{100 * c.tolerance:g} %"
        reasons.append(f"ours {c.ours:,.4g} vs published {c.published:,.4g} ({what} apart; tolerance {tol})")
    if e.fidelity == "consistency":
        word = "consistent (fitted)" if ok else "inconsistent"
        reasons.append("our unstated dimensions were fitted to the document's figures: consistency, not reproduction")
    else:
        word = "reproduced" if ok else "contradicted"
    return ("match" if ok else "mismatch"), word, "; ".join(reasons)


def indicators(e: Entry) -> dict:
    """The side indicators of a statistical entry (unadjusted; never a verdict)."""
    c = e.first
    est, rng = c.estimate, e.published_range
    values, n = _directed(c), est.get("n", 0)
    out = {"n": n}
    mean, half, sd = est.get("mean"), est.get("half_width"), est.get("sd")
    if rng is not None and _finite(half):
        lo, hi = sorted(c.null + c.direction * x for x in rng)
        out["published_in_ci"] = bool(mean - half <= hi and lo <= mean + half)
        smallest = min(abs(x) for x in rng)
        out["tost_p"] = tost(values, smallest)
        if _finite(sd):
            out["telescope"] = f"seed SD {sd:.3g} {'>' if sd > smallest else '<='} |published| {smallest:.3g}"
    if "wins" in est and n:  # A - B as the test states it, over the seed pairs
        out["p_improvement_paired"] = (est["wins"] + 0.5 * est.get("ties", 0)) / n
    boot = est.get("bootstrap") or {}
    low, high = boot.get("diff_low", boot.get("low")), boot.get("diff_high", boot.get("high"))
    if n >= MIN_N_BOOTSTRAP and _finite(low) and _finite(high):
        out["bootstrap_95"] = (low, high)
    return out


def holm_level(e: Entry) -> float:
    """The level a test of this entry must reach in its document's Holm family when it is the family's smallest p:
    alpha / m over the m tests (Holm's first step). Planning at it is conservative for any other rank (docs/ledger.md
    "power at the level the verdict uses")."""
    return ALPHA / max(1, e.results.get("family_size") or 1)


def seeds_range(e: Entry) -> dict | None:
    """Seeds a paired t-test needs for 80 % power at the published effect (the end of the published range nearest
    to no effect), at the Holm level the verdict needs (holm_level): at the observed SD and at the ends of its 95 %
    chi-square interval; the observed SD's figure at alpha 0.05 beside it. None where there is no published size,
    no spread, or the observed effect opposes the published one."""
    from itervision.stats import seeds_needed

    c, rng = e.first, e.published_range
    if c.kind != "statistical" or rng is None:
        return None
    est, n = c.estimate, c.estimate.get("n", 0)
    sd, effect = est.get("sd"), min(rng, key=abs)
    if not _finite(sd) or sd <= 0 or n < 2:
        return None
    if c.direction * (est["mean"] - c.null) * effect <= 0:
        return {"opposite": True}
    from itervision.stats.sequential import sd_limit

    level = holm_level(e)
    sd_low, sd_high = sd_limit(sd, n, 0.025), sd_limit(sd, n, 0.975)  # the SD's 95 % chi-square interval
    return {"point": seeds_needed(effect, sd, alpha=level), "low": seeds_needed(effect, sd_low, alpha=level),
            "high": seeds_needed(effect, sd_high, alpha=level), "at_05": seeds_needed(effect, sd), "alpha": level,
            "effect": effect, "sd": sd}


def apply_family(agg, family: dict):
    """Set p_holm on every tagged comparison of an aggregate from the document's family (in place), so a table
    prints the ledger's adjusted value; returns agg."""
    for node in tagged(agg):
        if node["test_id"] in family:
            node["p_holm"] = family[node["test_id"]]["p_holm"]
    return agg
