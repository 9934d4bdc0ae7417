"""The claim model of the ledger: a Claim (one quantitative claim of a document, tied to the rows of
data/reference/<study>.csv it states, the setting it was made in, the setting tested here and the mechanism
checks its verdict rests on), the builders the studies' claims modules use (keyword-only after the id, document
and statement), and an Entry (one test and the claims it serves). Judging is claims/judge.py, rendering
claims/render.py; docs/ledger.md gives the reasons behind every rule.

One test, one count: claims that rest on the same test (the smallest and largest published margin, one
comparison published on ImageNet-100 and on ImageNet-200, two published rows that count one computation) are one
entry that lists the claims it serves; a published size is then a range. The headline counts entries ("N tests
(M claims)") per document and fidelity class, never adding classes.

Fidelity classes: same (the claim's dataset, resolution, model size and training budget), proxy (anything
else), consistency (accounting our reconstruction was fitted to, or whose configuration records a choice made
to match a published figure: agreement is not reproduction), independent (accounting not fitted), smoke
(synthetic data: no verdict).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

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


def untestable(cid, document, statement, *, refs, published, unit, reason, shown=None, scale=1.0, **setting) -> Claim:
    ours = None if shown is None else shown.get("mean") * scale
    return Claim(cid, document, statement, refs, published, unit, "untestable", note=reason, ours=ours,
                 estimate=None if shown is None else _scaled(shown, scale), test_id=cid, **setting)


def accounting(cid, document, statement, *, refs, published, value, how, tolerance=0.01, absolute=False,
               test_id=None, fidelity="independent", **setting) -> Claim:
    return Claim(cid, document, statement, refs, published, "", "accounting", ours=value, test=how,
                 tolerance=tolerance, absolute=absolute, test_id=test_id or cid, fidelity=fidelity, **setting)


def differenced(cid, document, statement, *, refs, published, diff, test_id, test, direction=None,
                unit="points", scale=100.0, **setting) -> Claim:
    """A claim on a paired difference of two variants' accuracies (stats.paired_difference, in fractions)."""
    if diff is None:
        return untestable(cid, document, statement, refs=refs, published=published, unit=unit,
                          reason="the compared models are not in this scale's study", **setting)
    direction = direction if direction is not None else (1 if (published or 0) >= 0 else -1)
    return Claim(cid, document, statement, refs, published, unit, "statistical", estimate=_scaled(diff, scale),
                 direction=direction, test_id=diff.get("test_id", test_id), test=test, **setting)


def quantity(cid, document, statement, *, refs, published, per_seed, null, unit, test_id, test, note="",
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


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num(v) -> str:
    if v is None or not _finite(v):
        return "—"
    if abs(v) >= 1e5:
        return f"{v:,.0f}"
    return f"{v:.4g}"
