"""nanotron's pipeline split (:mod:`engine.scaleout.stage_split`): layers balanced by compute cost with the output
layer counted, as huggingface/nanotron@2411b022 ``build_model`` (src/nanotron/models/base.py) assigns its pipeline
blocks with the costs of ``get_block_compute_costs`` (src/nanotron/models/llama.py). Expected splits worked by hand
below from those two functions; the models are nanotron's benchmark configs (scripts/scaling_benchmarks.py @
0e0a27ea, as data/large_runs.csv's nanotron rows build them)."""

from __future__ import annotations

import csv
import json

import pytest

from engine.cli import main
from engine.errors import ScenarioError
from engine.files import data_file
from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.frameworks import framework
from engine.scaleout.layout import Layout
from engine.scaleout.search import search_layouts
from engine.scaleout.stage_split import cost_balanced_layers, nanotron_block_costs
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Scenario
from engine.validation.scaleout import _arch

ROWS = {r["id"]: r for r in csv.DictReader(data_file("large_runs.csv").open())}
NANO_1B = _arch(ROWS["nanotron_1.34b_1n"], 4096)[0]  # 16 layers, 2048 wide, MLP 8192, 32 heads, vocab 131072
NANO_8B = _arch(ROWS["nanotron_8.86b_1n"], 4096)[0]  # 32 layers, 4096 wide, MLP 14336, vocab 131072


def test_block_costs_are_nanotrons_formula():
    # 4 x heads x head_dim x hidden + 3 x d_ff x hidden = 4 x 2048^2 + 3 x 8192 x 2048; output layer 131072 x 2048
    assert nanotron_block_costs(NANO_1B) == (16_777_216 + 50_331_648, 268_435_456)
    assert nanotron_block_costs(NANO_8B) == (67_108_864 + 176_160_768, 536_870_912)


def test_splits_worked_by_hand():
    # 1.34B: the output layer costs exactly 4 layers, total 20 layer units. PP 2: threshold 10 units; the 11th layer
    # is the first past it and stays on stage 0 -> 11 + 5. PP 4: thresholds 5, 10, 15 -> layers 1-6, 7-11, 12-16,
    # and the output layer alone on the last stage.
    assert cost_balanced_layers(NANO_1B, 2) == (11, 5)
    assert cost_balanced_layers(NANO_1B, 4) == (6, 5, 5, 0)
    # 8.86B: output layer 536,870,912 / 243,269,632 = 2.21 layers; quarter thresholds at 8.55, 17.10, 25.66 layers
    # -> layers 1-9, 10-18, 19-26, 27-32.
    assert cost_balanced_layers(NANO_8B, 4) == (9, 9, 8, 6)


def test_a_split_that_leaves_a_stage_empty_is_refused_in_words():
    # 1.34B at PP 8: thresholds every 2.5 units; the 16th layer passes 15 on stage 5 (of 0-7), so the output layer
    # lands on stage 6 and stage 7 would only run the fp32 cast and the loss. PP 5 (thresholds every 4 units: layers
    # 1-5, 6-9, 10-13, 14-16, the 16th not above 16, so the walk ends on stage 3 of 0-4), 6 and 7 fail likewise.
    # PP 5-7 fail the same way, so the message names PP 1-4 as the degrees this model splits into.
    with pytest.raises(ScenarioError, match=r"^Pipeline parallel 8: nanotron's cost-balanced split of the 16 layers "
                                            r"puts the output layer on stage 6 \(stages 0-7\) and leaves the later "
                                            r"stages no layer \(only the loss\), a split this estimate does not model; "
                                            r"the pipeline degrees it splits this model into below 8: 1-4 \(one that also divides the GPU "
                                            r"count\)$"):
        cost_balanced_layers(NANO_1B, 8)


