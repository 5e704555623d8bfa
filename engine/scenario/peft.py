"""Parameter-efficient methods beyond LoRA: which tensors each trains, with the shapes PEFT 0.21 gives them.

Every method freezes the base model; the trainable tensors are (per targeted ``nn.Linear(in, out)`` unless said):

- LoRA / QLoRA / rsLoRA: ``lora_A`` (r x in), ``lora_B`` (out x r): ``r (in + out)`` (Hu et al. 2021, sec. 4.1;
  rsLoRA only changes the scaling to alpha / sqrt(r): Kalajdzievski 2023, "A Rank Stabilization Scaling Factor").
- DoRA: LoRA's plus ``lora_magnitude_vector`` (out): ``r (in + out) + out`` (Liu et al. 2024, "DoRA", sec. 4;
  PEFT ``tuners/lora/dora.py``).
- AdaLoRA: ``lora_A`` (r x in), ``lora_E`` (r x 1), ``lora_B`` (out x r) at the initial rank ``init_r`` (= the
  scenario's LoRA rank): ``r (in + out + 1)``. Pruning masks singular values (``lora_E`` entries set to 0) but keeps
  the tensors, so the memory follows ``init_r``, not the budget ``target_r`` (Zhang et al. 2023, "AdaLoRA", sec. 3;
  PEFT ``tuners/adalora``); plus PEFT's one-element ``ranknum`` per module, which requires grad.
- IA3: one vector per module, ``out`` (scales the output) or ``in`` for a feed-forward module (scales the input)
  (Liu et al. 2022, "Few-Shot Parameter-Efficient Fine-Tuning...", sec. 3.3; PEFT ``tuners/ia3/layer.py``).
- VeRA: ``lambda_b`` (out) and ``lambda_d`` (r) per module; the random projections ``vera_A`` (r x max in) and
  ``vera_B`` (max out x r) are frozen buffers shared by every module (Kopiczko et al. 2024, "VeRA", sec. 3.1).
- LoHa: ``hada_w1_a``, ``hada_w2_a`` (out x r), ``hada_w1_b``, ``hada_w2_b`` (r x in): ``2 r (in + out)`` (Hyeon-Woo
  et al. 2022, "FedPara"; PEFT ``tuners/loha/layer.py``).
- LoKr: ``lokr_w1`` (a x c) and ``lokr_w2`` (b x d), with out = a b and in = c d factored near their square roots;
  ``lokr_w2`` is split into (b x r) (r x d) when r < max(b, d) / 2 (PEFT ``tuners/lokr/layer.py``,
  ``factorization(dim, -1)``, ``decompose_both=False``).
- Prompt tuning: ``n`` virtual token embeddings (n x hidden) (Lester et al. 2021).
- P-tuning: the n x hidden embedding and PEFT's MLP prompt encoder (hidden -> hidden -> hidden -> hidden, with
  biases) (Liu et al. 2021, "GPT Understands, Too"; PEFT ``tuners/p_tuning/model.py``).
- Prefix tuning: one embedding of n x (layers x 2 x kv width): a key and a value prefix for every layer, in the
  KV heads' width for grouped-query models (Li & Liang 2021; PEFT ``utils/other.py`` GQA handling).

Each method's per-module tensors and its other facts are its record in :mod:`engine.scenario.methods` (this module
walks the targets and adds the prompt encoders, VeRA's shared buffers and ``modules_to_save``).

``modules_to_save`` (``embed_tokens``, ``lm_head``, ...) wraps a module in PEFT's ``ModulesToSaveWrapper``: a full
trainable copy beside the frozen original (PEFT ``utils/other.py``).
"""

from __future__ import annotations

from engine.errors import ScenarioError
from engine.model.architecture import Architecture, LinearLayer, TensorGroup
from engine.scenario.freeze import split_groups
from engine.scenario.lora import default_targets, resolve_targets
from engine.scenario.methods import factorization, is_feedforward, mlp_outputs  # noqa: F401  (re-exported)
from engine.scenario.training import Method, Scenario

LORA_FAMILY = tuple(m for m in Method if m.record.lora_pairs)
"""Methods that train ``lora_A`` / ``lora_B`` pairs (LoRA+ and LoRA-FA apply to them; records' ``lora_pairs``)."""
PROMPT_METHODS = tuple(m for m in Method if m.record.prompt)
"""Methods that add virtual tokens instead of changing linear layers (no target modules; records' ``prompt``)."""
SEQUENCE_GROWING = tuple(m for m in Method if m.record.grows_sequence)
"""Methods that prepend ``num_virtual_tokens`` embeddings to the input: every layer runs on s + n tokens."""


def uses_targets(method: Method) -> bool:
    """Whether the method adapts target linear modules (everything but full fine-tuning and the prompt methods)."""
    return method is not Method.FULL and method not in PROMPT_METHODS


def method_default_targets(arch: Architecture, method: Method) -> tuple[str, ...]:
    """Target modules when the user names none: IA3's PEFT default (the key and value projections and the MLP's
    output projection, ``TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING``), else the attention projections."""
    if method is not Method.IA3:
        return default_targets(arch)
    kv = [lin.target_name for lin in arch.layer_linears if lin.role == "attention" and lin.target_name in ("k_proj", "v_proj")]
    if not kv:  # a fused projection (GPT-2's c_attn, Phi-3's qkv_proj)
        kv = [lin.target_name for lin in arch.layer_linears if lin.role == "attention"
              and lin.out_features > lin.in_features]
    out = [lin.module for lin in mlp_outputs(arch)][:1]
    return tuple(dict.fromkeys(kv + out))


