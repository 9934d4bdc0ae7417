"""The claims ledger: verdict rules on constructed claims, and every published reference row in the ledger the
pipeline writes."""
import csv

import pytest

from helpers import ROOT
from itervision.reporting.ledger import (CONTRADICTED, NOT_SHOWN, REPRODUCED, UNTESTABLE, accounting, assess, differenced,
                               quantity, untestable)
from itervision.stats import paired_difference


def diff_of(a, b):
    return paired_difference(a, b)


def test_verdicts_follow_the_stated_rules():
    strong = differenced("c1", "doc", "A beats B by 1 point", [], 1.0,
                         diff_of([0.80, 0.81, 0.82, 0.83, 0.84], [0.79, 0.80, 0.805, 0.82, 0.83]), "t1", "t")
    opposite = differenced("c2", "doc", "A beats B by 1 point", [], 1.0,
                           diff_of([0.70, 0.71, 0.72, 0.73, 0.74], [0.75, 0.77, 0.78, 0.78, 0.80]), "t2", "t")
    ruled_out = differenced("c3", "doc", "k = 2 costs 3.2 points", [], -3.2,
                            diff_of([0.80, 0.81, 0.79], [0.80, 0.80, 0.80]), "t3", "t", direction=-1)
    noisy = differenced("c4", "doc", "A beats B by 0.2 points", [], 0.2,
                        diff_of([0.80, 0.85, 0.78], [0.81, 0.80, 0.80]), "t4", "t")
    saving = quantity("c5", "doc", "38 % less compute", [], 0.38, [0.35, 0.40, 0.37, 0.41], 0.0, "fraction", "t5", "t")
    count_ok = accounting("c6", "doc", "7.10M active", [], 7.10e6, 7.104e6, "analytic")
    count_off = accounting("c7", "doc", "0.52 ratio", [], 0.52, 0.60, "analytic")
    absolute = untestable("c8", "doc", "92.3 %", [], 92.3, "%", "200 epochs at 32 px")
    claims = assess([strong, opposite, ruled_out, noisy, saving, count_ok, count_off, absolute])
    verdicts = [c.results["verdict"] for c in claims]
    assert verdicts == [REPRODUCED, CONTRADICTED, CONTRADICTED, NOT_SHOWN, REPRODUCED, REPRODUCED, CONTRADICTED,
                        UNTESTABLE]
    assert "outside the 95 % interval" in ruled_out.results["reason"]
    assert noisy.results["seeds_needed"] and noisy.results["seeds_needed"] > 3
    # Holm over the five distinct tests of the document, in their order
    from itervision.stats import holm

    tested = [c for c in claims if c.kind == "statistical"]
    expected = holm([c.estimate["p"] for c in tested])
    assert [c.results["p_holm"] for c in tested] == pytest.approx(expected)
    assert all(c.results["family"].startswith("the 5 distinct tests") for c in tested)


def test_claims_sharing_a_test_share_its_p_and_count_once_in_the_family():
    d = diff_of([0.80, 0.82, 0.83], [0.79, 0.80, 0.80])
    low = differenced("lo", "doc", "margin 0.2", [], 0.2, d, "same", "t")
    high = differenced("hi", "doc", "margin 0.7", [], 0.7, d, "same", "t")
    other = differenced("o", "doc", "other", [], 1.0, diff_of([0.5, 0.6, 0.7], [0.5, 0.6, 0.69]), "other", "t")
    assess([low, high, other])
    assert low.results["p_holm"] == high.results["p_holm"]
    assert low.results["family"].startswith("the 2 distinct tests")


@pytest.mark.slow
def test_every_published_reference_row_has_a_ledger_row(built_repo):
    """The ledger the pipeline wrote lists every row of data/reference/*.csv (a row may back several claims)."""
    with open(built_repo / "metrics/claims.csv") as f:
        ledger = list(csv.DictReader(f))
    listed = {ref for row in ledger for ref in row["reference"].split("; ")}
    for path in sorted((ROOT / "data/reference").glob("*.csv")):
        with open(path) as f:
            for r in csv.DictReader(f):
                assert f"{r['dataset']}/{r['row']}/{r['quantity']}" in listed, (path.name, r)
    assert {row["verdict"] for row in ledger} <= {REPRODUCED, CONTRADICTED, NOT_SHOWN, UNTESTABLE}
    md = (built_repo / "metrics/claims.md").read_text()
    assert "## recursive" in md and "## sparseformer" in md and "Holm" in md
