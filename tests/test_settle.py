"""make settle (pipeline/settle.py): the params it writes, the runs it plans, its refusals, and at the tiny scale
the whole command: only the claim's new seeds train, the ledger row names the procedure, a second settle continues
the sequence."""
import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from itervision.config.params import check_params, load_params
from itervision.errors import UserError
from itervision.pipeline.settle import Target, find, missing_runs, write_settle

from helpers import BIN, ROOT, sh


def cpu_params(tmp_path):
    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "configs/scales/cpu.yaml", path)  # the default run (params.yaml may hold a settle)
    return path, load_params(path)


def k2_target(**kw):
    return Target("recursive", "fashion_mnist: dsa-moe-k2 - dsa-moe", "fashion_mnist", ["dsa-moe-k2", "dsa-moe"],
                  [0.1, -0.3, -0.3], 3.2, "points", "inconclusive (n = 3)", **kw)


def test_the_runs_a_look_needs_fill_what_each_model_lacks(tmp_path):
    """k2 (ablation seeds 0-2) against dsa-moe (main seeds 0-4): n 6 needs k2's 3, 4, 5 and dsa-moe's 5 only."""
    _, p = cpu_params(tmp_path)
    assert missing_runs(p, k2_target(), 6) == [("dsa-moe-k2", 3), ("dsa-moe-k2", 4), ("dsa-moe-k2", 5),
                                               ("dsa-moe", 5)]
    assert missing_runs(p, k2_target(), 3) == []


def test_settle_writes_only_its_group_and_the_runs_follow_from_the_looks(tmp_path):
    path, p = cpu_params(tmp_path)
    before = path.read_text()
    design = {"study": "recursive", "dataset": "fashion_mnist", "models": ["dsa-moe-k2", "dsa-moe"], "looks": [3, 6],
              "max_n": 6}
    write_settle(path, p, {"fashion_mnist: dsa-moe-k2 - dsa-moe": design})
    after = path.read_text()
    head = before[: before.index("\nsettle:")]
    assert after.startswith(head) and "# itervision parameters" in after  # comments and every other group kept
    q = load_params(path)
    assert q.settle_claims["fashion_mnist: dsa-moe-k2 - dsa-moe"]["looks"] == [3, 6]
    assert q.settle_runs == {("fashion_mnist", "dsa-moe-k2"): [3, 4, 5], ("fashion_mnist", "dsa-moe"): [5]}
    from itervision.config.matrix import common_seeds, expected_runs, seeds_for

    assert seeds_for(q, "dsa-moe-k2", "fashion_mnist") == [0, 1, 2, 3, 4, 5]
    assert seeds_for(q, "sa-moe", "fashion_mnist") == [0, 1, 2, 3, 4]  # no other model gains a seed
    assert common_seeds(q, "fashion_mnist", "dsa-moe-k2", "dsa-moe") == [0, 1, 2, 3, 4, 5]
    assert len(expected_runs(q, "recursive")) == len(expected_runs(p, "recursive")) + 4
    write_settle(path, q, {})  # back to no claims: no extra run, the rest of the file as it was
    assert load_params(path).settle_runs == {} and path.read_text().startswith(head)


