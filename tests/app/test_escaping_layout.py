"""Every message a page draws as Markdown passes what it did not write itself through ``ui.formats.md_plain``
(issue 25 item 1): a layout check over ``pages/`` and ``ui/``, like tests/test_layout.py's import rules.

A message call is ``<anything>.error/warning/info/success/markdown/caption/toast/exception/write(body, ...)``. Its body
must be built only from string literals, numbers formatted in the f-string (a format spec such as ``:,``) or by the
number formatters below, ``md_plain(...)``, and the few values listed in :data:`TRUSTED` (each with the reason it
cannot hold user text). Anything else (an exception, an engine warning, a plan name, a GPU name) could carry text a
visitor typed or a link put there, and would be rendered as Markdown: a live link in the app's own red box.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*(ROOT / "pages").glob("*.py"), *(ROOT / "ui").glob("*.py"), ROOT / "streamlit_app.py"])
MESSAGE_CALLS = {"error", "warning", "info", "success", "markdown", "caption", "toast", "exception", "write", "subheader",
                 "header"}
ESCAPE = "md_plain"
NUMBER_FORMATTERS = {"_both", "fmt_bytes", "fmt_gpu_hours", "fmt_count", "fmt_hours", "fmt_usd", "md_usd", "fmt_sci", "fmt_big_count", "to_unit", "len",
                     "round", "int", "float", "abs", "max", "min", "sum", "_fmt", "verdict_label",
                     "count_of"}  # count_of: a number and the page's own literal word ("1 GPU", "8 plans")
#: Values that are not user text, by their source text in the file: (file name, expression) -> why.
_NUMBERS = "numbers of a validated scenario, plan or result"
_ENGINE = "the engine's or the page's own words (constants, enum labels, bundled data), never an input"
TRUSTED: dict[tuple[str, str], str] = {
    **{("fit.py", e): _NUMBERS for e in ("unit", "scenario.micro_batch_size", "Scenario().lora_r", "seed_batch",
                                         "fewest if fewest else 'none up to 1,024'", "usable_text")},
    **{("fit.py", e): _ENGINE for e in ("precision_spec(scenario.precision).label", "STRATEGY_LABELS[strategy]",
                                        "SEED_TABLE_SOURCE", "precision_spec(seed_full_precision).label", "_WHY_SEED_DIFFERS",
                                        "'\\n'.join(lines)")},  # lines: numbers and fmt_bytes only
    **{("memory.py", e): _NUMBERS for e in ("est.bytes_per_parameter", "scenario.gradient_accumulation_steps",
                                            "arch.num_layers", "sliding")},
    **{("memory.py", e): _ENGINE for e in ("where", "which", "ds.function", "ds.note")},
    **{("methodology.py", e): _ENGINE + " (the Methodology page: bundled tables and their summaries)" for e in (
        "_constants", "b.group.replace('_', ' ')", "b.rows", "b.sources", "_all.rows", "_fit.rows", "_hold.worst", "'; '.join(ASSUMPTIONS)", "c.id", "_a.rows", "_a.worst_id", "_t.rows",
        "_t.worst_id", "len(_val.rows) + len(_val.not_expressible)", "summary.rows", "summary.worst", "item",
        "'\\n'.join(lines)", "r.deviations", "r.framework", "r.id", "r.model_id", "EFA.label",
        '\'; \'.join((f"{b:g}B on {(f\'{n}x \' if n > 1 else \'\')}{g} ~{t:,.0f} tokens/s" for b, g, n, t in SEED_THROUGHPUT))')},
    ("methodology_scaleout.py", "'\\n'.join(lines)"): _ENGINE + " (the Methodology page's large-runs summary lines)",
    ("model.py", "model.origin.kind.replace('_', ' ')"): _ENGINE,
    ("model_picker.py", "origin.kind.replace('_', ' ')"): _ENGINE,
    **{("plans.py", e): _NUMBERS for e in ("current.num_gpus", "count", "row", "band_summary(result)")},
    ("plans.py", "label"): _ENGINE + " (ui/plans.py: the cost series' names, 'on demand' and 'spot')",
    **{("scale_out.py", e): _ENGINE for e in ("t.attention_kernel", "layout.label()", "t.slowest_stage")},
    ("scale_out.py", "worst.stage"): _NUMBERS,
    **{("memory.py", e): _ENGINE for e in ("n", "STRATEGY_LABELS[hw.training_strategy]")},
    **{("time_cost.py", e): _NUMBERS for e in ("scenario.gradient_accumulation_steps", "scenario.micro_batch_size",
                                               "', '.join(map(str, search.counts))", "fewest", "num_gpus", "_all.rows",
                                               "', '.join((str(p.num_gpus) for p in c.counts))")},
    **{("time_cost.py", e): _ENGINE for e in ("STRATEGY_LABELS[strategy]", "precision_spec(scenario.precision).label",
                                              "tp.attention_kernel", "parts", "tp.peak.dtype", "tp.step.link",
                                              "'\\n'.join(lines)", "lines", "SEED_THROUGHPUT_SOURCE", "seed.rule",
                                              "BASIS_LABEL[basis]", "'; '.join(skipped)")},  # skipped: md_plain'd
    **{("config_import.py", e): _NUMBERS for e in ("settings", "keys", "_settings(result)")},
    **{("inputs.py", e): _ENGINE + " (a widget's own label and range)" for e in ("items", "label", "reason")},
    **{("trace_panel.py", e): _ENGINE + " (installed versions)" for e in (
        "v.get('peft')", "v.get('torch')", "v.get('transformers')", "INSTALL_HINT")},
    ("verdict.py", "TIGHT_NOTE"): _ENGINE,
}


def _safe_value(node: ast.AST, trusted: set[str]) -> bool:
    """A value interpolated into a message: escaped, a number, or a literal."""
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if name == ESCAPE or name in NUMBER_FORMATTERS:
            return True
    if isinstance(node, ast.Attribute) and node.attr == "value":
        return True  # an enum member's value (strategy.value, scenario.method.value): the engine's own words
    return _safe_text(node, trusted)


def _safe_text(node: ast.AST, trusted: set[str]) -> bool:
    if ast.unparse(node) in trusted:
        return True
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.JoinedStr):
        return all(isinstance(v, ast.Constant) or v.format_spec is not None and v.conversion == -1
                   or _safe_value(v.value, trusted) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _safe_text(node.left, trusted) and _safe_text(node.right, trusted)
    if isinstance(node, ast.IfExp):
        return _safe_text(node.body, trusted) and _safe_text(node.orelse, trusted)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == ESCAPE:
            return True
        if isinstance(func, ast.Attribute) and func.attr == "join" and isinstance(func.value, ast.Constant):
            arg = node.args[0]
            if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
                return _safe_value(arg.elt, trusted)
            return False
    return False


def unescaped_messages(path: Path) -> list[str]:
    """``file:line: source`` of every message call in ``path`` whose body is not built from safe parts."""
    trusted = {expr for (name, expr) in TRUSTED if name == path.name}
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MESSAGE_CALLS):
            continue
        body = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "body"), None)
        if body is None or _safe_text(body, trusted):
            continue
        out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(body)[:120]}")
    return out


def test_every_message_escapes_what_it_did_not_write():
    found = [line for path in FILES for line in unescaped_messages(path)]
    assert found == [], "messages with unescaped text (wrap it in ui.formats.md_plain):\n" + "\n".join(found)


def test_the_check_catches_an_unescaped_exception(tmp_path):
    # The check itself can fail: the old model picker's st.error(str(exc)) is flagged, md_plain(str(exc)) is not.
    bad = tmp_path / "bad.py"
    bad.write_text("st.error(str(exc))\nst.warning(f'x {name}')\nst.error(md_plain(str(exc)))\nst.caption(f'{n:,} rows')\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert [line.split(":")[1] for line in unescaped_messages(bad)] == ["1", "2"]
    finally:
        ROOT = saved