def test_the_nanotron_record_gives_its_split_to_the_estimate_and_the_search():
    nano, generic = framework("nanotron"), framework("generic")
    assert nano.cost_balanced_stages and "build_model" in nano.source("cost_balanced_stages")
    assert not generic.cost_balanced_stages
    sc = Scenario(seq_len=4096, micro_batch_size=1)
    cluster = Cluster(gpu=find_gpu("H100 80GB"), nodes=1, gpus_per_node=8)
    layout = Layout(pipeline_parallel=2, data_parallel=4, zero=1, micro_batch_size=1, global_batch_size=64)
    ours = estimate_layout(NANO_1B, sc, layout, cluster, master_weights=True, **nano.layout_settings())
    even = estimate_layout(NANO_1B, sc, layout, cluster, master_weights=True, **generic.layout_settings())
    assert ours.layout.layers_per_stage == (11, 5) and [s.layers for s in ours.memory.stages] == [11, 5]
    assert even.layout.layers_per_stage is None and [s.layers for s in even.memory.stages] == [8, 8]
    # a split the caller gives is kept
    given = layout.model_copy(update={"layers_per_stage": (9, 7)})
    assert estimate_layout(NANO_1B, sc, given, cluster, master_weights=True,
                           **nano.layout_settings()).layout.layers_per_stage == (9, 7)
    found = search_layouts(NANO_1B, sc, cluster, 64, master_weights=True, **nano.layout_settings())
    piped = [c for c in found if c.layout.pipeline_parallel == 2 and c.fits]
    assert piped and all(c.layout.layers_per_stage == (11, 5) for c in piped)
    refused = [c for c in found if c.layout.pipeline_parallel == 8]
    assert refused and all(not c.fits and "leaves the later stages no layer" in c.reason for c in refused)


def test_cli_json_carries_the_split_and_the_framework_says_it(capsys):
    # Llama 3.1 8B at PP 2 under nanotron: output layer 128,256 x 4,096 = 2.16 layers of 4 x 4,096^2 + 3 x 14,336 x
    # 4,096, total 34.16 layers; the 18th layer is the first past 17.08 -> 18 + 14 (the generic framework: 16 + 16).
    base = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--num-gpus", "16", "--gpu", "H100 80GB",
            "--pipeline-parallel", "2", "--strategy", "zero1", "--seq-len", "4096", "--global-batch-size", "64"]
    assert main([*base, "--layout-framework", "nanotron"]) == 0
    nano = json.loads(capsys.readouterr().out)
    assert nano["layout"]["layers_per_stage"] == [18, 14] and nano["layout_framework"]["cost_balanced_stages"]
    assert "pipeline stages split by compute cost" in nano["layout_framework"]["summary"]
    assert main(base) == 0
    generic = json.loads(capsys.readouterr().out)
    assert generic["layout"]["layers_per_stage"] is None and not generic["layout_framework"]["cost_balanced_stages"]


def test_the_estimates_refusal_names_only_degrees_that_divide_its_gpus():
    # Llama 3.1 8B (32 layers) at PP 16 on 16 GPUs under nanotron: the walk splits it into 1-15 stages
    # (engine.scaleout.stage_split._walk), of which 1, 2, 4 and 8 divide the 16 GPUs left after TP x CP = 1 (a fresh
    # user was sent to PP 3 and 5, which 16 GPUs refuse).
    llama = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])
    layout = Layout(pipeline_parallel=16, data_parallel=1, zero=1, micro_batch_size=1, global_batch_size=16)
    cluster = Cluster(gpu=find_gpu("H100 80GB"), nodes=2, gpus_per_node=8)
    with pytest.raises(ScenarioError, match=r"stage 14 \(stages 0-15\).*the pipeline degrees below 16 that split this "
                                            r"model and divide the 16 GPUs left after TP x CP: 1, 2, 4, 8$"):
        estimate_layout(llama, Scenario(seq_len=4096), layout, cluster, master_weights=True,
                        **framework("nanotron").layout_settings())
