"""The checkpoint's own parameter count, read from its safetensors headers on the Hub, beside ours.

huggingface_hub's ``HfApi.get_safetensors_metadata`` (2.x) reads only the JSON header of each
safetensors file (HTTP range requests of about 100 kB; no weights are downloaded) and sums the element
counts of every stored tensor. That total can differ from what transformers holds in memory, for known
reasons that :func:`explain_difference` names.
"""

from __future__ import annotations

from typing import Any

import httpx2  # huggingface_hub 2.x's HTTP library
from huggingface_hub import HfApi
from huggingface_hub import errors as hf_errors
from pydantic import BaseModel, ConfigDict

from engine.model.architecture import Architecture
from engine.model.hub import _endpoint, _offline, validate_repo_id


class CheckpointCount(BaseModel):
    """Parameters stored in a repo's safetensors files.

    ``total`` is None when it could not be read, with ``reason`` saying why; ``by_dtype`` maps the
    safetensors dtype names (``BF16``, ``F32``, ``U8`` ...) to element counts.
    """

    model_config = ConfigDict(frozen=True)

    total: int | None
    by_dtype: dict[str, int] = {}
    files: int = 0
    reason: str | None = None


def fetch_checkpoint_count(
    repo_id: str, *, revision: str | None = None, token: str | bool | None = None, timeout_s: float = 10.0
) -> CheckpointCount:
    """Sum the tensors of ``repo_id``'s safetensors files from their headers.

    Never raises for Hub trouble: a repo without safetensors (only ``.bin`` weights), a gated repo
    without access, or an unreachable Hub give ``total=None`` and a reason, because this is a
    cross-check beside the config-derived count, not something the estimate needs.

    Raises:
        InvalidRepoIdError: malformed ``repo_id`` (no request made).
    """
    repo_id = validate_repo_id(repo_id)
    offline = CheckpointCount(total=None, reason="the Hub could not be read (offline mode is on: HF_HUB_OFFLINE is set)")
    if _offline():  # as the config read says it, and no request is made
        return offline
    api = HfApi(endpoint=_endpoint())
    try:
        meta = api.get_safetensors_metadata(repo_id, revision=revision or None, token=token, timeout=timeout_s)
    except hf_errors.NotASafetensorsRepoError:
        return CheckpointCount(total=None, reason="the repo has no safetensors weights (model.safetensors or its index)")
    except hf_errors.SafetensorsParsingError:
        return CheckpointCount(total=None, reason="a safetensors header could not be parsed")
    except hf_errors.GatedRepoError:
        return CheckpointCount(total=None, reason="the repo is gated and no token with access was given")
    except hf_errors.OfflineModeIsEnabled:  # offline mode turned on by huggingface_hub's own flag
        return offline
    except hf_errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        return CheckpointCount(total=None, reason=f"the Hub refused the request (HTTP {status})")
    except httpx2.TimeoutException:
        return CheckpointCount(total=None, reason=f"the Hub could not be read (no answer within {timeout_s:g} s)")
    except httpx2.ConnectError:
        return CheckpointCount(total=None, reason="the Hub could not be read (connection failed)")
    except (httpx2.HTTPError, OSError, ValueError) as exc:
        return CheckpointCount(total=None, reason=f"the Hub could not be read ({type(exc).__name__})")
    by_dtype = {str(k): int(v) for k, v in meta.parameter_count.items()}
    return CheckpointCount(total=sum(by_dtype.values()), by_dtype=by_dtype, files=len(meta.files_metadata))


def explain_difference(arch: Architecture, config: dict[str, Any], stored: int) -> list[str]:
    """Known causes of ``stored - arch.total_parameters`` that match this model, in plain words.

    Checked: a tied LM head saved anyway (Qwen3-0.6B), causal-mask buffers saved in the checkpoint
    (GPT-2's ``attn.bias``, layers x positions^2), quantized checkpoints whose packed tensors count
    bytes or int32 words rather than weights, and extra heads that transformers does not load
    (multi-token-prediction layers).
    """
    diff = stored - arch.total_parameters
    if diff == 0:
        return []
    causes = []
    head = arch.vocab_size * arch.hidden_size
    if arch.tie_word_embeddings and diff == head:
        causes.append(f"the checkpoint also stores the tied LM head ({head:,} = vocab x hidden), held once in memory")
    positions = arch.max_position_embeddings or 0
    if arch.checkpoint_buffer_elements and diff == arch.checkpoint_buffer_elements:
        causes.append(f"the checkpoint stores {arch.num_layers} attn.bias causal-mask buffers of {positions} x {positions}, "
                      "which transformers does not load as parameters")
    if config.get("quantization_config"):
        method = config["quantization_config"].get("quant_method", "unknown")
        causes.append(f"the checkpoint is quantized ({method}): packed tensors hold several weights per stored element, "
                      "plus scales and zero points, so its count is not the number of weights")
    if config.get("num_nextn_predict_layers"):
        causes.append(f"the checkpoint has {config['num_nextn_predict_layers']} multi-token-prediction layer(s) that "
                      "transformers does not load")
    if not causes:
        causes.append("no known cause matches: the config may not describe these weights exactly (extra heads, "
                      "buffers or a different architecture revision)")
    return causes
