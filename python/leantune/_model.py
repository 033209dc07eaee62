"""Models and tokenizers: :func:`leantune.load` and the :class:`Model` and :class:`Tokenizer` it returns."""
from __future__ import annotations

import json
import os
import queue
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from . import _native

PathLike = Union[str, "os.PathLike[str]"]
Ids = Union[Sequence[int], "np.ndarray"]

# `weights=`: how the linear weights are held in memory (the engine's Quantization)
_WEIGHTS = {"f32": "none", "none": "none", "nf4": "nf4", "fp4": "fp4", "int8": "int8"}
# `weights=` formats for inference only (the engine's leantune::Weights: lm_head too)
_INFER_WEIGHTS = {"bf16", "f16", "q4", "q8_0", "q4_0"}


def _ids(ids: Ids) -> List[int]:
    return [int(i) for i in ids]


class Tokenizer:
    """A tokenizer: Hugging Face ``tokenizer.json`` or a llama2.c ``tokenizer.bin``.

    Immutable and thread-safe. ``encode`` adds BOS / EOS as the tokenizer's post-processor says
    (llama2.c: BOS) unless ``add_special=False``; special tokens written in the text are recognised
    either way.
    """

    def __init__(self, path: PathLike) -> None:
        self._native = _native.Tokenizer(os.fspath(path))

    @property
    def path(self) -> str:
        """The file the tokenizer was read from."""
        return self._native.path

    @property
    def vocab_size(self) -> int:
        return self._native.vocab_size

    @property
    def bos_id(self) -> int:
        """The BOS token's id, -1 when there is none."""
        return self._native.bos_id

    @property
    def eos_id(self) -> int:
        """The EOS token's id, -1 when there is none."""
        return self._native.eos_id

    def encode(self, text: str, add_special: bool = True) -> List[int]:
        """Text to token ids."""
        return self._native.encode(text, add_special)

    def decode(self, ids: Ids, skip_special: bool = False) -> str:
        """Token ids to text; ``skip_special`` drops special tokens."""
        return self._native.decode(_ids(ids), skip_special)

    def token_text(self, id: int) -> str:
        """The raw piece of one token."""
        return self._native.token_text(id)

    def is_special(self, id: int) -> bool:
        return self._native.is_special(id)

    @property
    def has_chat_template(self) -> bool:
        """Whether the tokenizer's folder defines a chat template (tokenizer_config.json / chat_template.jinja)."""
        return self._native.has_chat_template

    def apply_chat_template(self, conversation: Sequence[Mapping[str, Any]], tools: Optional[Sequence[Any]] = None,
                            add_generation_prompt: bool = False, tokenize: bool = True,
                            chat_template: Optional[str] = None, **template_kwargs: Any) -> Union[str, List[int]]:
        """A conversation formatted as the model defines it, as transformers' ``apply_chat_template``.

        ``conversation``: message dicts (``role``, ``content``, and any key the template reads:
        ``tool_calls``, ...). ``tools``: tool schemas the template sees as ``tools``.
        ``add_generation_prompt``: end with the header the model answers after. ``tokenize``: the
        token ids (a model's own template encoded without special tokens, as transformers does; a
        built-in one after BOS, as training encodes it), else the text. ``chat_template``: the
        template — ``None`` the tokenizer's own; ``"chatml"``, ``"llama3"``, ``"llama2"``,
        ``"alpaca"``; a ``.jinja`` file; or the name of one of the model's templates. Other
        keywords become template variables (``enable_thinking=False``, ``date_string=...``).
        The template runs in leantune's own Jinja engine (the output equals jinja2's); an
        unsupported construct raises :class:`leantune.Error` naming the template's line.
        """
        opts = _native.ChatOptions(add_generation_prompt=add_generation_prompt,
                                   tools_json="" if tools is None else json.dumps(list(tools)),
                                   vars_json=json.dumps(template_kwargs) if template_kwargs else "",
                                   chat_template=chat_template or "")
        messages = json.dumps([dict(m) for m in conversation])
        if tokenize:
            return self._native.encode_chat_json(messages, opts)
        return self._native.apply_chat_template_json(messages, opts)

    def __repr__(self) -> str:
        return f"leantune.Tokenizer({self.path!r}, vocab_size={self.vocab_size})"


