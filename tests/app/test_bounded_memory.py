"""What a long-running server keeps alive (issue 26: the 15-minute soak's memory must level off).

The engine remembers per-architecture sums by the architecture's identity and keeps the object beside them
(engine.memo, engine.time.step, engine.scenario.lora). The app must hand it one Architecture per model config
(ui.model_picker.shared_architecture): before, every rerun built a new one, and each stayed alive in those memos, so
the count of live Architectures grew with every rerun of every session (this test: 44 -> 107 after 48 reruns).
"""

from __future__ import annotations

import gc

from engine.model.architecture import Architecture
from apptest_support import no_exception

PAGES = ("pages/memory.py", "pages/time_cost.py", "pages/plans.py", "pages/fit.py")


def _live_architectures() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, Architecture))


def _visit(at, page: str, micro_batches: range) -> None:
    at.switch_page(page).run()
    no_exception(at)
    for batch in micro_batches:
        at.number_input(key="micro_batch_size").set_value(batch)
        at.toggle(key="gradient_checkpointing").set_value(batch % 2 == 0)
        at.run()
        no_exception(at)


def test_reruns_and_new_sessions_keep_no_new_architecture(new_app):
    first = new_app().run()
    for page in PAGES:  # every page once: the catalog's architectures (GPU fit) and the default model's are built
        _visit(first, page, range(1, 2))
    before = _live_architectures()
    for session in range(3):  # new visitors, each trying scenarios nobody tried
        at = new_app().run()
        no_exception(at)
        for page in PAGES:
            _visit(at, page, range(2 + 3 * session, 5 + 3 * session))
        del at
    assert _live_architectures() <= before, "reruns of the same model left new Architecture objects alive"


def test_the_picked_model_is_one_object_across_reruns_and_sessions(new_app):
    a = new_app().run()
    b = new_app().run()
    a.number_input(key="micro_batch_size").set_value(3).run()
    no_exception(a)
    assert a.session_state["model"].arch is b.session_state["model"].arch