@pytest.mark.parametrize("run, message", [
    ({"dataset": "fashion_mnist", "model": "dsa-moe", "seed": 3}, "already runs"),
    ({"dataset": "fashion_mnist", "model": "sf-recurrent", "seed": 7}, "does not run on"),
    ({"dataset": "fashion_mnist", "model": "dsa-moe"}, "must be {study, dataset, model, seed, code}"),
    ({"dataset": "fashion_mnist", "model": "dsa-moe", "seed": 9, "code": "src/itervision/models/sparseformer.py"},
     "code must be src/itervision/models/recursive.py"),
    ({"dataset": "fashion_mnist", "model": "dsa-moe", "seed": -1}, "seeds are integers"),
])
def test_a_malformed_settle_group_is_refused_in_one_line(tmp_path, run, message):
    path, _ = cpu_params(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["settle"]["runs"] = {"x": {"study": "recursive", "code": "src/itervision/models/recursive.py", **run}}
    with pytest.raises(UserError, match=re.escape(message)):
        check_params(raw)


def test_a_claim_is_found_by_a_unique_part_of_its_test_id():
    tests = [k2_target(), Target("recursive", "fashion_mnist: dsa-moe - sa-mlp", "fashion_mnist",
                                 ["dsa-moe", "sa-mlp"], [0.1, 0.2], 0.2, "points", "x")]
    assert find(tests, "k2").test_id.endswith("dsa-moe-k2 - dsa-moe")
    with pytest.raises(UserError, match="matches several tests"):
        find(tests, "dsa-moe")
    with pytest.raises(UserError, match="matches no test"):
        find(tests, "nothing")


def settle(repo, *args):
    return subprocess.run([sys.executable, "-m", "itervision.pipeline.settle", *args], cwd=repo, capture_output=True,
                          text=True)


def lock_runs(repo) -> dict:
    """{stage: its outputs' hashes} of every run stage in the pipeline's dvc.lock files."""
    out = {}
    for lock in [repo / "dvc.lock", *repo.glob("pipelines/*/dvc.lock")]:
        for name, stage in yaml.safe_load(lock.read_text())["stages"].items():
            if name.startswith("run_"):
                out[name] = json.dumps(stage.get("outs"), sort_keys=True)
    return out


@pytest.mark.slow
def test_settle_trains_only_the_claims_new_seeds_and_continues_its_sequence(built_repo, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(built_repo, repo, symlinks=True)
    claim = "fashion_mnist: dsa-moe - sa-mlp"
    # At the tiny scale the seeds' SD is about 14 points: the published 0.2-point margin needs more than 10,000 seeds
    # (refused: test_reliability5), so this copy publishes 20-25 points, a design of tens of seeds
    ref = repo / "data/reference/recursive.csv"
    ref.write_text(ref.read_text().replace("margin_over_sa_mlp_min,0.2,", "margin_over_sa_mlp_min,20,")
                   .replace("margin_over_sa_mlp_max,0.7,", "margin_over_sa_mlp_max,25,"))
    sh("dvc repro && git add -A && git -c user.email=t@t -c user.name=t commit -qm 'a larger published margin'", repo)
    built = lock_runs(repo)
    params_before = (repo / "params.yaml").read_text()

    refused = settle(repo, claim, "--minutes", "0.01")
    assert refused.returncode == 2 and "buys no seed" in refused.stderr and "power" in refused.stderr
    assert (repo / "params.yaml").read_text() == params_before and not lock_runs(repo).keys() - built.keys()

    agg = json.loads((repo / "metrics/recursive/aggregate.json").read_text())
    per_pair = sum(agg["efficiency"][m]["speed"]["seconds"]["mean"] + agg["efficiency"][m]["speed"]["overhead_seconds"]
                   ["mean"] for m in ("dsa-moe", "sa-mlp"))
    from itervision.pipeline.settle import STATS_SECONDS

    minutes = (STATS_SECONDS + 1.5 * per_pair) / 60  # one more seed of each model, not two
    short = settle(repo, claim, "--minutes", f"{minutes:.4f}")
    assert short.returncode == 2 and "--interim" in short.stderr and "power" in short.stderr

    before = lock_runs(repo)
    first = settle(repo, claim, "--minutes", f"{minutes:.4f}", "--interim")
    assert first.returncode == 0, first.stderr[-2000:]
    trained = set(re.findall(r"Running stage '(?:[^':]*:)?(run_[^']+)'", first.stdout))
    assert trained == {"run_settle@recursive-fashion_mnist-dsa-moe-seed2",
                       "run_settle@recursive-fashion_mnist-sa-mlp-seed2"}
    after = lock_runs(repo)
    assert {k: v for k, v in after.items() if k in before} == before  # no other run retrained
    status = subprocess.run([str(BIN / "dvc"), "status"], cwd=repo, capture_output=True, text=True).stdout
    assert "up to date" in status, status

    row = next(e for e in json.loads((repo / "metrics/ledger.json").read_text())["documents"]["recursive"]["entries"]
               if e["test_id"] == claim)
    assert "Lan-DeMets O'Brien-Fleming" in row["test"] and "pilot n = 2 (plans only), looks at n = 3" in row["test"]
    assert row["per_seed"].count(" ") == 2  # three seeds now
    assert "before:" in first.stdout and "after:" in first.stdout

    second = settle(repo, claim, "--minutes", f"{minutes:.4f}", "--interim", "--exp", "settle-tiny")
    assert second.returncode == 0, second.stderr[-2000:]
    exps = subprocess.run([str(BIN / "dvc"), "exp", "list", "--name-only"], cwd=repo, capture_output=True, text=True)
    assert "settle-tiny" in exps.stdout.split(), exps.stdout + exps.stderr  # the second look is a DVC experiment
    design = load_params(repo / "params.yaml").settle_claims[claim]
    assert design["looks"] == [2, 3, 4]  # the sequence continued, its first looks counted
    row = next(e for e in json.loads((repo / "metrics/ledger.json").read_text())["documents"]["recursive"]["entries"]
               if e["test_id"] == claim)
    assert "pilot n = 2 (plans only), looks at n = 3, 4" in row["test"]
    assert set(re.findall(r"Running stage '(?:[^':]*:)?(run_[^']+)'", second.stdout)) == {
        "run_settle@recursive-fashion_mnist-dsa-moe-seed3", "run_settle@recursive-fashion_mnist-sa-mlp-seed3"}

    reset = settle(repo, "--reset")
    assert reset.returncode == 0, reset.stderr[-2000:]
    # the default run's params (a params.yaml written with comments keeps them; this one has none)
    assert yaml.safe_load((repo / "params.yaml").read_text()) == yaml.safe_load(params_before)
    assert lock_runs(repo) == built  # no settle entry left in a dvc.lock
    status = subprocess.run([str(BIN / "dvc"), "status"], cwd=repo, capture_output=True, text=True).stdout
    assert "up to date" in status, status
