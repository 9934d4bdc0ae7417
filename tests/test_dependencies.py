"""The DVC files are generated, and every stage depends on exactly the code it runs.

The generator (itervision/pipeline/dvc_files.py) declares each stage's static import closure plus the modules it imports
by name (a study's parts, a run's own model family). These tests check the committed files against it, check the
closure against what a stage really imports when it runs, and keep the layering (statistics and reporting never
import model code).
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import ROOT, prepare
from itervision.pipeline.dvc_files import generated, stale_files
from itervision.pipeline.import_closure import closure

PIPELINES = [ROOT / "dvc.yaml"] + sorted((ROOT / "pipelines").glob("*/dvc.yaml"))


def stage_items():
    """(name, script, deps relative to the repository root) of every stage of every dvc.yaml."""
    for path in PIPELINES:
        for name, stage in yaml.safe_load(path.read_text())["stages"].items():
            stage = stage.get("do", stage)
            wdir = (path.parent / stage.get("wdir", ".")).resolve()
            assert wdir == ROOT, f"{path}: stage {name} must run from the repository root (wdir)"
            script = re.search(r"stages/\w+\.py", stage["cmd"]).group(0)
            deps = [next(iter(d)) if isinstance(d, dict) else d for d in stage.get("deps", [])]
            yield f"{path.relative_to(ROOT)}:{name}", script, deps


def test_the_committed_dvc_files_are_the_generated_ones():
    assert stale_files() == [], "run `make pipelines` (python -m itervision.pipeline.dvc_files) and commit the result"


@pytest.mark.parametrize("name,script,deps", list(stage_items()), ids=[n for n, _, _ in stage_items()])
def test_every_imported_file_is_a_declared_dependency(name, script, deps):
    declared = [Path(d) for d in deps if "${" not in d]
    missing = [str(f) for f in sorted(closure(ROOT / script))
               if not any(f == d or d in f.parents for d in declared)]
    assert not missing, f"stage {name} imports files dvc.yaml does not declare: {missing}"
    assert not any(Path(d).is_dir() and str(d).startswith("src/") for d in declared), \
        f"{name}: a code dependency must be a file, not a package folder"


def test_a_family_file_is_a_dependency_of_its_own_studys_runs_only():
    """A comment in models/recursive.py must not retrain SparseFormer runs, nor the other way round."""
    deps = {name: set(d) for name, _, d in stage_items()}
    for name, d in deps.items():
        if name.endswith(":run_settle"):  # every study's settle runs: each run's own family module, by its item
            assert "${item.code}" in d and not any(re.search(r"models/(recursive|sparseformer)\.py", f) for f in d)
        elif ":run_" in name or ":profile_" in name:
            study = "recursive" if "recursive" in name.split(":")[1] else "sparseformer"
            other = "sparseformer" if study == "recursive" else "recursive"
            assert f"src/itervision/models/{study}.py" in d, name
            assert f"src/itervision/models/{other}.py" not in d, name
        if ":aggregate_" in name or ":report_" in name:  # another study's statistics, tables, figures: never
            study = name.split(":")[1].split("_", 1)[1]
            assert not [f for f in d if re.search(r"studies/(\w+)/(analysis|tables|figures)\.py", f)
                        and f"studies/{study}/" not in f], name


def _runtime_imports(cwd: Path, script: str, *args: str) -> set[str]:
    """The itervision and stages files a stage script really imports when it runs (its own process)."""
    probe = ("import atexit, runpy, sys\n"
             "def report():\n"
             "    files = sorted(m.__file__ for n, m in list(sys.modules.items()) if getattr(m, '__file__', None)\n"
             "                   and ('/src/itervision/' in m.__file__ or '/stages/' in m.__file__))\n"
             "    print('IMPORTED', *files, file=sys.stderr)\n"
             "atexit.register(report)\n"
             f"sys.argv = [{str(ROOT / script)!r}] + {list(args)!r}\n"
             f"sys.path.insert(0, {str(ROOT / 'stages')!r})\n"
             f"runpy.run_path({str(ROOT / script)!r}, run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = next(x for x in r.stderr.splitlines() if x.startswith("IMPORTED"))
    return {str(Path(f).resolve().relative_to(ROOT)) for f in line.split()[1:]}


@pytest.mark.slow
@pytest.mark.parametrize("study,model", [("recursive", "dsa-moe"), ("sparseformer", "sf-recurrent")])
def test_what_a_run_imports_when_it_runs_is_declared(tmp_path, study, model):
    """The static closure plus the family file covers every module the run stage loads at run time."""
    prepare(tmp_path)
    imported = _runtime_imports(tmp_path, "stages/run.py", "--study", study, "--dataset", "fashion_mnist",
                                "--model", model, "--seed", "0", "--quiet")
    assert f"src/itervision/models/{study}.py" in imported
    deps = next(d for name, _, d in stage_items() if name.endswith(f":run_{study}"))
    assert sorted(imported - set(deps)) == []


def test_the_generator_covers_every_study_and_both_groups():
    files = generated()
    assert set(files) == {"dvc.yaml", "pipelines/recursive/dvc.yaml", "pipelines/recursive-ablations/dvc.yaml",
                          "pipelines/sparseformer/dvc.yaml", "pipelines/sparseformer-ablations/dvc.yaml"}
    root = yaml.safe_load(files["dvc.yaml"])["stages"]
    assert root["configure"]["params"] == [{"params.yaml": None}]  # every params rule checked before any run
    assert root["make_subset"]["foreach"] == "${data.sources}" and "${item}" in root["make_subset"]["do"]["deps"]


def test_run_stages_do_not_depend_on_the_params_checks():
    """Training reads the resolved config files, so editing params.py or the reporting code retrains nothing."""
    names = []
    for name, script, deps in stage_items():
        if name.split(":")[1].startswith(("run_", "profile_")):
            names.append(name)
            files = set(deps)
            assert "src/itervision/config/params.py" not in files and not any("reporting" in f for f in files), name
            assert not any("/studies/" in f for f in files), name
            assert any(d.startswith("configs/resolved/") for d in deps), name
    # profile and run per study and main/ablations; the settle runs (every study's) in the root file
    assert len(names) == 9 and all(n.startswith("pipelines/") for n in names if n != "dvc.yaml:run_settle")


# The architecture as layers, lowest first (docs/design.md#layout): a room may import its own modules and any room
# of a lower layer, never one above (a back arrow). The one back arrow by design: config.params reads the studies
# registry to check each study's params group.
LAYERS = [
    {"errors"}, {"names", "schema"}, {"io"}, {"heartbeat"}, {"layout"}, {"runs"},   # the shared core of every run
    {"stats", "models", "data"},
    {"config", "reporting"},
    {"claims"},     # the ledger: claim model, verdicts, files (it draws with reporting's figure helpers)
    {"evaluation"},
    {"engine"},
    {"studies"},
    {"planning"},
    {"pipeline"},   # it carries out what planning plans (make settle prints a plan's GPU-hours)
]
RANK = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
ALLOWED_BACK_ARROWS = {("config", "studies")}


def _top_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _room(path: Path) -> str:
    rel = path.relative_to(ROOT / "src/itervision").parts
    return rel[0].removesuffix(".py")


def import_arrows() -> set[tuple[str, str]]:
    """(importing room, imported room) over every module of the package."""
    arrows = set()
    for f in (ROOT / "src/itervision").rglob("*.py"):
        for name in _top_imports(f):
            if name.startswith("itervision."):
                target = name.split(".")[1]
                if target != _room(f) and _room(f) != "__init__":
                    arrows.add((_room(f), target))
    return arrows


def test_every_room_has_a_layer_and_no_import_runs_back_up():
    arrows = import_arrows()
    rooms = {a for a, _ in arrows} | {b for _, b in arrows}
    assert rooms <= set(RANK), sorted(rooms - set(RANK))  # a new package or top-level module needs a layer
    assert back_arrows(arrows) == ALLOWED_BACK_ARROWS, sorted(back_arrows(arrows) - ALLOWED_BACK_ARROWS)


def back_arrows(arrows) -> set:
    return {(a, b) for a, b in arrows if RANK[b] >= RANK[a]}


def test_the_layer_rule_flags_an_import_up_or_sideways():
    assert back_arrows({("engine", "studies"), ("models", "data"), ("studies", "engine")}) == {
        ("engine", "studies"), ("models", "data")}


NO_TORCH = ("studies", "reporting", "stats", "config")


@pytest.mark.parametrize("layer", NO_TORCH)
def test_layers_without_torch(layer):
    """studies, reporting, statistics and configuration never import torch or model code (params are checked and
    tables rendered without it)."""
    for f in sorted((ROOT / "src/itervision" / layer).rglob("*.py")):
        for name in _top_imports(f):
            assert not name.startswith(("torch", "timm", "fvcore", "torchvision")), (f.name, name)
