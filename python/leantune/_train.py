"""Training runs and plans: :func:`leantune.train`, :func:`leantune.plan`, :func:`leantune.plan_inference`.

A run's config is a YAML file (any ``leantune train`` config) or a dict of the same keys; keyword
arguments override single keys, as the CLI's ``--key value`` flags do. Relative paths in a config
are relative to the current directory, as for the CLI.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native

Config = Union[str, "os.PathLike[str]", Mapping[str, Any], None]


def _scalar(value: Any) -> Any:
    """A config value as JSON (which YAML reads): paths as strings, tuples as lists."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(k): _scalar(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scalar(v) for v in value]
    return value


def _flag_value(value: Any) -> str:
    v = _scalar(value)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)) or v is None:
        return json.dumps(v)
    return str(v)


def _config_source(config: Config, overrides: Mapping[str, Any]) -> Tuple[str, str, List[str]]:
    """(yaml_file, yaml_text, flags) as the engine's TrainerConfig takes them.

    A dict becomes YAML text, one ``key: <JSON value>`` line per key, so that the engine's messages
    name the key's line; its name in messages is ``<config dict>``.
    """
    if config is None or isinstance(config, (str, os.PathLike)):
        flags = [f"--{k}={_flag_value(v)}" for k, v in overrides.items()]
        return ("" if config is None else os.fspath(config)), "", flags
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a dict or the path of a YAML file, got {type(config).__name__}")
    merged = {**config, **overrides}
    for k in merged:
        if not isinstance(k, str):
            raise TypeError(f"config: keys are strings (got {k!r})")
    lines = [f"{k}: {json.dumps(_scalar(v), allow_nan=False)}" for k, v in merged.items() if v is not None]
    return "<config dict>", "\n".join(lines) + "\n", []


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns: the run's output paths and its final metrics."""

    output_dir: str
    adapter: Optional[str]        # the PEFT adapter folder (LoRA)
    model: Optional[str]          # the full model folder (full fine-tuning)
    report: Optional[str]         # report.html: loss, learning rate, throughput and memory charts
    metrics_file: Optional[str]   # metrics.jsonl: every record, as the callback received them
    ledger: Optional[str]         # ledger.json: the planned against the measured memory
    checkpoint: Optional[str]     # the last checkpoint (output_dir/LATEST); resume with resume="auto"
    steps: int
    losses: List[float]           # training loss per optimizer step
    eval_losses: List[float]      # every evaluation's held-out loss, in order
    first_eval_loss: float
    last_eval_loss: float
    metrics: Dict[str, Any]       # the final values: step, loss, lr, grad_norm, tokens_per_s, eval_loss, eval_ppl
    records: List[Dict[str, Any]] = dataclasses.field(default_factory=list)  # this call's metrics records


def _latest_checkpoint(output_dir: str) -> Optional[str]:
    try:
        with open(os.path.join(output_dir, "LATEST"), encoding="utf-8") as f:
            name = f.read().strip()
    except OSError:
        return None
    return os.path.join(output_dir, name) if name else None


def _existing(path: str) -> Optional[str]:
    return path if os.path.exists(path) else None


def _wants_bar(use: Optional[bool], callback: Optional[Callable[..., Any]]) -> bool:
    """A tqdm bar when asked for, or by default when tqdm is installed and there is no callback."""
    if use is False or (use is None and callback is not None):
        return False
    try:
        import tqdm  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        if use:
            raise ImportError("leantune.train(progress=True) needs tqdm: pip install tqdm") from None
        return False
    return True


def _progress_bar(total: int) -> Any:
    from tqdm.auto import tqdm  # a widget in Jupyter, text elsewhere
    return tqdm(total=total, unit="step", desc="train", dynamic_ncols=True)


class _Watch:
    """The engine's callbacks: metrics records to the user's callback, progress to the bar."""

    def __init__(self, callback: Optional[Callable[[Dict[str, Any]], Any]], bar: Any) -> None:
        self.callback, self.bar = callback, bar
        self.records: List[Dict[str, Any]] = []
        self.final: Dict[str, Any] = {}

    def on_metrics(self, text: str) -> None:
        record = json.loads(text)
        self.records.append(record)
        self.final.update(record)
        if self.bar is not None and "eval_loss" in record:
            self.bar.set_postfix(eval_loss=f"{record['eval_loss']:.4f}", refresh=False)
        if self.callback is not None:
            self.callback(record)

    def on_progress(self, p: Dict[str, Any]) -> None:
        bar = self.bar
        if bar.total != p["total_steps"]:
            bar.total = p["total_steps"]
        bar.set_postfix(loss=f"{p['loss']:.4f}", lr=f"{p['lr']:.2e}", refresh=False)
        bar.update(p["step"] - bar.n)


