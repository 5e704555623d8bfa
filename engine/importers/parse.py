"""Bytes of an uploaded or named training config -> a dict, refusing what a config never is.

JSON is read with :mod:`json`; everything else with PyYAML's ``yaml.safe_load`` (never ``yaml.load``: a YAML tag must
not build Python objects). Limits keep a hostile upload cheap to refuse:

- :data:`MAX_IMPORT_BYTES`: a full ``TrainingArguments.to_dict()`` dump is about 6 KB, the largest axolotl or
  torchtune recipe a few tens of KB; 1 MiB leaves room for comments.
- :data:`MAX_DEPTH`: the deepest real config nests 4 levels (DeepSpeed ``zero_optimization.offload_param.device``).
- :data:`MAX_NODES`: nodes *after* expanding YAML aliases. A "billion laughs" document is a few hundred bytes whose
  aliases expand into 10^9 nodes; PyYAML would build it as shared references, but anything that walks it would not
  finish. Before ``safe_load``, the event stream (``yaml.parse``, linear in the text) is scanned and each anchor's
  expanded size counted, so such a document is refused after reading its few hundred bytes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from engine.errors import TrainingConfigError
from engine.model.config_fields import DuplicateKey, unique_keys
from engine.secrets import redact_values

MAX_IMPORT_BYTES = 1_048_576
#: The most digits an integer of a training config may have: the largest real value (a dataset's token count, a
#: bucket size in bytes) has 12; a longer one is a typo or an attack, and Python refuses past 4,300 digits anyway.
MAX_INT_DIGITS = 20
MAX_DEPTH = 16
MAX_NODES = 50_000


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "syntax error"
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def _check_yaml_size(text: str, name: str) -> None:
    """Refuse a YAML text nested deeper than MAX_DEPTH or expanding (aliases included) past MAX_NODES nodes."""
    anchors: dict[str, int] = {}
    stack: list[list[Any]] = []  # [anchor, expanded nodes so far] per open mapping/sequence
    total = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([event.anchor, 1])
            if len(stack) > MAX_DEPTH:
                raise TrainingConfigError(f"{name} nests more than {MAX_DEPTH} levels deep; a training config nests a few")
            continue
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, size = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, size = None, anchors.get(event.anchor, 1)
        else:
            continue
        if anchor:
            anchors[anchor] = size
        if stack:
            stack[-1][1] += size
        total += size
        if total > MAX_NODES:
            raise TrainingConfigError(f"{name} expands to more than {MAX_NODES:,} values (YAML aliases included); "
                                      "a training config has a few hundred")


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing a mapping key written twice with different values: PyYAML keeps the last
    one without a word (``micro_batch_size: 1`` then ``64`` is 58x the memory). A key that overrides one merged in
    by ``<<: *anchor`` is YAML's own override, not a duplicate, and stays allowed."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                continue  # an unhashable or odd key: _check_keys refuses it by name
            value = self.construct_object(value_node, deep=True)
            if key in seen and seen[key] != value:
                raise DuplicateKey(str(key), seen[key], value, reader="YAML")
            seen[key] = value
        return super().construct_mapping(node, deep=deep)


def _check_json_depth(value: Any, name: str, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise TrainingConfigError(f"{name} nests more than {MAX_DEPTH} levels deep; a training config nests a few")
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        _check_json_depth(child, name, depth + 1)


def parse_training_config(data: bytes, name: str = "config") -> dict[str, Any]:
    """Parse a training config (JSON or YAML) into a dict with string keys.

    Raises:
        TrainingConfigError: over :data:`MAX_IMPORT_BYTES`, not UTF-8, not valid JSON/YAML (line and column named),
            nested deeper than :data:`MAX_DEPTH` or expanding past :data:`MAX_NODES`, several YAML documents, not a
            mapping at the top, or a key that is not a name.
    """
    if len(data) > MAX_IMPORT_BYTES:
        raise TrainingConfigError(f"{name} is {len(data):,} bytes; a training config is at most {MAX_IMPORT_BYTES:,} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TrainingConfigError(f"{name} is not UTF-8 text; give a YAML or JSON training config") from None
    if text.lstrip().startswith(("{", "[")):
        try:
            doc = json.loads(text, parse_int=lambda digits: _bounded_int(digits, name), object_pairs_hook=unique_keys)
        except DuplicateKey as exc:
            raise TrainingConfigError(f"{name} {exc}") from None
        except json.JSONDecodeError as exc:
            raise TrainingConfigError(f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
        except RecursionError:
            raise TrainingConfigError(f"{name} nests more than {MAX_DEPTH} levels deep; a training config nests a few") from None
        _check_json_depth(doc, name)
    else:
        try:
            _check_yaml_size(text, name)
            doc = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader: it builds no Python objects
        except DuplicateKey as exc:
            raise TrainingConfigError(f"{name} {exc}") from None
        except yaml.YAMLError as exc:
            raise TrainingConfigError(f"{name} is not valid YAML ({_where(exc)})") from None
        except ValueError:  # an integer past Python's 4,300-digit conversion limit
            raise TrainingConfigError(f"{name} holds an integer of more than 4,300 digits; no training config value "
                                      f"has more than {MAX_INT_DIGITS}: check the file") from None
        _check_yaml_ints(doc, name)
    if not isinstance(doc, dict):
        kind = "nothing" if doc is None else f"a {type(doc).__name__}"
        raise TrainingConfigError(f"{name} holds {kind}, not a mapping of settings; give a YAML or JSON training config")
    _check_keys(doc, name)
    # A token pasted as a value (base_model: hf_...) is never shown, exported or sent to the Hub.
    return redact_values(doc)


def _bounded_int(digits: str, name: str) -> int:
    """json's integer hook: refuse a number of more than MAX_INT_DIGITS digits before converting it."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise TrainingConfigError(f"{name} holds a {len(digits.lstrip('-')):,}-digit integer; no training config value "
                                  f"has more than {MAX_INT_DIGITS} digits: check the file")
    return int(digits)


