"""The claims ledger: verdict rules on constructed claims (fidelity classes, named tests, one count per test, n < 5
descriptive, mechanism checks), and the ledger and tables the pipeline writes (every reference row listed, one
Holm p per test, no claim-scale word on a proxy row)."""

import csv
import json
import re

import numpy as np
import pytest
from scipy import stats as sps

from helpers import ROOT
from itervision.claims.judge import assess
from itervision.claims.model import (
    MIN_N_VERDICT,
    NO_VERDICT,
    UNTESTABLE,
    WORDS,
    accounting,
    differenced,
    quantity,
    untestable,
)
from itervision.claims.render import headline
from itervision.stats.inference import size_test
from itervision.stats import holm, paired_difference

SAME, PROXY = {"fidelity": "same"}, {"fidelity": "proxy"}
CLAIM_SCALE_WORDS = ("reproduced", "contradicted", "not shown")


def diff_of(a, b):
    return paired_difference(np.asarray(a) / 100, np.asarray(b) / 100)  # points in, fractions as the aggregate has


def seeds(center, spread=(0.3, -0.2, 0.1, -0.3, 0.2)):
    return [center + s for s in spread]


BASE = [80.0, 81.0, 82.0, 80.5, 81.5]


def verdicts(*claims, checks=None):
    entries, _ = assess(list(claims), checks=checks)
    return {e.first.id: e.results["verdict"] for e in entries}


def test_every_fidelity_class_has_its_own_words():
    holds = [b + d for b, d in zip(BASE, seeds(1.0))]
    reversed_ = [b + d for b, d in zip(BASE, seeds(-1.0))]
    noisy = [b + d for b, d in zip(BASE, (0.9, -1.1, 0.8, -0.9, 0.4))]
    claims = [
        differenced(
            "same-holds",
            "doc",
            "A beats B by 1",
            refs=[],
            published=1.0,
            diff=diff_of(holds, BASE),
            test_id="t1",
            test="t",
            **SAME,
        ),
        differenced(
            "same-rev",
            "doc",
            "A beats B by 1",
            refs=[],
            published=1.0,
            diff=diff_of(reversed_, BASE),
            test_id="t2",
            test="t",
            **SAME,
        ),
        differenced(
            "same-noise",
            "doc",
            "A beats B",
            refs=[],
            published=None,
            diff=diff_of(noisy, BASE),
            test_id="t3",
            test="t",
            **SAME,
        ),
        differenced(
            "px-holds",
            "doc",
            "A beats B by 1",
            refs=[],
            published=1.0,
            diff=diff_of(holds, BASE),
            test_id="t4",
            test="t",
            **PROXY,
        ),
        differenced(
            "px-rev",
            "doc",
            "A beats B by 1",
            refs=[],
            published=1.0,
            diff=diff_of(reversed_, BASE),
            test_id="t5",
            test="t",
            **PROXY,
        ),
        differenced(
            "px-noise",
            "doc",
            "A beats B",
            refs=[],
            published=None,
            diff=diff_of(noisy, BASE),
            test_id="t6",
            test="t",
            **PROXY,
        ),
        accounting(
            "fit", "doc", "7.10M", refs=[], published=7.10e6, value=7.104e6, how="count", fidelity="consistency"
        ),
        accounting("fit-off", "doc", "0.52", refs=[], published=0.52, value=0.60, how="count", fidelity="consistency"),
        accounting(
            "ind", "doc", "0.419 G", refs=[], published=0.419, value=0.4198, how="fvcore", fidelity="independent"
        ),
        accounting(
            "ind-off", "doc", "0.419 G", refs=[], published=0.419, value=0.5, how="fvcore", fidelity="independent"
        ),
        untestable("abs", "doc", "92.3 %", refs=[], published=92.3, unit="%", reason="200 epochs", **PROXY),
    ]
    v = verdicts(*claims)
    assert v["same-holds"] == "reproduced" and v["same-rev"] == "contradicted (reversed)"
    assert v["same-noise"] == "not shown"
    assert v["px-holds"] == "holds at the proxy" and v["px-rev"] == "reversed at the proxy"
    assert v["px-noise"] == "inconclusive at the proxy"
    assert (v["fit"], v["fit-off"]) == ("consistent (fitted)", "inconsistent")
    assert (v["ind"], v["ind-off"]) == ("reproduced", "contradicted")
    assert v["abs"] == UNTESTABLE
    assert not any(w in v[k] for k in v if k.startswith("px-") for w in CLAIM_SCALE_WORDS)


