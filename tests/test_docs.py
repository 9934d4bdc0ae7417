"""The figures the front page and docs/results.md quote are the committed ones: every "mean ± half-width" they
quote appears in a generated table, and the ledger's verdict counts on the front page are metrics/claims.json's.
A rerun of the pipeline that moves a number makes this fail until the text is updated (no stale prose)."""
import json
import re

import pytest

from helpers import ROOT

INTERVAL = re.compile(r"([−-]?\d+\.\d+) ± (\d+\.\d+)")
DOCS = ["README.md", "docs/results.md"]


def generated_text() -> str:
    files = sorted((ROOT / "metrics").rglob("*.md"))
    assert files, "no generated tables under metrics/"
    return "\n".join(f.read_text() for f in files).replace("−", "-")


def stale_figures(text: str, tables: str) -> list[str]:
    """The "m ± h" of `text` that no table has (a sign may be dropped in prose: "+0.15" for a table's "0.15"); an
    interval broken over two lines of the text counts too."""
    return [f"{m} ± {h}" for m, h in INTERVAL.findall(re.sub(r"\s+", " ", text))
            if f"{m.replace('−', '-')} ± {h}" not in tables and f"{m.lstrip('−+-')} ± {h}" not in tables]


@pytest.mark.parametrize("doc", DOCS)
def test_every_interval_quoted_is_in_a_generated_table(doc):
    text = (ROOT / doc).read_text()
    assert doc == "README.md" or INTERVAL.findall(text), f"{doc} quotes no interval"  # the front page links them
    stale = stale_figures(text, generated_text())
    assert not stale, f"{doc} quotes figures no generated table has (stale? rerun and update): {stale}"


def headline_rows(counts: dict) -> list[str]:
    """The front page's headline table rows, as metrics/claims.json says they must read: per document and fidelity
    class, tests (claims) and each verdict word's count, most frequent first."""
    names = {"recursive": "recursive DSA-MoE (000)", "sparseformer": "recurrent SparseFormer (003)"}
    rows = []
    for study, classes in counts.items():
        for fid, h in classes.items():
            verdicts = sorted(((n, w) for w, n in h.items() if w not in ("tests", "claims")),
                              key=lambda x: (-x[0], x[1]))
            rows.append(f"| {names[study]} | {fid} | {h['tests']} ({h['claims']}) | "
                        + ", ".join(f"{n} {w}" for n, w in verdicts) + " |")
    return rows


def test_the_front_page_headline_is_the_ledgers():
    counts = json.loads((ROOT / "metrics/claims.json").read_text())
    readme = (ROOT / "README.md").read_text().splitlines()
    for row in headline_rows(counts):
        assert row in readme, f"README lacks the ledger's headline row: {row}"


def test_the_check_catches_a_stale_figure():
    tables = "| sa-mlp | 86.65 ± 0.41 (5) |\n| diff | -0.31 ± 0.68 (5) |"
    assert stale_figures("top-1 86.65 ± 0.41, diff −0.31 ± 0.68", tables) == []
    assert stale_figures("top-1 86.71 ± 0.45 and 86.65 ± 0.41", tables) == ["86.71 ± 0.45"]


def test_the_front_page_is_a_front_page():
    """At most 150 lines: what it is, the two commands, the ledger, where each table lives, how-to; the rest is in
    docs/, and every docs/ page the README links exists."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert readme.index("make repro") < readme.index("## Results") < readme.index("## How to")
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link
