"""The one hardware setting of the app: GPU kind, GPU count, GPUs per node, strategy, offload and the byte unit.

Drawn in the sidebar by every page that computes for a GPU (:func:`hardware_sidebar`), under the same widget keys,
so a choice made on one page is the choice of every page and of a shared link (:mod:`ui.share`). A page that also
explores other GPUs (GPU fit's matrices, Time & cost's plan search) says so next to what it shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from engine.hardware.gpus import Gpu
from engine.memory.parallel import OFFLOAD_LABELS, STRATEGY_LABELS, Offload, Strategy
from engine.plan.strategy import DEFAULT_STRATEGY, training_strategy
from engine.units import Unit
from ui.catalog_session import session_gpus
from ui.inputs import checked_number, valid_value

DEFAULT_GPU = "NVIDIA A100 80GB"
DEFAULTS = {"num_gpus": 1, "gpus_per_node": 8, "strategy": DEFAULT_STRATEGY, "offload": Offload.NONE, "unit": "GiB"}
KEYS = ("gpu", "num_gpus", "gpus_per_node", "strategy", "offload", "unit")
"""Widget keys (= URL parameters) of the hardware setting."""


@dataclass(frozen=True)
class Hardware:
    """The sidebar's hardware: ``num_gpus`` x ``gpu`` with ``strategy`` and ``offload``; ``unit`` for bytes shown."""

    gpu: Gpu
    num_gpus: int
    gpus_per_node: int
    strategy: Strategy
    offload: Offload
    unit: Unit

    @property
    def is_multi(self) -> bool:
        """More than one GPU, or states offloaded (ZeRO-Offload works on one GPU too)."""
        return self.num_gpus > 1 or self.offload is not Offload.NONE

    @property
    def training_strategy(self) -> Strategy:
        """The strategy a run uses: one GPU without offload trains plainly (DDP on one GPU is plain training; ZeRO or
        FSDP there would only add their buffers)."""
        return training_strategy(self.strategy, self.num_gpus, self.offload)

    @property
    def label(self) -> str:
        """``"8 x NVIDIA H100 80GB, ZeRO-3 (+ weights sharded)"``."""
        how = STRATEGY_LABELS[self.training_strategy] if self.is_multi else "one GPU, no sharding"
        off = f", {OFFLOAD_LABELS[self.offload].lower()}" if self.offload is not Offload.NONE else ""
        return f"{self.num_gpus} × {self.gpu.name}, {how}{off}"


def keep_choice(key: str, options: list, default) -> None:
    """Start ``key`` at ``default`` and move it back to an existing option when the options changed (an edited GPU
    table may drop the chosen GPU)."""
    if st.session_state.get(key, default) not in options:
        st.session_state[key] = default if default in options else options[0]
    st.session_state.setdefault(key, default)


def hardware_sidebar(serving: bool = False) -> Hardware:
    """Draw the sidebar's "Hardware" section and return it. ``serving``: one replica per GPU, so only the GPU kind
    and the unit are asked (the count, strategy and offload keep their values for the training pages)."""
    gpus = session_gpus()
    names = [g.name for g in gpus]
    keep_choice("gpu", names, DEFAULT_GPU)
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(key, value)
    with st.sidebar:
        st.header("Hardware")
        name = st.selectbox("GPU", names, key="gpu", help="Every page computes for this GPU; GPUs & prices lists them.")
        state = st.session_state
        # the numbers the results use when their boxes are not drawn (the serving pages): out of range or empty, the last
        # valid ones
        n, per_node = (valid_value(k) or DEFAULTS[k] for k in ("num_gpus", "gpus_per_node"))
        strategy, offload = state["strategy"], state["offload"]
        if not serving:
            c1, c2 = st.columns(2)
            n = int(checked_number(c1, "GPUs", "num_gpus", 1, step=1, below=st,
                                   help="Data-parallel GPUs; each runs the micro batch (activations are per GPU)."))
            per_node = int(checked_number(c2, "GPUs per node", "gpus_per_node", 8, step=1, below=st,
                                          help="For the CPU memory per node when offloading. Time and cost put up to "
                                               "8 GPUs on a node (NVLink or PCIe inside it); Scale out takes its own."))
            strategy = st.selectbox("Strategy", list(Strategy), format_func=STRATEGY_LABELS.get, key="strategy",
                                    help="Which model states are divided over the GPUs (ZeRO stages; FSDP sharding). "
                                         "With one GPU and no offload a run trains plainly; the strategy still decides "
                                         "the fewest GPUs the pages suggest.")
            offload = st.selectbox("Offload to CPU", list(Offload), format_func=OFFLOAD_LABELS.get, key="offload",
                                   help="ZeRO-Offload / FSDP CPUOffload: states in CPU memory (weights only with ZeRO-3 / "
                                        "FSDP full shard).")
        unit: Unit = st.radio("Unit", ["GB", "GiB"], horizontal=True, key="unit",
                              help="GB = 10^9 bytes (cloud spec sheets, the seed chapters); GiB = 2^30 bytes "
                                   "(torch.cuda, nvidia-smi).")
    gpu = next(g for g in gpus if g.name == name)
    return Hardware(gpu=gpu, num_gpus=int(n), gpus_per_node=int(per_node), strategy=strategy, offload=offload, unit=unit)