class TextStream:
    """The text of one generation as it is produced: iterate it for the pieces (``str``).

    Generation runs on a worker thread, at most ``AHEAD`` pieces ahead of the reader; ``close()``
    (or leaving a ``with`` block, or dropping the stream) stops it within a token. Once the
    iteration has ended, ``result`` holds what :meth:`Model.generate` returns with ``details=True``.
    """

    AHEAD = 8

    def __init__(self, run: Any) -> None:
        self.result: Optional[Dict[str, Any]] = None
        self._queue: "queue.Queue[str]" = queue.Queue(maxsize=self.AHEAD)
        self._stop = threading.Event()
        self._finished = threading.Event()
        self._outcome: Dict[str, Any] = {}
        q, stop, finished, outcome = self._queue, self._stop, self._finished, self._outcome

        def on_token(_id: int, text: str) -> bool:
            while text and not stop.is_set():
                try:
                    q.put(text, timeout=0.05)
                    break
                except queue.Full:
                    pass
            return not stop.is_set()

        def work() -> None:  # holds no reference to the stream, so dropping it closes it
            try:
                outcome["result"] = run(on_token)
            except BaseException as e:  # raised in the reading thread
                outcome["error"] = e
            finished.set()

        threading.Thread(target=work, name="leantune-generate", daemon=True).start()

    def __iter__(self) -> "TextStream":
        return self

    def __next__(self) -> str:
        while True:
            try:
                return self._queue.get(timeout=0.05)
            except queue.Empty:
                if self._finished.is_set() and self._queue.empty():
                    break
        if "error" in self._outcome:
            raise self._outcome.pop("error")
        self.result = self._outcome.get("result")
        raise StopIteration

    def close(self) -> None:
        """Stops the generation (the pieces already produced can still be read)."""
        self._stop.set()

    def __enter__(self) -> "TextStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self._stop.set()