def test_overshoot_and_undershoot_are_treated_alike():
    """Ours +3 against a published +1 (an overshoot) and ours 0 against a published +2 (an undershoot) are both
    found by the same two-sided size test, and each is named for its side."""
    over = [b + d for b, d in zip(BASE, seeds(3.0))]
    under = [b + d for b, d in zip(BASE, seeds(0.0))]
    v = verdicts(
        differenced(
            "over",
            "doc",
            "A beats B by 1",
            refs=[],
            published=1.0,
            diff=diff_of(over, BASE),
            test_id="o",
            test="t",
            **PROXY,
        ),
        differenced(
            "under",
            "doc",
            "A beats B by 2",
            refs=[],
            published=2.0,
            diff=diff_of(under, BASE),
            test_id="u",
            test="t",
            **PROXY,
        ),
    )
    assert v == {"over": "holds at the proxy, larger than published", "under": "smaller than published at the proxy"}
    # the size test is symmetric: values mirrored around the published value give the same p, the other side
    values = np.array(seeds(1.0))
    above, below = size_test(values, 0.0, 0.0), size_test(-values, 0.0, 0.0)
    assert above["p"] == pytest.approx(below["p"]) and (above["side"], below["side"]) == ("larger", "smaller")
    assert size_test(values + 1.0, 0.0, 0.0)["p"] == pytest.approx(sps.ttest_1samp(values + 1.0, 0.0).pvalue)


def test_claims_on_one_test_count_once_and_a_published_range_is_tested_at_its_ends():
    d = diff_of([b + x for b, x in zip(BASE, seeds(0.5))], BASE)
    low = differenced(
        "lo",
        "doc",
        "margin 0.2",
        refs=[("all", "m", "min")],
        published=0.2,
        diff=d,
        test_id="same test",
        test="t",
        **PROXY,
    )
    high = differenced(
        "hi",
        "doc",
        "margin 0.7",
        refs=[("all", "m", "max")],
        published=0.7,
        diff=d,
        test_id="same test",
        test="t",
        **PROXY,
    )
    other = differenced(
        "o", "doc", "other", refs=[], published=1.0, diff=diff_of(BASE, BASE[::-1]), test_id="other", test="t", **PROXY
    )
    entries, family = assess([low, high, other])
    assert len(entries) == 2 and [c.id for c in entries[0].claims] == ["lo", "hi"]
    assert entries[0].published_range == (0.2, 0.7)
    # one family: 2 direction tests and 2 size tests, Holm over the 4, each printed once
    assert len(family["doc"]) == 4
    raw = [t["p"] for t in family["doc"].values()]
    assert [t["p_holm"] for t in family["doc"].values()] == pytest.approx(holm(raw))
    tally = headline(entries)["doc"]["proxy"]
    assert (tally["tests"], tally["claims"], sum(tally["verdicts"].values())) == (2, 3, 2)
    # the size test of a range: inside it the mean is not "smaller" or "larger"
    inside = size_test([0.45, 0.5, 0.55, 0.4, 0.6], 0.2, 0.7)
    assert inside["p"] > 0.5


def test_fewer_than_five_seeds_stay_descriptive():
    three = differenced(
        "n3",
        "doc",
        "A beats B by 1",
        refs=[],
        published=1.0,
        diff=diff_of([81, 82.5, 83], [70, 71, 72]),
        test_id="t",
        test="t",
        **SAME,
    )  # a huge, clear effect
    entries, _ = assess([three])
    assert entries[0].results["verdict"] == "inconclusive (n = 3)" and MIN_N_VERDICT == 5
    assert "seeds_needed" not in entries[0].results  # nothing is planned from a descriptive row here


def test_synthetic_data_give_no_verdict():
    smoke = differenced(
        "s",
        "doc",
        "A beats B by 1",
        refs=[],
        published=1.0,
        diff=diff_of(seeds(90.0), BASE),
        test_id="t",
        test="t",
        fidelity="smoke",
    )
    assert verdicts(smoke) == {"s": NO_VERDICT}


def test_an_untrained_first_round_turns_early_exit_rows_into_not_exercised():
    gain = differenced(
        "ee",
        "doc",
        "early exit is 1.8 points more accurate",
        refs=[],
        published=1.83,
        diff=diff_of([b + d for b, d in zip(BASE, seeds(-5.0))], BASE),
        test_id="t",
        test="t",
        needs=("round1_trained",),
        **PROXY,
    )
    checks = {"doc": {"round1_trained": {"ok": False, "figure": "round 1 77.65 % vs sf-static-9 86.09 %"}}}
    entries, _ = assess([gain], checks=checks)
    assert entries[0].results["verdict"] == "not exercised at the proxy"
    assert "77.65" in entries[0].results["reason"]
    checks["doc"]["round1_trained"]["ok"] = True  # the same numbers with a trained round 1: a real verdict
    entries, _ = assess([gain], checks=checks)
    assert entries[0].results["verdict"] == "reversed at the proxy"
    # at the document's own setting a mechanism check does not apply: the setting is the claim's
    same = differenced(
        "ee",
        "doc",
        "early exit",
        refs=[],
        published=1.83,
        diff=diff_of([b + d for b, d in zip(BASE, seeds(-5.0))], BASE),
        test_id="t",
        test="t",
        needs=("round1_trained",),
        **SAME,
    )
    assert (
        verdicts(same, checks={"doc": {"round1_trained": {"ok": False, "figure": "x"}}})["ee"]
        == "contradicted (reversed)"
    )


