"""Command line: ``python -m engine params|estimate|plan|trace ...`` printing JSON (``plan``: CSV), for scripts and CI.

One module per verb (``params``, ``estimate``, ``plan``, ``trace``), each with ``add_parser(sub)`` and
``run(args) -> int``; :mod:`engine.cli.options` holds the options and helpers they share. ``trace`` runs the
optional fake-tensor tracer (:mod:`engine.trace`, the ``[trace]`` extra).

``estimate --from-config FILE [FILE ...]`` reads the scenario (and the model, GPUs, strategy) from training config
files (:mod:`engine.importers`); typed flags override them. ``estimate --gpu NAME`` adds the memory fit; with a dataset size as well (``--dataset-tokens`` or ``--examples``
and ``--avg-tokens``) it adds the training time and cost (:mod:`engine.time.throughput`, :mod:`engine.plan.cost`).

A thin layer over the engine, in the manner of accelerate's ``estimate-memory``: parse options, call the
engine, print JSON. Bad input exits with status 2 and one line on stderr; a token is read from
``HF_TOKEN`` by huggingface_hub and never printed. This is the top of the flow: it may import every package.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import Sequence

from engine.cli.options import Parser

VERBS = ("params", "estimate", "plan", "trace")
"""The verbs, each a module ``engine.cli.<verb>``. Only the verb typed is imported (with what its options need): a
local ``estimate`` does not load the Hub client, the importers or the scale-out model (benchmarks/bench_cli_start.py)."""


def _verb(name: str) -> ModuleType:
    return importlib.import_module(f"engine.cli.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser of ``python -m engine``; with ``only`` (a verb), that verb's options alone (``--help`` and a
    mistyped verb still list every verb)."""
    parser = Parser(prog="python -m engine", description="Fine-tuning GPU memory estimates from a Hugging Face config.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in VERBS:
        if only is None or name == only:
            _verb(name).add_parser(sub)
        else:
            sub.add_parser(name)  # named, so that the verb list stays whole; its options are never parsed
    return parser


def typed_options(argv: Sequence[str], parser: argparse.ArgumentParser | None = None) -> set[str]:
    """The option destinations the user typed (not argparse defaults): the same parser with every default
    suppressed, so that an untyped option leaves no attribute. ``--from-config`` needs it: a typed flag overrides the
    files, a default does not. ``parser`` (:func:`build_parser`'s, already used to parse ``argv``) is reused, its
    defaults suppressed in place: building the verb's options again would cost start-up time."""
    parser = parser or build_parser(_typed_verb(argv))

    def suppress(p: argparse.ArgumentParser) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    suppress(child)
            elif action.dest != "help":
                action.default = argparse.SUPPRESS

    suppress(parser)
    return set(vars(parser.parse_args(list(argv))))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input or unreachable source)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_typed_verb(argv))
    args = parser.parse_args(argv)
    args.typed = typed_options(argv, parser)  # after the parse: it suppresses the parser's defaults
    return _verb(args.command).run(args)


def _typed_verb(argv: Sequence[str]) -> str | None:
    """The verb ``argv`` starts with, or None (no verb, ``--help``, a mistyped one: then every verb is built)."""
    return argv[0] if argv and argv[0] in VERBS else None