def _check_yaml_ints(value: Any, name: str) -> None:
    """The YAML counterpart of :func:`_bounded_int` (safe_load has no hook): every integer has at most MAX_INT_DIGITS
    digits (compared by magnitude: converting a huge one to text would itself fail)."""
    if isinstance(value, dict):
        for child in value.values():
            _check_yaml_ints(child, name)
    elif isinstance(value, list):
        for child in value:
            _check_yaml_ints(child, name)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_INT_DIGITS:
        raise TrainingConfigError(f"{name} holds an integer of more than {MAX_INT_DIGITS} digits; no training config "
                                  "value has that many: check the file")


def _check_keys(value: Any, name: str, where: str = "") -> None:
    """Every mapping key is a string (YAML allows ``1:`` or ``true:`` as keys; no config uses them)."""
    if isinstance(value, dict):
        for key, child in value.items():
            if not isinstance(key, str):
                raise TrainingConfigError(f"{name}: key {key!r}{' under ' + where if where else ''} is not a name")
            _check_keys(child, name, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for child in value:
            _check_keys(child, name, where)


_YAML11_ONLY = {
    "tag:yaml.org,2002:int": (re.compile(r"[-+]?0[0-7_]+"), re.compile(r"[-+]?0b[01_]+"),
                              re.compile(r"[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+"), re.compile(r"[-+]?[0-9]*_[0-9_]*")),
    "tag:yaml.org,2002:float": (re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*"),
                                re.compile(r"[-+]?[0-9]*_[0-9_.]*")),
    "tag:yaml.org,2002:bool": (re.compile(r"(?i)yes|no|on|off"),),
}
"""Plain scalars that YAML 1.1 (PyYAML, which axolotl, LLaMA-Factory and the Trainer's ``parse_yaml_file`` use) reads
as a number or a bool in a way a reader does not expect and YAML 1.2 does not: ``010`` is octal 8, ``1:30`` is
base 60 (90), ``1_000`` is 1000, ``off`` is false (YAML 1.1 spec, "int", "float" and "bool" types;
PyYAML 6.0 ``resolver.py``)."""


def yaml_1_1_notes(data: bytes) -> list[str]:
    """What to tell the reader of a YAML file (already accepted by :func:`parse_training_config`) about its YAML 1.1
    readings (:data:`_YAML11_ONLY`): ``micro_batch_size: 010 is read as 8 ...``. Empty for JSON."""
    text = data.decode("utf-8-sig", errors="replace")
    if text.lstrip().startswith(("{", "[")):
        return []
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return []
    notes: list[str] = []

    def walk(node: yaml.Node, where: str, depth: int) -> None:
        if depth > MAX_DEPTH or len(notes) >= 20:
            return
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                walk(value, f"{where}.{key.value}" if where else str(key.value), depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for child in node.value:
                walk(child, where, depth + 1)
        elif isinstance(node, yaml.ScalarNode) and node.style is None:
            patterns = _YAML11_ONLY.get(node.tag, ())
            if any(p.fullmatch(node.value) for p in patterns):
                read = yaml.safe_load(node.value)
                notes.append(f"{where}: {node.value} is read as {read!r} (YAML 1.1, as PyYAML and so the tools "
                             "that read this file read it); quote it or write it plainly if you meant otherwise")

    walk(root, "", 0)
    return notes


def read_config_bytes(path: str | Path) -> tuple[bytes, str]:
    """The bytes (at most MAX_IMPORT_BYTES + 1: a bounded read) and file name of a local config file.

    Raises:
        TrainingConfigError: the file cannot be read.
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return fh.read(MAX_IMPORT_BYTES + 1), p.name  # /dev/zero or a checkpoint must not hang us
    except OSError as exc:
        raise TrainingConfigError(f"cannot read {p}: {exc.strerror}") from None
