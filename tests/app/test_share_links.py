"""AppTest tests of links (ui/share.py): a GPU name of several GPUs, and the Memory page's serving settings in the URL."""

from __future__ import annotations

from apptest_support import no_exception


def link_warning(at) -> str:
    return " ".join(w.value for w in at.warning if "Some settings in the link were ignored" in w.value)


def test_an_ambiguous_gpu_in_a_link_is_ignored_with_its_candidates(new_app):
    # gpu=V100 used to open the V100 16GB silently; a 32GB user got the 16GB answer. As in the CLI, it is refused.
    at = new_app()
    at.query_params["gpu"] = "V100"
    at.query_params["num_gpus"] = "2"
    at.run()
    no_exception(at)
    assert ("gpu='V100': ambiguous: it names 2 GPUs of the catalog (NVIDIA V100 16GB, NVIDIA V100 32GB); give one of "
            "these names") in link_warning(at)
    assert at.session_state["gpu"] == "NVIDIA A100 80GB"  # the default, not a guessed V100
    assert at.session_state["num_gpus"] == 2  # the link's other settings still apply
    assert at.query_params["gpu"] == "NVIDIA A100 80GB"

    exact = new_app()
    exact.query_params["gpu"] = "V100-32GB"
    exact.run()
    assert exact.session_state["gpu"] == "NVIDIA V100 32GB" and not link_warning(exact)
