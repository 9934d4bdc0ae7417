"""Which repository files a stage script (or any module) imports, directly or through other modules: the code
dependencies of the generated DVC files (dvc_files.py). Static: every import statement counts, also those inside
functions; modules imported by name (importlib: a study's parts, a model family) are added by the generator."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src"


def _module_file(name: str, script_dir: Path) -> Path | None:
    parts = name.split(".")
    for base in (SRC, script_dir):
        candidate = base.joinpath(*parts)
        if candidate.with_suffix(".py").exists():
            return candidate.with_suffix(".py")
        if (candidate / "__init__.py").exists():
            return candidate / "__init__.py"
    return None


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    package = ".".join(path.relative_to(SRC).with_suffix("").parts[:-1]) if SRC in path.parents else ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(p for p in up + [base] if p)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return names


def closure(script: Path) -> set[Path]:
    """Every repository file (under src/ or beside the script) the script imports, itself included."""
    script = script.resolve()
    seen, todo = set(), [script]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for name in _imports(f):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # a package's __init__ runs on import of any submodule
                target = _module_file(".".join(parts[:i]), script.parent)
                if target is not None and target not in seen:
                    todo.append(target)
    return {p.relative_to(ROOT) for p in seen}
