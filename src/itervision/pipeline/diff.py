"""`make diff [REV=...]`: what changed in the claims ledger against a revision or a DVC experiment, one line per
test whose verdict, estimate or Holm p changed (and per test that appeared or went), nothing when nothing did.

    python -m itervision.pipeline.diff            # the workspace against HEAD
    python -m itervision.pipeline.diff main~3     # against a commit, branch or tag
    python -m itervision.pipeline.diff my-exp     # against a DVC experiment (dvc exp list names it)

It reads metrics/ledger.json (git-tracked, written by the claims stage) at the revision and in the workspace:
`dvc metrics diff` lists about 200 numbers and no verdict; this is the ledger's own answer to "what changed?".
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from itervision.errors import ArgumentParser, UserError, cli_entry
from itervision.layout import LEDGER

FIELDS = (("verdict", "verdict"), ("estimate", "estimate"), ("p_holm", "Holm p"), ("p_size_holm", "size Holm p"))


def resolve(rev: str, root: Path = Path(".")) -> str:
    """A git revision for `rev`: itself when git knows it, else the ref of the DVC experiment of that name."""
    ok = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=root,
                        capture_output=True, text=True)
    if ok.returncode == 0:
        return ok.stdout.strip()
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], cwd=root,
                          capture_output=True, text=True).stdout.split()
    hits = [r for r in refs if r.rsplit("/", 1)[-1] == rev]
    if len(hits) == 1:
        return hits[0]
    raise UserError(f"'{rev}' is neither a git revision nor one DVC experiment (dvc exp list names them); give a "
                    "commit, branch, tag or experiment name")


def ledger_at(rev: str, root: Path = Path(".")) -> dict:
    out = subprocess.run(["git", "show", f"{resolve(rev, root)}:{LEDGER['ledger'].as_posix()}"], cwd=root,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise UserError(f"{LEDGER['ledger']} is not in {rev} (a revision from before the ledger, or one that never "
                        "ran the claims stage); give a later revision")
    return json.loads(out.stdout)


def entries(ledger: dict) -> dict:
    """{(document, test_id): entry} of a ledger.json."""
    return {(doc, e["test_id"]): e for doc, d in ledger.get("documents", {}).items() for e in d["entries"]}


def changes(before: dict, after: dict) -> list[str]:
    """One line per test that appeared, went, or changed in any of FIELDS, in the ledger's order."""
    old, new = entries(before), entries(after)
    lines = []
    for key, e in new.items():
        doc, test = key
        if key not in old:
            lines.append(f"+ {doc} | {test}: {e['verdict']} ({e['estimate']})")
            continue
        moved = [f"{label} {old[key].get(f, '') or '—'} -> {e.get(f, '') or '—'}" for f, label in FIELDS
                 if str(old[key].get(f, "")) != str(e.get(f, ""))]
        if moved:
            lines.append(f"~ {doc} | {test}: " + "; ".join(moved))
    lines += [f"- {doc} | {test}: was {e['verdict']}" for (doc, test), e in old.items() if (doc, test) not in new]
    return lines


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.pipeline.diff", description=__doc__.split("\n\n")[0])
    ap.add_argument("rev", nargs="?", default="HEAD", help="a commit, branch, tag or DVC experiment (default HEAD)")
    args = ap.parse_args(argv)
    path = LEDGER["ledger"]
    if not path.exists():
        raise UserError(f"{path} is missing; run make repro first")
    for line in changes(ledger_at(args.rev), json.loads(path.read_text())):
        print(line)


if __name__ == "__main__":
    main()
