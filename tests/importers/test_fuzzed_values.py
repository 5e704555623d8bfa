"""Values found by giving every mapped key of every format inf, nan, 1e30, 2**62, -1, 0, "yes", lists and mappings
(issue 25: no traceback, no silent wrong number): each row below was a traceback or an accepted value before."""

from __future__ import annotations

import pytest

from engine.errors import TrainingConfigError
from engine.importers import import_configs


@pytest.mark.parametrize("name, data, needle", [
    # number() took .inf: an epoch count of infinity (the CLI's hours and cost were inf)
    ("ax.yaml", b"base_model: a/b\nmicro_batch_size: 1\nnum_epochs: .inf\n", "num_epochs: must be a finite number"),
    ("args.json", b'{"per_device_train_batch_size": 1, "num_train_epochs": Infinity}', "num_train_epochs: must be a finite"),
    ("tt.yaml", b"model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\nbatch_size: 2\nepochs: 1.0e+30\n",
     "epochs: must be a finite number, at most"),
    # integer() took 1e30 and 2**62 processes: num_gpus 10^30
    ("acc.yaml", b"distributed_type: FSDP\nnum_processes: 1.0e+30\n", "num_processes: must be at most"),
    ("acc.yaml", b"distributed_type: FSDP\nnum_processes: 4611686018427387904\n", "num_processes: must be at most"),
    # 8 processes over 3 machines were 2 per node (6 GPUs launched?), over 16 machines 1 per node (16 GPUs, not 8)
    ("acc.yaml", b"distributed_type: MULTI_GPU\nnum_processes: 8\nnum_machines: 3\n", "not a multiple of num_machines (3)"),
    ("acc.yaml", b"distributed_type: MULTI_GPU\nnum_processes: 8\nnum_machines: 16\n", "not a multiple of num_machines (16)"),
    # float("abc") escaped as a ValueError: a traceback in the CLI
    ("args.json", b'{"per_device_train_batch_size": 1, "optim": "sgd", "optim_args": "momentum=abc"}',
     "optim_args: must be momentum=<a number >= 0> (got 'momentum=abc')"),
    ("ax.yaml", b"base_model: a/b\nmicro_batch_size: 1\noptimizer: sgd\noptim_args:\n  momentum: [1]\n", "optim_args: must be"),
])
def test_a_value_no_run_has_is_refused_naming_the_key(name, data, needle):
    with pytest.raises(TrainingConfigError) as info:
        import_configs([(name, data)])
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_huge_text_value_is_quoted_cut():
    with pytest.raises(TrainingConfigError) as info:
        import_configs([("ax.yaml", b"base_model: a/b\nmicro_batch_size: '" + b"x" * 100_000 + b"'\n")])
    message = str(info.value)
    assert len(message) < 300 and "100,002 characters" in message, message[:400]


def test_the_real_values_still_read():
    acc = import_configs([("acc.yaml", b"distributed_type: MULTI_GPU\nnum_processes: 16\nnum_machines: 2\n")])
    assert acc.parallel["num_gpus"] == 16 and acc.parallel["gpus_per_node"] == 8
    sgd = import_configs([("args.json", b'{"per_device_train_batch_size": 1, "optim": "sgd", "optim_args": "momentum=0.9"}')])
    assert sgd.fields["optimizer"].value == "sgd_momentum"
    ax = import_configs([("ax.yaml", b"base_model: a/b\nmicro_batch_size: 1\nnum_epochs: 3\n")])
    assert ax.dataset["epochs"] == 3


def test_yaml_1_1_readings_are_said():
    # PyYAML (YAML 1.1), which axolotl, LLaMA-Factory and HfArgumentParser.parse_yaml_file use, reads 010 as octal 8,
    # 1:30 as base-60 90, 1_0 as 10 and off as false: the estimate uses what the tool reads, and says so.
    r = import_configs([("ax.yaml", b"base_model: a/b\nmicro_batch_size: 010\nsequence_len: 1:30\n"
                                    b"gradient_checkpointing: off\nlora_r: 1_0\nadapter: lora\nnum_epochs: 3\n")])
    assert r.fields["micro_batch_size"] == 8 and r.fields["seq_len"] == 90 and r.fields["gradient_checkpointing"] is False
    said = " ".join(r.notes)
    for needle in ("micro_batch_size: 010 is read as 8", "sequence_len: 1:30 is read as 90",
                   "gradient_checkpointing: off is read as False", "lora_r: 1_0 is read as 10"):
        assert needle in said, said
    assert "num_epochs" not in said  # plain 3 is 3 in every YAML


def test_quoted_values_and_json_get_no_yaml_note():
    r = import_configs([("ax.yaml", b"base_model: a/b\nmicro_batch_size: 8\nsequence_len: 1024\n")])
    assert not any("YAML 1.1" in n for n in r.notes)


def test_a_deepspeed_offload_given_as_a_value_is_said_not_silently_dropped():
    # Before: "offload_param": "cpu" fell under zero_optimization.* (ignored): a ZeRO-3 estimate without offload and
    # no word. DeepSpeed's own config (a pydantic model) refuses a string there.
    r = import_configs([("ds.json", b'{"zero_optimization": {"stage": 3, "offload_param": "cpu", "offload_optimizer": "cpu"}}')])
    assert "offload" not in r.parallel
    assert set(r.unsupported) == {"zero_optimization.offload_param", "zero_optimization.offload_optimizer"}
    ok = import_configs([("ds.json", b'{"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}, '
                                     b'"offload_optimizer": {"device": "cpu"}}}')])
    assert ok.parallel["offload"].value == "optimizer_and_params" and not ok.unsupported