class Model:
    """A model loaded for inference, with its tokenizer (``model.tokenizer``); see :func:`load`.

    A model is immutable: several threads may generate with one model at once.
    """

    def __init__(self, native: Any, tokenizer: Optional[Tokenizer]) -> None:
        self._native = native
        self.tokenizer = tokenizer

    @property
    def path(self) -> str:
        return self._native.path

    @property
    def config(self) -> Dict[str, Any]:
        """The hyperparameters (dim, n_layers, n_heads, vocab_size, max_seq_len, ...)."""
        return self._native.config

    @property
    def parameter_count(self) -> int:
        return self._native.parameter_count

    @property
    def memory_bytes(self) -> int:
        """Bytes the weights (and what loading them needed) take."""
        return self._native.memory_bytes

    @property
    def threads(self) -> int:
        """Threads each computing call runs on."""
        return self._native.threads

    def _need_tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:
            raise _native.Error(f"{self.path}: this model was loaded without a tokenizer; pass tokenizer= to leantune.load")
        return self.tokenizer

    def generate(self, prompt: Union[str, Ids] = "", max_tokens: int = 256, *, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0,
                 no_repeat_ngram_size: int = 0, seed: int = 0, stop: Union[str, Sequence[str], None] = None,
                 stop_at_eos: bool = True, add_bos: bool = True, context: int = 0, stream: bool = False,
                 details: bool = False) -> Any:
        """Generates the continuation of ``prompt`` (text, or token ids already encoded).

        Sampling follows transformers' ``generate()``: repetition penalty, no-repeat n-gram ban,
        ``temperature`` (0: greedy), top-k, top-p, min-p, then a draw seeded by ``seed``.
        Generation ends at EOS (unless ``stop_at_eos=False``), before the first ``stop`` string,
        after ``max_tokens`` tokens, or when the ``context`` (0: the model's, at most 4096) is full.

        Returns the generated text (without the prompt); with ``stream=True`` a :class:`TextStream`
        that yields it piece by piece; with ``details=True`` a dict: ``text``, ``prompt_ids``,
        ``output_ids``, ``stop_reason``, ``prefill_seconds``, ``decode_seconds``, ``decode_tokens``.
        The GIL is released while the model computes; Ctrl-C stops a generation.
        """
        tok = self._need_tokenizer()
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        p: Union[str, List[int]] = prompt if isinstance(prompt, str) else _ids(prompt)
        native = self._native

        def run(on_token: Any) -> Dict[str, Any]:
            return native.generate(tok._native, p, max_new_tokens=max_tokens, temperature=temperature, top_k=top_k,
                                   top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                                   no_repeat_ngram_size=no_repeat_ngram_size, seed=seed, stop=stops,
                                   stop_at_eos=stop_at_eos, add_bos=add_bos, context=context, on_token=on_token)

        if stream:
            return TextStream(run)
        r = run(None)
        return r if details else r["text"]

    def chat(self, messages: Sequence[Mapping[str, Any]], max_tokens: int = 256, *, tools: Optional[Sequence[Any]] = None,
             chat_template: Optional[str] = None, **generate_kwargs: Any) -> Any:
        """The assistant's answer to ``messages``: the conversation formatted with the chat template
        (:meth:`Tokenizer.apply_chat_template` with the generation prompt), then :meth:`generate`
        from those ids with ``generate_kwargs`` (``temperature``, ``stop``, ``stream``, ...)."""
        ids = self._need_tokenizer().apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                         tokenize=True, chat_template=chat_template)
        return self.generate(ids, max_tokens, **generate_kwargs)

    def logits(self, ids: Ids, decode: Optional[Ids] = None, *, context: int = 0,
               prefill_block: int = 0) -> "np.ndarray":
        """Next-token logits as a float32 numpy array over the engine's buffer (no copy).

        Without ``decode``: the logits after ``ids`` (shape ``(vocab_size,)``), run from position 0.
        With ``decode``: what ``leantune logits --ids IDS --decode DECODE`` writes — the logits
        after prefilling ``ids``, then after each id of ``decode`` fed one at a time through the KV
        cache (shape ``(1 + len(decode), vocab_size)``); ``context`` and ``prefill_block`` as the
        CLI's flags.
        """
        if decode is None:
            return self._native.logits(_ids(ids))
        return self._native.sequence_logits(_ids(ids), _ids(decode), context, prefill_block)

    def __repr__(self) -> str:
        c = self.config
        return (f"leantune.Model({self.path!r}, {c['arch']}, {c['n_layers']} layers, dim {c['dim']}, "
                f"{self.parameter_count} parameters)")


def _llama2c_files(folder: str) -> "tuple[Optional[str], Optional[str]]":
    """A folder without config.json: its one llama2.c checkpoint and its one tokenizer (tok*.bin / tokenizer.*)."""
    names = sorted(os.listdir(folder))
    toks = [n for n in names if n == "tokenizer.json" or (n.startswith("tok") and n.endswith(".bin"))]
    models = [n for n in names if n.endswith(".bin") and n not in toks]
    model = os.path.join(folder, models[0]) if len(models) == 1 else None
    tok = os.path.join(folder, toks[0]) if len(toks) == 1 else None
    return model, tok


def _resolve(model: str, tokenizer: Optional[str]) -> "tuple[str, Optional[str]]":
    """The model path the engine reads and the default tokenizer (the CLI's, plus llama2.c folders)."""
    if os.path.isdir(model) and not os.path.exists(os.path.join(model, "config.json")):
        found, tok = _llama2c_files(model)
        if found is None:
            raise _native.Error(f"{model}: neither a Hugging Face model folder (no config.json) nor a folder with one "
                                f"llama2.c checkpoint (*.bin); give the model file's path")
        return found, tokenizer if tokenizer is not None else tok
    if tokenizer is not None:
        return model, tokenizer
    if model.endswith(".bin"):  # llama2.c: the tokenizer beside it, when there is exactly one
        return model, _llama2c_files(os.path.dirname(model) or ".")[1]
    if model.endswith(".safetensors"):
        return model, os.path.dirname(model) or "."
    return model, model  # an HF folder's tokenizer.json, a GGUF's own tokenizer (or a name the engine resolves)


