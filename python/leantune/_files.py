"""Model folders into other model folders or files: merge, quantize, GGUF export."""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

from . import _native

PathLike = Union[str, "os.PathLike[str]"]


def _s(path: Optional[PathLike]) -> str:
    return "" if path is None else os.fspath(path)


def merge(base_model: PathLike, adapter: PathLike, out_dir: PathLike) -> str:
    """Merges a PEFT LoRA adapter into its base model for good (``leantune merge``).

    Writes ``out_dir/model.safetensors`` (f32: W += s·B·A for every adapted projection) with the
    base folder's config.json and tokenizer files, a Hugging Face folder that transformers and
    :func:`leantune.load` read. ``base_model``: an HF folder or a .safetensors beside its
    config.json. Returns ``out_dir``.
    """
    _native.merge_adapter(os.fspath(base_model), os.fspath(adapter), os.fspath(out_dir))
    return os.fspath(out_dir)


def quantize(model: PathLike, out_dir: PathLike, type: str = "nf4", *, blocksize: int = 64,
             double_quant: bool = False) -> str:
    """Writes a quantized model folder (``leantune quantize``) that :func:`leantune.load` and training read.

    ``type``: ``"nf4"``, ``"fp4"`` (bitsandbytes layouts, ``blocksize`` a power of two from 64 to
    4096, ``double_quant``: the block scales quantized to 8 bits too) or ``"int8"`` (one scale per
    row). ``model``: an f32 / f16 / bf16 model (HF folder, .safetensors, llama2.c .bin).
    Returns ``out_dir``.
    """
    _native.quantize_model(os.fspath(model), type, blocksize, double_quant, os.fspath(out_dir))
    return os.fspath(out_dir)


def export_gguf(path: PathLike, model: Optional[PathLike] = None, *, adapter: Optional[PathLike] = None,
                tokenizer: Optional[PathLike] = None, base: Optional[PathLike] = None, name: str = "",
                type: str = "f16") -> Dict[str, Any]:
    """Writes a GGUF file that llama.cpp loads (``leantune export --gguf``).

    With ``model``: the model (an ``adapter`` merged in first) and its tokenizer; with only
    ``adapter``: a llama.cpp LoRA adapter GGUF (``base``: the model it fits). ``type``: ``"f32"``,
    ``"f16"``, ``"bf16"``, ``"q8_0"``, ``"q4_0"`` for the linear weights. Returns ``tensors``,
    ``adapter_only``, ``tokenizer_model``, ``tokenizer_path``, ``lora_r``, ``lora_scaling``.
    """
    return _native.export_gguf(os.fspath(path), _s(model), _s(adapter), _s(tokenizer), _s(base), name, type)


def machine_info() -> Dict[str, Any]:
    """This machine as the engine sees it: ``cpu_features``, ``kernels`` (the SIMD level used), ``hardware_threads``."""
    return _native.machine_info()
