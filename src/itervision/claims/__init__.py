"""The claims ledger of both documents: the claim model (model.py), the verdicts (judge.py), the files and the
forest plot (render.py, forest.py). Each study lists its document's claims in studies/<study>/claims.py;
docs/ledger.md gives the reasons behind every rule."""