def targeted(arch: Architecture, sc: Scenario) -> list[LinearLayer]:
    """The linear modules of one block that the method adapts (none for full fine-tuning and prompt methods)."""
    if not uses_targets(sc.method):
        return []
    return resolve_targets(arch, sc.lora_targets if sc.lora_targets is not None else method_default_targets(arch, sc.method))


def _module_shapes(arch: Architecture, sc: Scenario, lin: LinearLayer) -> list[tuple[str, tuple[int, ...]]]:
    """Trainable tensors ``(name, shape)`` the method adds to one module (its record's ``module_shapes``)."""
    shapes = sc.method.record.module_shapes
    if shapes is None:
        raise ScenarioError(f"method {sc.method.value} has no per-module adapter")
    return shapes(arch, lin, sc.lora_r)


def adapter_groups(arch: Architecture, sc: Scenario) -> list[TensorGroup]:
    """Every trainable tensor the method adds, as tensor groups (``count`` = blocks x modules per block).

    Raises:
        ScenarioError: a target module that matches no linear layer of ``arch``.
    """
    groups: list[TensorGroup] = []
    for lin in targeted(arch, sc):
        n = lin.blocks(arch.num_layers) * lin.count
        role = "attention" if lin.role == "attention" else "mlp"
        for name, shape in _module_shapes(arch, sc, lin):
            groups.append(TensorGroup(name=f"{lin.module}.{name}", shape=shape, count=n, role=role))
    h, n = arch.hidden_size, sc.num_virtual_tokens
    if sc.method in (Method.PROMPT_TUNING, Method.P_TUNING):
        groups.append(TensorGroup(name="prompt_encoder.embedding", shape=(n, h), count=1, role="embeddings"))
    if sc.method is Method.P_TUNING:
        groups.append(TensorGroup(name="prompt_encoder.mlp_head.weight", shape=(h, h), count=3, role="embeddings"))
        groups.append(TensorGroup(name="prompt_encoder.mlp_head.bias", shape=(h,), count=3, role="embeddings"))
    if sc.method is Method.PREFIX_TUNING:
        groups.append(TensorGroup(name="prefix_encoder.embedding", shape=(n, arch.num_layers * 2 * arch.kv_out),
                                  count=1, role="embeddings"))
    return groups + saved_module_copies(arch, sc)


def frozen_adapter_buffers(arch: Architecture, sc: Scenario) -> list[TensorGroup]:
    """Frozen tensors a method adds: VeRA's shared random projections (``save_projection=True``, fp32 buffers)."""
    if sc.method is not Method.VERA:
        return []
    lins = targeted(arch, sc)
    r = sc.lora_r
    return [TensorGroup(name="vera_A", shape=(r, max(lin.in_features for lin in lins)), count=1, role="attention"),
            TensorGroup(name="vera_B", shape=(max(lin.out_features for lin in lins), r), count=1, role="attention")]


SAVEABLE = {"embed_tokens": "embeddings", "wte": "embeddings", "lm_head": "lm_head"}
"""``modules_to_save`` names the engine knows (the token embedding under its Llama and GPT-2 names, the LM head)."""


def saved_module_copies(arch: Architecture, sc: Scenario) -> list[TensorGroup]:
    """The trainable copies ``modules_to_save`` makes: the embedding matrix for ``embed_tokens``/``wte``, the output
    projection for ``lm_head`` (vocab x hidden; the embedding matrix itself when the two are tied).

    Raises:
        ScenarioError: a name the engine does not know.
    """
    out = []
    for name in sc.modules_to_save or ():
        role = SAVEABLE.get(name)
        if role is None:
            raise ScenarioError(f"modules_to_save: {name} is not supported; supported: {', '.join(sorted(SAVEABLE))}")
        out.append(TensorGroup(name=f"{name}.modules_to_save", shape=(arch.vocab_size, arch.hidden_size), count=1,
                               role=role))
    return out


def trains_lm_head(sc: Scenario) -> bool:
    """Whether a trainable LM-head copy exists (its linear then saves its input for the weight gradient)."""
    return "lm_head" in (sc.modules_to_save or ())


def effective_seq_len(sc: Scenario) -> int:
    """Tokens per sequence the model runs on: s + n for prompt tuning and P-tuning (virtual tokens prepended to the
    input embeddings, their labels set to -100), s otherwise (prefix tuning only lengthens the keys and values)."""
    return sc.seq_len + (sc.num_virtual_tokens if sc.method in SEQUENCE_GROWING else 0)


def trainable_parameter_count(arch: Architecture, sc: Scenario) -> int:
    """Trainable parameters of ``sc`` on ``arch`` (what PEFT's ``print_trainable_parameters`` prints)."""
    if sc.method is Method.FULL:
        if sc.trainable_layers is not None:  # freeze-tuning: the last N blocks (engine.scenario.freeze)
            return sum(g.parameters for g in split_groups(arch, sc)[0])
        return arch.total_parameters
    # LoRA-FA's optimizer freezes every lora_A (peft.optimizers.create_lorafa_optimizer)
    fa = sc.optimizer.record.freezes_lora_a
    return sum(g.parameters for g in adapter_groups(arch, sc) if not (fa and g.name.endswith(".lora_A")))