def train(config: Config = None, *, callback: Optional[Callable[[Dict[str, Any]], Any]] = None,
          progress: Optional[bool] = None, verbose: Optional[bool] = None, resume: Optional[str] = None,
          **overrides: Any) -> TrainResult:
    """Runs a fine-tuning (``leantune train``) and returns its outputs and final metrics.

    ``config``: the path of a YAML config or a dict of its keys (``base_model``, ``datasets``,
    ``method``, ``lora_r``, ``max_steps``, ``output_dir``, ...); keyword arguments override keys,
    e.g. ``train("run.yaml", max_steps=20)``.
    ``callback``: called with each metrics record (a dict, as written to metrics.jsonl: ``step``,
    ``loss``, ``lr``, ``grad_norm``, ``tokens_per_s``, ... or ``eval_loss``, ``eval_ppl``).
    ``progress``: a tqdm bar (a widget in Jupyter); by default when tqdm is installed and there is no
    callback. ``verbose``: the engine prints the memory plan, its progress lines and the summaries
    (by default when neither a callback nor a bar reports the run). ``resume``: a checkpoint folder,
    or ``"auto"`` for output_dir/LATEST.

    The GIL is released while the engine computes. Ctrl-C (KeyboardInterrupt) ends the run between
    two steps: every checkpoint already published stays whole, and ``resume="auto"`` continues
    from the last one. Raises :class:`leantune.Error` naming the key, file or value that is wrong.
    """
    use_bar = _wants_bar(progress, callback)
    if verbose is None:
        verbose = callback is None and not use_bar
    yaml_file, yaml_text, flags = _config_source(config, overrides)
    sys.stdout.flush()
    trainer, bar = None, None
    try:
        trainer = _native.Trainer(yaml_file, yaml_text, flags, verbose)
        bar = _progress_bar(trainer.total_steps) if use_bar else None
        watch = _Watch(callback, bar)
        trainer.set_callbacks(watch.on_metrics, watch.on_progress if bar is not None else None)
        if resume is not None:
            trainer.resume(resume)
        while not trainer.done:
            trainer.step()
        summary = trainer.finish()
    except KeyboardInterrupt as e:
        if trainer is not None:
            _note_interrupt(e, trainer.output_dir, trainer.steps_taken)
        raise
    finally:
        _native.flush_stdout()
        if trainer is not None:
            trainer.set_callbacks(None, None)
        if bar is not None:
            bar.close()
    return _result(summary, watch)


def _note_interrupt(e: BaseException, output_dir: str, steps: int) -> None:
    ckpt = _latest_checkpoint(output_dir)
    where = f"the last checkpoint is {ckpt}" if ckpt else "no checkpoint was saved yet"
    note = (f"leantune: training interrupted after step {steps}; {where} "
            f"(continue with leantune.train(..., resume='auto'))")
    if hasattr(e, "add_note"):
        e.add_note(note)
    else:
        print(note, file=sys.stderr)


def _result(summary: Dict[str, Any], watch: _Watch) -> TrainResult:
    out = summary["output_dir"]
    metrics = dict(watch.final)
    if summary["losses"]:
        metrics["loss"] = summary["losses"][-1]
    if summary["eval_losses"]:
        metrics["eval_loss"] = summary["last_eval_loss"]
        metrics["eval_ppl"] = math.exp(summary["last_eval_loss"])
    metrics["step"] = summary["steps"]
    return TrainResult(
        output_dir=out, adapter=_existing(os.path.join(out, "adapter")), model=_existing(os.path.join(out, "model")),
        report=_existing(os.path.join(out, "report.html")), metrics_file=_existing(os.path.join(out, "metrics.jsonl")),
        ledger=_existing(os.path.join(out, "ledger.json")), checkpoint=_latest_checkpoint(out), steps=summary["steps"],
        losses=list(summary["losses"]), eval_losses=list(summary["eval_losses"]),
        first_eval_loss=summary["first_eval_loss"], last_eval_loss=summary["last_eval_loss"], metrics=metrics,
        records=watch.records)


def plan(config: Config = None, *, cost: bool = False, tokens: float = 0, price_per_hour: float = 0,
         gpus: Sequence[str] = (), rank_report: bool = False, zero_ranks: int = 0, measure_baseline: bool = True,
         html: Optional[str] = None, **overrides: Any) -> Dict[str, Any]:
    """The memory plan of the run ``train(config, **overrides)`` would start (``leantune plan``).

    Reads the model's config only (a folder with only config.json is enough), and the tokenizer
    and datasets when given. Returns a dict: the run as it would start (``base_model``, ``method``,
    ``lora_r``, ``micro_batch_size``, ``sequence_len``, ...), ``categories`` (bytes per buffer
    category), ``buffers`` (name, category, bytes, lifetime of each), ``arena_bytes``,
    ``data_bytes``, ``baseline_bytes``, ``predicted_peak_bytes``, ``peak_phase`` and ``table`` (the
    table ``leantune plan`` prints); with ``cost`` an estimate of FLOPs, time and money on this
    machine and on ``gpus`` (``cost``), with ``rank_report`` the LoRA rank table, with
    ``zero_ranks`` one rank's share under ZeRO (``zero_text``). ``html``: also write the plan's page
    there. With ``memory_budget`` in the config, a run that does not fit raises :class:`leantune.Error`
    listing the changes that fit.
    """
    yaml_file, yaml_text, flags = _config_source(config, overrides)
    d = _native.plan(yaml_file, yaml_text, flags, cost_estimate=cost, tokens=float(tokens),
                     price_per_hour=float(price_per_hour), gpus=list(gpus), rank_report=rank_report,
                     zero_ranks=zero_ranks, measure_baseline=measure_baseline,
                     html="" if html is None else os.fspath(html))
    result = json.loads(d.pop("json"))
    result.update(d)
    return result


def plan_inference(model: Union[str, "os.PathLike[str]"], *, context: int = 0, prefill_block: int = 0,
                   weights: str = "f32", measure_baseline: bool = True) -> Dict[str, Any]:
    """The memory plan of :func:`leantune.load` and one generation (``leantune plan --generate``).

    Returns ``categories``, ``context``, ``prefill_block``, ``arena_bytes``, ``baseline_bytes``,
    ``predicted_peak_bytes`` and ``table``. No weights are read.
    """
    from ._model import _WEIGHTS  # the one table of weights= names
    if weights not in _WEIGHTS:
        raise _native.Error(f"weights={weights!r}: expected one of {', '.join(sorted(_WEIGHTS))}")
    d = _native.plan_inference(os.fspath(model), context=context, prefill_block=prefill_block,
                               quantization=_WEIGHTS[weights], measure_baseline=measure_baseline)
    result = json.loads(d.pop("json"))
    result.update(d)
    return result