def load(model: PathLike, tokenizer: Optional[PathLike] = None, weights: str = "f32", *,
         adapter: Optional[PathLike] = None, double_quant: bool = False, threads: int = 0,
         reference_kernels: bool = False, kv_cache: str = "f32", llama_cpp_numerics: bool = False) -> Model:
    """Loads a model for inference, with its tokenizer.

    ``model``: a Hugging Face folder (``config.json`` + safetensors), one ``.safetensors`` file in
    such a folder, a folder written by :func:`leantune.quantize`, a GGUF file, a llama2.c checkpoint
    (``.bin``), or a folder holding one llama2.c checkpoint and its ``tok*.bin`` tokenizer.
    ``tokenizer``: ``tokenizer.json``, its folder, a llama2.c tokenizer ``.bin`` or a GGUF file; by
    default the model's own (its folder; a GGUF's metadata; llama2.c: the one ``tok*.bin`` beside
    the checkpoint).
    ``weights``: how the linear weights are held in memory — ``"f32"`` (as stored), or quantized on
    load: ``"nf4"``, ``"fp4"`` (bitsandbytes layouts; ``double_quant`` quantizes their block scales
    too), ``"int8"`` (LLM.int8); or, with the lm_head too, ``"bf16"`` / ``"f16"`` (16-bit, as stored in
    a 16-bit file), ``"q4"`` (int4 in blocks of 32, llama.cpp's q4_0 grid; int8 lm_head) and
    ``"q8_0"`` (llama.cpp's q8_0: int8 in blocks of 32 with an f16 scale; q8_0 lm_head) and ``"q4_0"``
    (llama.cpp's q4_0: 4-bit in blocks of 32 with an f16 scale; q4_0 lm_head; inputs quantized to
    q8_0 as llama.cpp does). A GGUF's q8_0 / q4_0 tensors are used as stored.
    ``kv_cache``: ``"f32"`` or ``"bf16"`` (half the bytes). ``adapter``: a PEFT LoRA adapter folder merged into the weights.
    ``threads``: threads per computing call (0: one per hardware thread).
    ``llama_cpp_numerics``: compute as llama.cpp's CPU backend does, op for op (``weights="q8_0"`` or
    ``"q4_0"``): its logits bit for bit (slow; ``leantune generate --llama-cpp-numerics``).

    Raises :class:`leantune.Error` naming the file, tensor or key that is wrong.
    """
    if weights not in _WEIGHTS and weights not in _INFER_WEIGHTS:
        raise _native.Error(f"weights={weights!r}: expected one of {', '.join(sorted(set(_WEIGHTS) | _INFER_WEIGHTS))}")
    path, tok_path = _resolve(os.fspath(model), None if tokenizer is None else os.fspath(tokenizer))
    native = _native.Model(path, adapter="" if adapter is None else os.fspath(adapter),
                           quantization=_WEIGHTS.get(weights, "none"), double_quant=double_quant, threads=threads,
                           reference=reference_kernels, weights=weights if weights in _INFER_WEIGHTS else "f32",
                           kv_cache=kv_cache, llama_cpp_numerics=llama_cpp_numerics)
    tok = None
    if tok_path is not None:
        tok = Tokenizer(tok_path)
        tok._native.check_fits(native)
    elif tokenizer is None and path.endswith(".bin"):
        raise _native.Error(f"{path}: a llama2.c checkpoint needs tokenizer= (e.g. tok512.bin); none is beside it")
    return Model(native, tok)
