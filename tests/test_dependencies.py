"""dvc.yaml declares every repository file a stage imports, so a code change can never leave results stale.

Each stage's script is parsed and its import closure within src/itervision and stages/ followed statically
(tests/import_closure.py, every import statement, also those inside functions); every file of the closure must
lie under a declared dependency. Declaring `src/itervision` as a whole would also be complete, but then editing
a table's wording would retrain every model (40 minutes here); the test keeps the precise lists honest instead.
"""
import re
from pathlib import Path

import pytest
import yaml

from helpers import ROOT
from import_closure import closure

PIPELINES = [ROOT / "dvc.yaml"] + sorted((ROOT / "pipelines").glob("*/dvc.yaml"))


def stage_items():
    """(name, script, deps relative to the repository root) of every stage of every dvc.yaml."""
    for path in PIPELINES:
        for name, stage in yaml.safe_load(path.read_text())["stages"].items():
            wdir = (path.parent / stage.get("wdir", ".")).resolve()
            assert wdir == ROOT, f"{path}: stage {name} must run from the repository root (wdir)"
            script = re.search(r"stages/\w+\.py", stage["cmd"]).group(0)
            deps = [next(iter(d)) if isinstance(d, dict) else d for d in stage.get("deps", [])]
            yield f"{path.relative_to(ROOT)}:{name}", script, deps


@pytest.mark.parametrize("name,script,deps", list(stage_items()), ids=[n for n, _, _ in stage_items()])
def test_every_imported_file_is_a_declared_dependency(name, script, deps):
    declared = [Path(d) for d in deps if "${" not in d]
    missing = [str(f) for f in sorted(closure(ROOT / script))
               if not any(f == d or d in f.parents for d in declared)]
    assert not missing, f"stage {name} imports files dvc.yaml does not declare: {missing}"


def test_run_stages_do_not_depend_on_the_params_checks():
    """Training reads the resolved config files, so editing params.py or the reporting code retrains nothing."""
    names = []
    for name, script, deps in stage_items():
        if name.split(":")[1].startswith(("run_", "profile_")):
            names.append(name)
            files = {str(f) for f in closure(ROOT / script)}
            assert "src/itervision/params.py" not in files and not any("reporting" in f for f in files), name
            assert any(d.startswith("configs/resolved/") for d in deps), name
    assert len(names) == 8 and all(n.startswith("pipelines/") for n in names)


def test_the_closure_follows_imports_inside_functions():
    files = {str(f) for f in closure(ROOT / "stages/run.py")}
    assert "src/itervision/engine/train.py" in files and "src/itervision/data/augment.py" in files
    assert "src/itervision/runs.py" in files


# which itervision packages each layer may import (its own included); stages may import anything
LAYERS = {
    "analysis": {"analysis", "stats", "evaluation.early_exit", "params", "pipeline", "runs", "layout", "io",
                 "errors", "schema", "models.configs", "data.registry", "data.sources"},
    "reporting": {"reporting", "io", "errors"},
    "stats": {"stats"},
}


def _top_imports(path: Path) -> set[str]:
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layers_import_only_what_sits_below_them(layer):
    """analysis and reporting never import torch or model code; statistics import nothing of ours."""
    allowed = LAYERS[layer]
    for f in sorted((ROOT / "src/itervision" / layer).glob("*.py")):
        for name in _top_imports(f):
            assert not name.startswith(("torch", "timm", "fvcore", "torchvision")), (f.name, name)
            if name.startswith("itervision."):
                mod = name[len("itervision."):]
                assert any(mod == a or mod.startswith(a + ".") for a in allowed), (f.name, name)
