"""Bad input per format: not YAML, a YAML bomb, wrong types, an unknown model, conflicting keys. Each is a typed error
with a one-line message that names the key (and, for conflicts, both keys), never a traceback or a silent value."""

from __future__ import annotations

import time

import pytest

from engine.errors import CatalogError, ConflictingKeysError, RepoNotFoundError, TrainingConfigError
from engine.importers import MAX_IMPORT_BYTES, import_configs, load_imported_model
from engine.importers.parse import MAX_NODES

BOMB = b"""a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""  # "billion laughs": 9^9 = 387,420,489 strings once expanded

# (format, a valid file of it, a wrong-typed key, conflicting keys (one file, or two files))
FORMATS = {
    "trainer": ('{"per_device_train_batch_size": 2}', '{"per_device_train_batch_size": "four"}',
                [("args.json", '{"per_device_train_batch_size": 2, "bf16": true, "fp16": true}')],
                "per_device_train_batch_size: must be an integer >= 1 (got 'four')", "bf16 and fp16 are both true"),
    "trl": ("model_name_or_path: a/b\nmax_length: 512\n", "model_name_or_path: a/b\nmax_length: [512]\n",
            [("sft.yaml", "model_name_or_path: a/b\nmax_length: 512\nmax_seq_length: 1024\n")],
            "max_length: must be an integer >= 1 (got [512])", "max_length and max_seq_length disagree (512 vs 1024)"),
    "axolotl": ("base_model: a/b\nmicro_batch_size: 1\n", "base_model: a/b\nlora_target_linear: 'yes please'\n",
                [("ax.yaml", "base_model: a/b\nmicro_batch_size: 1\nbf16: true\nfp16: true\n")],
                "lora_target_linear: must be true or false (got 'yes please')", "bf16 and fp16 are both true"),
    "llamafactory": ("model_name_or_path: a/b\nstage: sft\n", "model_name_or_path: a/b\nstage: sft\nlora_rank: 8.5\n",
                     [("lf.yaml", "model_name_or_path: a/b\nstage: sft\nbf16: true\nfp16: true\n")],
                     "lora_rank: must be an integer >= 1 (got 8.5)", "bf16 and fp16 are both true"),
    "torchtune": ("model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\nbatch_size: 2\n",
                  "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\nbatch_size: two\n",
                  [("tt.yaml", "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\nbatch_size: 2\n"),
                   ("ds.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}')],
                  "batch_size: must be an integer >= 1 (got 'two')",
                  "tt.yaml: batch_size and ds.json: train_micro_batch_size_per_gpu disagree (2 vs 1)"),
    "deepspeed": ('{"zero_optimization": {"stage": 2}}', '{"zero_optimization": {"stage": 5}}',
                  [("ds.json", '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}, "fp16": {"enabled": true}}')],
                  "zero_optimization.stage: must be 0, 1, 2 or 3 (got 5)", "bf16.enabled and fp16.enabled are both true"),
    "accelerate": ("distributed_type: FSDP\nnum_processes: 8\n", "distributed_type: FSDP\nnum_processes: eight\n",
                   [("acc.yaml", "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: fp16\n"),
                    ("args.json", '{"per_device_train_batch_size": 2, "bf16": true}')],
                   "num_processes: must be an integer >= -1 (got 'eight')",
                   "acc.yaml: mixed_precision and args.json: bf16 disagree ('fp16' vs 'bf16')"),
    "peft": ('{"peft_type": "LORA", "r": 8}', '{"peft_type": "LORA", "r": "16"}',
             [("adapter_config.json", '{"peft_type": "LORA", "r": 8}'), ("ax.yaml", "base_model: a/b\nlora_r: 16\n")],
             "r: must be an integer >= 1 (got '16')", "adapter_config.json: r and ax.yaml: lora_r disagree (8 vs 16)"),
    "bnb": ('{"load_in_4bit": true}', '{"load_in_4bit": "true"}',
            [("bnb.json", '{"load_in_4bit": true, "load_in_8bit": true}')],
            "load_in_4bit: must be true or false (got 'true')", "load_in_4bit and load_in_8bit are both true"),
}


def test_every_format_reads_its_valid_file():
    for fmt, (good, *_rest) in FORMATS.items():
        import_configs([("x", good.encode())]).scenario()


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrong_types(fmt):
    with pytest.raises(TrainingConfigError) as info:
        import_configs([("x", FORMATS[fmt][1].encode())])
    assert type(info.value) is TrainingConfigError and FORMATS[fmt][3] in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_conflicting_keys(fmt):
    with pytest.raises(ConflictingKeysError) as info:
        import_configs([(n, t.encode()) for n, t in FORMATS[fmt][2]])
    assert FORMATS[fmt][4] in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("data", "needle"), [
    (b"model: [unclosed\n  - x: {", "is not valid YAML (line"),
    (b"{\"per_device_train_batch_size\": 2,}", "is not valid JSON (line 1, column"),
    (b"just a sentence, not settings", "holds a str, not a mapping of settings"),
    (b"- a\n- b\n", "holds a list, not a mapping"),
    (b"\xff\xfe\x00binary", "is not UTF-8 text"),
    (b"a: 1\n---\nb: 2\n", "is not valid YAML"),  # two documents
    (b"!!python/object/apply:os.system ['true']\n", "could not determine a constructor"),  # safe_load builds no objects
    (b"learning_rate: 0.1\nfoo: bar\n", "not a training config this importer recognises"),
    (b" " * (MAX_IMPORT_BYTES + 1), f"at most {MAX_IMPORT_BYTES:,} bytes"),
])
def test_not_a_config(data, needle):
    with pytest.raises(TrainingConfigError) as info:
        import_configs([("train.yaml", data)])
    assert needle in str(info.value) and str(info.value).startswith("train.yaml")


def test_yaml_bomb_is_refused_fast():
    start = time.perf_counter()
    with pytest.raises(TrainingConfigError, match=f"expands to more than {MAX_NODES:,} values"):
        import_configs([("bomb.yaml", BOMB)])
    assert time.perf_counter() - start < 1.0


def test_deep_nesting_is_refused():
    deep = b"a:\n" + b"".join(b"  " * i + b"b:\n" for i in range(1, 40)) + b"  " * 40 + b"c: 1\n"
    with pytest.raises(TrainingConfigError, match="nests more than"):
        import_configs([("deep.yaml", deep)])


MODEL_FILES = {
    "trainer/trl": "model_name_or_path: acme/does-not-exist\nmax_length: 512\n",
    "axolotl": "base_model: acme/does-not-exist\nmicro_batch_size: 1\n",
    "llamafactory": "model_name_or_path: acme/does-not-exist\nstage: sft\n",
    "peft": '{"peft_type": "LORA", "base_model_name_or_path": "acme/does-not-exist"}',
}


@pytest.mark.parametrize("fmt", MODEL_FILES)
def test_unknown_model_through_the_hub_and_offline(fmt, hub_stub):
    result = import_configs([("x", MODEL_FILES[fmt].encode())])
    with pytest.raises(RepoNotFoundError, match="'acme/does-not-exist' was not found on the Hub"):
        load_imported_model(result)
    with pytest.raises(CatalogError, match="'acme/does-not-exist' is not in the bundled catalog"):
        load_imported_model(result, offline=True)


def test_unknown_torchtune_model_says_what_to_do():
    result = import_configs([("tt.yaml", b"model:\n  _component_: acme.models.mystery_7b\nbatch_size: 2\n")])
    assert result.model is None and any("name no model this importer knows" in n for n in result.notes)


def test_a_local_path_is_not_a_repo_id():
    result = import_configs([("ax.yaml", b"base_model: /data/models/llama\nmicro_batch_size: 1\n")])
    with pytest.raises(TrainingConfigError, match="base_model '/data/models/llama' is a local path: pass that model's config.json with --config"):
        load_imported_model(result)


def test_the_files_known_model_is_read_from_the_hub(hub_stub):
    from engine.model.sources import config_from_catalog
    from hubstub import StubRepo

    hub_stub.add("meta-llama/Llama-3.1-8B-Instruct", StubRepo(config=config_from_catalog("meta-llama/Llama-3.1-8B")[0]))
    result = import_configs([("tt.yaml", b"model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n"
                                         b"checkpointer:\n  checkpoint_dir: /tmp/Meta-Llama-3.1-8B-Instruct/\n")])
    config, origin = load_imported_model(result)
    assert origin.kind == "hub" and origin.repo_id == "meta-llama/Llama-3.1-8B-Instruct"
    assert config["hidden_size"] == 4096


# --- a key given twice (issue 25 acceptance: no silent last-wins) ------------------------------------------------------
# json.loads and PyYAML's safe_load both keep the last of two equal keys without a word: micro batch 1 then 64 would be
# read as 64 (58x the memory of the first). A duplicate with a different value is refused naming the key; the same
# value twice is harmless; a key overriding one merged in by YAML's ``<<: *anchor`` is YAML's own override.

@pytest.mark.parametrize("name, data", [
    ("ax.yaml", b"base_model: a/b\nmicro_batch_size: 1\nmicro_batch_size: 64\n"),
    ("args.json", b'{"per_device_train_batch_size": 1, "per_device_train_batch_size": 64}'),
    ("ds.json", b'{"zero_optimization": {"stage": 2, "stage": 3}}'),
    ("nested.yaml", b"distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: false\n  fsdp_offload_params: true\n"),
])
def test_a_key_twice_with_different_values_is_refused(name, data):
    with pytest.raises(TrainingConfigError) as info:
        import_configs([(name, data)])
    message = str(info.value)
    assert "twice" in message and name in message and "\n" not in message, message


def test_the_same_value_twice_and_a_merge_override_are_read():
    same = import_configs([("ax.yaml", b"base_model: a/b\nmicro_batch_size: 2\nmicro_batch_size: 2\n")])
    assert same.fields["micro_batch_size"] == 2
    merged = import_configs([("ax.yaml", b"defaults: &d\n  lora_r: 8\nbase_model: a/b\nmicro_batch_size: 4\n"
                                         b"extra:\n  <<: *d\n  lora_r: 16\n")])
    assert merged.fields["micro_batch_size"] == 4
