"""The claims ledger of both documents: metrics/claims.md|csv (stage claims), metrics/claims.json (the headline
counts) and metrics/ledger.json (every entry and the Holm family, which the report stages print from).

Every study lists its document's quantitative claims (studies/<study>/claims.py), each tied to the rows of
data/reference/<study>.csv it states, with the setting the claim was made in, the setting tested here, and the
mechanisms the claim needs. docs/ledger.md gives the reasons behind each rule below.

One test, one count: claims that rest on the same test (the smallest and largest published margin, one
comparison published on ImageNet-100 and on ImageNet-200) are one entry that lists the claims it serves; a
published size is then a range. The headline counts entries ("N tests (M claims)") per document and fidelity
class, never adding classes.

Fidelity classes: same (the claim's dataset, resolution, model size and training budget), proxy (anything
else), consistency (accounting our reconstruction was fitted to: agreement is not reproduction), independent
(accounting not fitted), smoke (synthetic data: no verdict).

The tests behind a statistical entry, each named in its row:
* direction: the two-sided paired (or one-sample) t-test, i.e. a one-sided test in the claimed direction and one
  against it, each at alpha / 2;
* size (where a size is published): a t-test of the per-seed values against the published range, i.e. a
  one-sided test below its low end and one above its high end, each at alpha / 2 (for one published value, the
  two-sided test against it). Undershoot and overshoot are treated alike.
Both p-values are Holm-adjusted once, in one family per document: every test that document's report prints
(the aggregate's comparisons, tagged with a test_id) plus the ledger's size tests. Tables print these same
adjusted values.

Verdict words carry their scope. At `same`: reproduced / contradicted / not shown. At `proxy`: holds at the proxy
/ reversed at the proxy / smaller (larger) than published at the proxy / inconclusive at the proxy, and
"not exercised at the proxy: ..." where a mechanism check of the study fails. Fewer than MIN_N_VERDICT seeds
give "inconclusive (n = k)" at any fidelity: descriptive only.

Side indicators, as replication projects report them (unadjusted, never a verdict): the published value inside
the 95 % t-interval; TOST equivalence within +-|published|; the seed-to-seed SD of the effect against the
published effect (no original variance exists, so this stands in for Simonsohn's small telescopes); paired
P(A > B) (the share of seeds A wins); a bootstrap interval only from MIN_N_BOOTSTRAP seeds; seeds needed as a
range from the SD's 95 % chi-square interval, and only where the observed effect has the published sign.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
MIN_N_VERDICT = 5        # rule 4 of the statistics notes: n < 5 is descriptive only
MIN_N_BOOTSTRAP = 10     # percentile/BCa coverage of a nominal 95 % interval: 0.71-0.74 at n 3, 0.84 at 5, 0.90 at 10
FIDELITIES = ("same", "proxy", "consistency", "independent", "smoke")
UNTESTABLE = "not testable at this scale"
NO_VERDICT = "no verdict (synthetic data)"
WORDS = {  # outcome -> (word at `same`, word at `proxy`)
    "holds": ("reproduced", "holds at the proxy"),
    "holds_smaller": ("reproduced in direction, smaller than published", "holds at the proxy, smaller than published"),
    "holds_larger": ("reproduced in direction, larger than published", "holds at the proxy, larger than published"),
    "reversed": ("contradicted (reversed)", "reversed at the proxy"),
    "smaller": ("contradicted (smaller than published)", "smaller than published at the proxy"),
    "larger": ("contradicted (larger than published)", "larger than published at the proxy"),
    "inconclusive": ("not shown", "inconclusive at the proxy"),
}


@dataclass
class Claim:
    id: str
    document: str
    statement: str
    refs: list                      # [(dataset, row, quantity)] of data/reference/<document>.csv
    published: float | None         # the published effect or figure, in `unit`
    unit: str
    kind: str                       # statistical | accounting | untestable
    estimate: dict | None = None    # statistical: mean, half_width, n, sd, p, per_seed, wins, bootstrap (in `unit`)
    null: float = 0.0
    direction: int = 1              # the sign of the claimed effect against the null
    test_id: str = ""
    test: str = ""
    note: str = ""
    ours: float | None = None       # accounting: our figure; untestable: our analogue, if any
    tolerance: float = 0.01         # accounting: relative (or absolute) agreement that counts as a match
    absolute: bool = False
    fidelity: str = "proxy"
    claimed: str = ""               # the setting the claim was made in
    tested: str = ""                # the setting tested here
    needs: tuple = ()               # mechanism checks (studies/<study>/claims.py: checks) the verdict rests on
    where: str = ""                 # the generated table or file the estimate comes from


def untestable(cid, document, statement, refs, published, unit, reason, shown=None, scale=1.0, **setting) -> Claim:
    ours = None if shown is None else shown.get("mean") * scale
    return Claim(cid, document, statement, refs, published, unit, "untestable", note=reason, ours=ours,
                 estimate=None if shown is None else _scaled(shown, scale), test_id=cid, **setting)


def accounting(cid, document, statement, refs, published, value, how, tolerance=0.01, absolute=False,
               test_id=None, fidelity="independent", **setting) -> Claim:
    return Claim(cid, document, statement, refs, published, "", "accounting", ours=value, test=how,
                 tolerance=tolerance, absolute=absolute, test_id=test_id or cid, fidelity=fidelity, **setting)


def differenced(cid, document, statement, refs, published, diff, test_id, test, direction=None,
                unit="points", scale=100.0, **setting) -> Claim:
    """A claim on a paired difference of two variants' accuracies (stats.paired_difference, in fractions)."""
    if diff is None:
        return untestable(cid, document, statement, refs, published, unit, "the compared models are not in this "
                          "scale's study", **setting)
    direction = direction if direction is not None else (1 if (published or 0) >= 0 else -1)
    return Claim(cid, document, statement, refs, published, unit, "statistical", estimate=_scaled(diff, scale),
                 direction=direction, test_id=diff.get("test_id", test_id), test=test, **setting)


