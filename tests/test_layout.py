"""The engine's layout: imports follow the data flow, no import cycles, no module over 600 lines (app modules too).

The stages and their order are the ones ``engine/__init__.py`` and ``docs/architecture.md`` describe; a module may
import modules of its own stage or of earlier stages only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[1] / "engine"

# Stage of each top-level part of the engine (lower first).
STAGES = {
    "engine.errors": 0, "engine.units": 0, "engine.files": 0, "engine.search": 0, "engine.csv_cells": 0, "engine.memo": 0, "engine.secrets": 0,
    "engine.model": 1, "engine.hardware": 1,
    "engine.scenario": 2,
    "engine.memory": 3, "engine.trace": 3,
    "engine.time": 4, "engine.scaleout": 4, "engine.importers": 4,
    "engine.plan": 5,
    "engine.validation": 6,
    "engine.cli": 7, "engine.__main__": 7, "engine": 7,
}
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ENGINE.rglob("*.py"):
        name = ".".join(path.relative_to(ENGINE.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Engine modules that ``name`` imports (anywhere in the file, function-level imports included)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            candidates = [f"{base}.{a.name}" for a in node.names] + [base]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        # `from pkg import sub` runs pkg's __init__ and imports sub: both are edges (a sibling imported that way
        # from inside pkg closes a cycle through pkg's __init__ when it imports its own submodules).
        found = {cand for cand in candidates if cand in mods and cand != name}
        out |= found
        for cand in found:
            parent = cand.rsplit(".", 1)[0]
            if parent in mods and parent != name and not name.startswith(parent + ".") and parent != "engine":
                out.add(parent)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def _stage(module: str) -> int:
    for prefix in sorted(STAGES, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return STAGES[prefix]
    raise AssertionError(f"{module} belongs to no stage: add its package to STAGES and to docs/architecture.md")


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path, or None (depth-first search with colours)."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in colour and (found := visit(nxt)):
                return found
        stack.pop()
        colour[node] = 2
        return None

    for node in sorted(graph):
        if node not in colour and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_in_engine():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_detector_finds_a_planted_cycle():
    # The detector itself must be able to fail: a -> b -> c -> a is found, a tree is not.
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_follow_the_flow():
    bad = [f"{m} (stage {_stage(m)}) imports {d} (stage {_stage(d)})"
           for m, deps in _graph().items() for d in deps if _stage(d) > _stage(m)]
    assert not bad, "a lower stage imports a higher one:\n" + "\n".join(sorted(bad))


def test_every_engine_module_has_a_stage():
    for module in _modules():
        _stage(module)


_ROOT = ENGINE.parent
# The guide's limit holds outside the engine too (pages/methodology.py once reached 602 lines unnoticed).
_MODULES = sorted([*ENGINE.rglob("*.py"), _ROOT / "streamlit_app.py", *(_ROOT / "pages").glob("*.py"),
                   *(_ROOT / "ui").glob("*.py"), *(_ROOT / "benchmarks").glob("*.py")])


@pytest.mark.parametrize("path", _MODULES, ids=lambda p: str(p.relative_to(_ROOT)))
def test_module_at_most_600_lines(path: Path):
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(_ROOT)} has {n} lines (at most {MAX_LINES}): split it by concept"


def test_every_engine_package_says_what_lives_there():
    for init in ENGINE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 60, f"{init.relative_to(ENGINE.parent)} needs a docstring: what lives there, what it may import"



_MODEL_TYPE_TEST = __import__("re").compile(r"model_type\s*(==|!=|\bin\b|\bnot\s+in\b)|(==|!=)\s*\w*\.?model_type\b")


def model_type_tests(text: str) -> list[str]:
    """Lines that branch on a model_type string (``model_type ==``, ``!=``, ``in``, ``not in``)."""
    return [line.strip() for line in text.splitlines() if _MODEL_TYPE_TEST.search(line)]


def test_no_model_type_comparison_outside_engine_model():
    # Structure differences between families are facts the builder sets on the Architecture (fused projections,
    # norm readers, sliding windows, positions); code after engine.model reads those, never the type's name.
    root = ENGINE.parent
    offenders = {str(p.relative_to(root)): hits for p in [*ENGINE.rglob("*.py"), *(root / "ui").rglob("*.py"),
                                                          *(root / "pages").rglob("*.py")]
                 if "engine/model/" not in p.as_posix() and (hits := model_type_tests(p.read_text(encoding="utf-8")))}
    assert offenders == {}


def test_the_model_type_check_finds_a_planted_comparison():
    assert model_type_tests('if arch.model_type == "phi3":\n    x = 1\nok = arch.model_type') == ['if arch.model_type == "phi3":']
    assert model_type_tests('y = arch.model_type in ("gemma3", "gemma3_text")') != []