def test_paired_probability_of_improvement_counts_seed_pairs():
    a = [0.80, 0.70, 0.60, 0.50, 0.40]
    b = [0.79, 0.69, 0.59, 0.49, 0.39]  # A wins on every seed, yet most of B's runs beat most of A's
    entries, _ = assess(
        [
            differenced(
                "p",
                "doc",
                "A beats B",
                refs=[],
                published=None,
                diff=paired_difference(a, b),
                test_id="t",
                test="t",
                **PROXY,
            )
        ]
    )
    brute = sum(x > y for x, y in zip(a, b)) / len(a)
    assert entries[0].results["p_improvement_paired"] == brute == 1.0
    assert paired_difference(a, b)["bootstrap"]["p_improvement"] == pytest.approx(0.6)  # all pairs: misleading


def test_seeds_needed_is_a_range_and_absent_when_the_effect_opposes_the_published_one():
    noisy = [b + d for b, d in zip(BASE, (0.9, -0.6, 0.8, -0.5, 0.4))]
    same_sign = differenced(
        "a",
        "doc",
        "A beats B by 0.2",
        refs=[],
        published=0.2,
        diff=diff_of(noisy, BASE),
        test_id="ta",
        test="t",
        **PROXY,
    )
    opposite = differenced(
        "b",
        "doc",
        "A beats B by 0.2",
        refs=[],
        published=0.2,
        diff=diff_of([b - d for b, d in zip(BASE, (0.9, -0.6, 0.8, -0.5, 0.4))], BASE),
        test_id="tb",
        test="t",
        **PROXY,
    )
    entries, _ = assess([same_sign, opposite])
    s = entries[0].results["seeds_needed"]
    assert entries[0].results["outcome"] == "inconclusive" and s["low"] <= s["point"] <= s["high"]
    assert entries[1].results["seeds_needed"] == {"opposite": True}


def test_a_quantity_claim_is_tested_against_its_null():
    saving = quantity(
        "q",
        "doc",
        "38 % less compute",
        refs=[],
        published=0.38,
        per_seed=[0.35, 0.40, 0.37, 0.41, 0.39],
        null=0.0,
        unit="fraction",
        test_id="t",
        test="t",
        **PROXY,
    )
    assert verdicts(saving) == {"q": "holds at the proxy"}
    assert set(WORDS) >= {"holds", "reversed", "smaller", "larger", "inconclusive"}


@pytest.mark.slow
def test_the_written_ledger_lists_every_reference_row_and_no_proxy_row_speaks_for_the_document(built_repo):
    with open(built_repo / "metrics/claims.csv") as f:
        ledger = list(csv.DictReader(f))
    listed = {ref for row in ledger for ref in row["reference"].split("; ")}
    for path in sorted(p for p in (ROOT / "data/reference").glob("*.csv") if p.name != "fitted.csv"):
        with open(path) as f:
            for r in csv.DictReader(f):
                assert f"{r['dataset']}/{r['row']}/{r['quantity']}" in listed, (path.name, r)
    for row in ledger:
        if row["fidelity"] == "proxy":
            assert not any(row["verdict"].startswith(w) for w in CLAIM_SCALE_WORDS), row
    md = (built_repo / "metrics/claims.md").read_text()
    assert md.index("## Findings") < md.index("## Inconclusive") and "tests (" in md and "Holm" in md
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    cells = {len(line.replace("\\|", "").split("|")) for line in rows}
    assert len(cells) == 1, cells  # parsed as a Markdown table, every row has the header's number of cells


@pytest.mark.slow
def test_every_table_prints_the_ledgers_holm_p(built_repo):
    """One family per document, computed once: every Holm p a table prints is one of the ledger's adjusted values
    for that document (formatted as the tables format them)."""
    from itervision.reporting.tables import fmt_p

    ledger = json.loads((built_repo / "metrics/ledger.json").read_text())
    printed = 0
    for doc, d in ledger["documents"].items():
        allowed = {fmt_p(t["p_holm"]) for t in d["family"].values()}
        for table in sorted((built_repo / f"metrics/{doc}/tables").glob("*.csv")):
            with open(table) as f:
                rows = list(csv.DictReader(f))
            for col in [c for c in (rows[0] if rows else {}) if c.startswith("Holm p")]:
                for r in rows:
                    if r[col] not in ("", "—"):
                        assert r[col] in allowed, (table.name, col, r[col])
                        printed += 1
        agg = json.loads((built_repo / f"metrics/{doc}/aggregate.json").read_text())
        assert "p_holm" not in json.dumps(agg)  # the aggregate adjusts nothing itself
    assert printed > 0
    table3 = (built_repo / "metrics/sparseformer/tables/table3_claims.md").read_text()
    for entry in ledger["documents"]["sparseformer"]["entries"]:
        if entry["kind"] != "untestable":
            assert entry["verdict"] in table3
    assert not re.search(r"holds at this scale|does not hold at this scale", table3)