def quantity(cid, document, statement, refs, published, per_seed, null, unit, test_id, test, note="",
             direction=None, **setting) -> Claim:
    """A claim on a per-seed quantity (a compute saving, a time ratio) tested against `null`."""
    from itervision.stats import one_sample

    direction = direction if direction is not None else (1 if published >= null else -1)
    return Claim(cid, document, statement, refs, published, unit, "statistical",
                 estimate=one_sample(per_seed, null), null=null, direction=direction, test_id=test_id, test=test,
                 note=note, **setting)


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


# ------------------------------------------------------------------------------------------ entries

@dataclass
class Entry:
    """One test and the claims it serves."""
    document: str
    test_id: str
    claims: list
    results: dict = field(default_factory=dict)

    @property
    def first(self) -> Claim:
        return self.claims[0]

    @property
    def kind(self) -> str:
        return self.first.kind

    @property
    def fidelity(self) -> str:
        return self.first.fidelity

    @property
    def published_range(self):
        """(low, high) of the published values in the claimed direction's units (|effect| for a difference), or
        None: several claims on one test publish a range."""
        c = self.first
        vals = [c.direction * (x.published - c.null) for x in self.claims if _finite(x.published)]
        return (min(vals), max(vals)) if vals else None

    @property
    def refs(self) -> list:
        return [r for c in self.claims for r in c.refs]


def group(claims: list[Claim]) -> list[Entry]:
    """Claims of one document on one test become one entry (first-seen order). Claims grouped together must
    agree on what the test is."""
    entries: dict = {}
    for c in claims:
        key = (c.document, c.test_id or c.id)
        if key in entries:
            first = entries[key].first
            if (first.kind, first.fidelity, first.direction, first.null) != (c.kind, c.fidelity, c.direction, c.null):
                raise ValueError(f"claims {first.id} and {c.id} share test {c.test_id!r} but test different things")
            entries[key].claims.append(c)
        else:
            entries[key] = Entry(c.document, key[1], [c])
    return list(entries.values())


# ------------------------------------------------------------------------------------------ tests

