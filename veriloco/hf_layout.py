"""The project's GPT in Hugging Face's GPT-2 layout (``veriloco model export --format hf``).

The ``gpt`` architecture (``trainer.model``) computes exactly GPT-2's function with three
differences of form, none of substance:

* the key projection has no bias: GPT-2's fused ``c_attn`` bias gets zeros in the key third
  (a key bias shifts all of a query's scores equally, which softmax ignores, so zeros are exact);
* the output projection is untied from the token embedding: the config says
  ``tie_word_embeddings: false`` and ``lm_head.weight`` is written;
* GPT-2's ``Conv1D`` layers store ``[in, out]`` weights, ``nn.Linear`` ``[out, in]``: transposed.

The LayerNorms (epsilon 1e-5), the exact (erf) GELU (``activation_function: gelu``), the
attention scaling by 1/sqrt(head size) and learned positions are GPT-2's own. Tokens are bytes
(vocabulary 256, no special tokens): ``list(text.encode())`` is the input, and
``bytes(ids).decode(errors="replace")`` the output; the folder's README says so.

Pure mapping (tensors in, tensors out); writing the folder is ``veriloco.export``'s.
"""

from __future__ import annotations

from typing import Any

import torch

HF_MODEL_TYPE = "gpt2"
HF_ARCHITECTURE = "GPT2LMHeadModel"


def gpt2_config(model_params: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """A ``transformers`` GPT-2 config for the ``gpt`` architecture's parameters."""
    dropout = float(model_params.get("dropout", "0"))
    return {
        "model_type": HF_MODEL_TYPE,
        "architectures": [HF_ARCHITECTURE],
        "vocab_size": vocab_size,
        "n_positions": int(model_params["block_size"]),
        "n_embd": int(model_params["d_model"]),
        "n_layer": int(model_params["n_layer"]),
        "n_head": int(model_params["n_head"]),
        "n_inner": 4 * int(model_params["d_model"]),
        "activation_function": "gelu",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": dropout, "embd_pdrop": dropout, "attn_pdrop": dropout,
        "scale_attn_weights": True,
        "tie_word_embeddings": False,
        # Bytes have no special tokens; GPT-2's defaults (50256) lie outside a 256-token vocabulary.
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
        "torch_dtype": "float32",
    }


def gpt2_state_dict(params: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """The ``gpt`` parameters (``trainer.model.GPT`` names) under GPT2LMHeadModel's names.

    Raises:
        ValueError: a parameter is missing or left over (not the ``gpt`` architecture).
    """
    left = dict(params)

    def take(name: str) -> torch.Tensor:
        if name not in left:
            raise ValueError(f"parameter {name!r} missing: not the gpt architecture")
        return left.pop(name).detach().to(torch.float32)

    out: dict[str, torch.Tensor] = {"transformer.wte.weight": take("tok.weight"),
                                    "transformer.wpe.weight": take("pos.weight")}
    for i in range(n_layer):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        for a, b in (("ln1", "ln_1"), ("ln2", "ln_2")):
            out[f"{theirs}{b}.weight"] = take(f"{ours}{a}.weight")
            out[f"{theirs}{b}.bias"] = take(f"{ours}{a}.bias")
        q_bias = take(f"{ours}attn.q_bias")
        out[f"{theirs}attn.c_attn.weight"] = take(f"{ours}attn.qkv.weight").t()
        out[f"{theirs}attn.c_attn.bias"] = torch.cat([q_bias, torch.zeros_like(q_bias), take(f"{ours}attn.v_bias")])
        out[f"{theirs}attn.c_proj.weight"] = take(f"{ours}attn.proj.weight").t()
        out[f"{theirs}attn.c_proj.bias"] = take(f"{ours}attn.proj.bias")
        out[f"{theirs}mlp.c_fc.weight"] = take(f"{ours}mlp.fc.weight").t()
        out[f"{theirs}mlp.c_fc.bias"] = take(f"{ours}mlp.fc.bias")
        out[f"{theirs}mlp.c_proj.weight"] = take(f"{ours}mlp.proj.weight").t()
        out[f"{theirs}mlp.c_proj.bias"] = take(f"{ours}mlp.proj.bias")
    out["transformer.ln_f.weight"] = take("ln_f.weight")
    out["transformer.ln_f.bias"] = take("ln_f.bias")
    out["lm_head.weight"] = take("head.weight")
    if left:
        raise ValueError(f"parameters left over: {sorted(left)[:3]}: not the gpt architecture")
    return {name: t.contiguous() for name, t in out.items()}


HF_README = """# A veriloco model in Hugging Face's GPT-2 layout

```python
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("{folder}").eval()
ids = torch.tensor([list("To be, or not to be".encode())])   # tokens are bytes (0-255)
logits = model(ids).logits                                    # [1, T, 256]
```

Tokens are the bytes of UTF-8 text: vocabulary 256, no special tokens, no tokenizer files
(`bytes(ids).decode(errors="replace")` turns tokens back into text). The model is θ_{epoch} of
run {run} ({run_id}), model hash {model_hash}; `config.json`'s `veriloco` section says so too,
with the loss of this model on `sample.bin` ({windows} validation windows of {window} bytes).
"""