def tagged(tree):
    """Every comparison dict of an aggregate that carries a test_id (depth first, in order)."""
    if isinstance(tree, dict):
        if "test_id" in tree:
            yield tree
        for v in tree.values():
            yield from tagged(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from tagged(v)


def tagged_tests(tree) -> dict:
    """{test_id: raw p} of every comparison in an aggregate (dicts carrying a test_id and a p), in order."""
    out = {}
    for node in tagged(tree):
        if "p" in node:
            out.setdefault(node["test_id"], node["p"])
    return out


def _spread(values):
    """The finite values as an array, or None when no t-test is defined (fewer than 2, or no spread)."""
    v = np.asarray([x for x in values if _finite(x)], dtype=np.float64)
    return v if len(v) >= 2 and float(v.std(ddof=1)) > 0.0 else None


def size_test(values, low: float, high: float) -> dict:
    """values (in the claimed direction's units) against the published range [low, high]: the one-sided t-test
    below `low` and the one above `high`, each at alpha / 2, so p = 2 min(p_below, p_above) (for low == high the
    two-sided test against the published value). Returns p and which side it points to."""
    v = _spread(values)
    if v is None:
        return {"p": float("nan"), "side": None}
    below = float(sps.ttest_1samp(v, low, alternative="less").pvalue)
    above = float(sps.ttest_1samp(v, high, alternative="greater").pvalue)
    return {"p": min(1.0, 2 * min(below, above)), "side": "smaller" if below <= above else "larger"}


def tost(values, bound: float) -> float:
    """TOST equivalence p of the mean within (-bound, +bound): the larger of the two one-sided t-test p-values
    (scipy's ttest_1samp with `alternative`; statsmodels' ttost_paired gives the same, one dependency more)."""
    v = _spread(values)
    if v is None or bound <= 0:
        return float("nan")
    return max(float(sps.ttest_1samp(v, -bound, alternative="greater").pvalue),
               float(sps.ttest_1samp(v, bound, alternative="less").pvalue))


def _directed(c: Claim) -> list:
    """Per-seed values in the claimed direction's units: direction * (value - null)."""
    return [c.direction * (v - c.null) for v in c.estimate.get("per_seed", [])]


def families(entries: list[Entry], aggregates: dict) -> dict:
    """{document: {test_id: {"p", "p_holm", "what"}}}: Holm once per document over every test its report prints
    (the aggregate's tagged comparisons), the ledger's own direction tests, and its size tests. A settled test
    (make settle) enters with its sequential design's stagewise p, and has no size test (its looks were chosen
    for the direction test)."""
    from itervision.stats import holm

    out = {}
    for doc in dict.fromkeys(e.document for e in entries):
        tests = {tid: {"p": p, "what": "direction"} for tid, p in tagged_tests(aggregates.get(doc, {})).items()}
        for e in entries:
            if e.document != doc or e.kind != "statistical":
                continue
            tests.setdefault(e.test_id, {"p": e.first.estimate.get("p"), "what": "direction"})
            if "sequential" in e.results:
                tests[e.test_id] = {"p": e.results["sequential"]["p"], "what": "direction (sequential)"}
                continue
            rng = e.published_range
            if rng is not None:
                e.results["size"] = size_test(_directed(e.first), *rng)
                tests[size_id(e.test_id)] = {"p": e.results["size"]["p"], "what": "size"}
        adjusted = holm([t["p"] if _finite(t["p"]) else float("nan") for t in tests.values()])
        size = sum(1 for p in adjusted if _finite(p))
        for t, p in zip(tests.values(), adjusted):
            t["p_holm"] = p
            t["family"] = f"Holm over the {size} tests of this document's report"
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
            e.results.update(p=t["p"], p_holm=t["p_holm"], family=t["family"])
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

    return {**evaluate(_directed(e.first), design["looks"], design["max_n"], design.get("alpha", ALPHA)),
            "design": design}


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
    last = looks[-1]
    where = (f"settled by a {seq['procedure']} (alpha {seq['alpha']:g}, max n {seq['max_n']}; "
             f"{len(looks)} look{'s' if len(looks) > 1 else ''} at n = {', '.join(str(x['n']) for x in looks)}): "
             f"t {_num(last['t'])} against the boundary +-{_num(last['t_bound'])} at n = {last['n']}, stagewise p "
             f"{_num(seq['p'])}, Holm p {_num(r.get('p_holm'))}")
    scope = 0 if c.fidelity == "same" else 1
    if seq["decision"] in ("holds", "reversed") and _finite(r.get("p_holm")) and r["p_holm"] < ALPHA:
        return seq["decision"], WORDS[seq["decision"]][scope], where
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


def seeds_range(e: Entry) -> dict | None:
    """Seeds a paired t-test needs for 80 % power at the published effect (the end of the published range nearest
    to no effect): at the observed SD and at the ends of its 95 % chi-square interval. None where there is no
    published size, no spread, or the observed effect opposes the published one."""
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

    sd_low, sd_high = sd_limit(sd, n, 0.025), sd_limit(sd, n, 0.975)  # the SD's 95 % chi-square interval
    return {"point": seeds_needed(effect, sd), "low": seeds_needed(effect, sd_low),
            "high": seeds_needed(effect, sd_high), "effect": effect, "sd": sd}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ------------------------------------------------------------------------------------------ rendering

def _num(v) -> str:
    if v is None or not _finite(v):
        return "—"
    if abs(v) >= 1e5:
        return f"{v:,.0f}"
    return f"{v:.4g}"


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
    fmt = [str(s[k]) if s[k] is not None else f">{10_000}" for k in ("point", "low", "high")]
    return f"{fmt[0]} ({fmt[1]}-{fmt[2]})"


def _tests(e: Entry) -> str:
    c, r = e.first, e.results
    if e.kind != "statistical":
        return c.test
    out = f"direction: {c.test}"
    if "sequential" in r:
        seq = r["sequential"]
        return out + f"; settled by a {seq['procedure']}, looks at n = " + ", ".join(
            str(x["n"]) for x in seq["looks"]) + f" of max n {seq['max_n']}"
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
            "verdict": r["verdict"], "reason": r["reason"] + (f"; {c.note}" if c.note and c.kind != "untestable"
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


def write(entries: list[Entry], families_: dict, md_path, csv_path, json_path, ledger_path) -> None:
    """metrics/claims.md (by document and fidelity class, headline first), .csv (the same cells), .json (the
    headline counts, for `dvc metrics`) and ledger.json (rows and Holm families, which the report stages read)."""
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
          "(and itervision/reporting/ledger.py). Estimates are mean ± 95 % t-interval (n seeds); p-values are "
          "Holm-adjusted once per document over every test its report prints; indicators are unadjusted and never "
          "decide a verdict. Seeds needed: 80 % power at the published effect, at the observed SD (and at the ends "
          "of its 95 % interval).", ""]
    md += headline_lines(tally)
    for doc in tally:
        for fid in FIDELITIES:
            sel = [row for row, e in zip(table, entries) if e.document == doc and e.fidelity == fid]
            if not sel:
                continue
            md += ["", f"## {doc}: {fid}", "",
                   "| claims (reference) | claimed → tested | published | ours | tests | Holm p (direction; size) "
                   "| indicators | verdict | why | seeds needed |", "|---|---|---|---|---|---|---|---|---|---|"]
            for row in sel:
                setting = f"{row['claimed_setting']} → {row['tested_setting']}" if row["tested_setting"] else \
                    row["claimed_setting"]
                holm_p = "; ".join(x for x in (row["p_holm"], row["p_size_holm"]) if x)
                cells = [f"{row['claim']} ({row['reference']})", setting, row["published"], row["estimate"],
                         row["test"], holm_p, row["indicators"], f"**{md_cell(row['verdict'])}**", row["reason"],
                         row["seeds_needed_80pct"]]
                md.append("| " + " | ".join(c if i == 7 else md_cell(c) for i, c in enumerate(cells)) + " |")
    write_text(md_path, "\n".join(md) + "\n")
    write_json(json_path, {doc: {fid: {"tests": h["tests"], "claims": h["claims"],
                                       **dict(sorted(h["verdicts"].items()))} for fid, h in classes.items()}
                           for doc, classes in tally.items()})
    write_json(ledger_path, {"documents": {doc: {"family": families_.get(doc, {}),
                                                 "entries": [row for row in table if row["document"] == doc]}
                                           for doc in tally}})


def apply_family(agg, family: dict):
    """Set p_holm on every tagged comparison of an aggregate from the document's family (in place), so a table
    prints the ledger's adjusted value; returns agg."""
    for node in tagged(agg):
        if node["test_id"] in family:
            node["p_holm"] = family[node["test_id"]]["p_holm"]
    return agg
