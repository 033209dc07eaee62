"""leantune: fine-tune and run Llama-family language models on the CPU, from Python.

The package wraps leantune's C++ engine (the same library as the ``leantune`` command)::

    import leantune
    model = leantune.load("models/SmolLM2-135M")                 # HF folder, .safetensors or llama2.c .bin
    print(model.generate("The capital of France is", max_tokens=20, temperature=0))
    for piece in model.generate("Once upon a time", stream=True):
        print(piece, end="", flush=True)
    logits = model.logits(model.tokenizer.encode("Hello"))      # numpy float32, no copy

    run = leantune.train("examples/aesop_lora.yaml", max_steps=20,
                         callback=lambda record: print(record))  # or a dict config
    print(run.adapter, run.report, run.metrics)
    print(leantune.plan({"base_model": "models/SmolLM2-135M", "method": "lora"})["predicted_peak_bytes"])
    leantune.merge("models/SmolLM2-135M", run.adapter, "out/merged")

Every engine error is raised as :class:`leantune.Error` (a ``RuntimeError``) with the engine's
message, which names the file, key, tensor or value that is wrong. Computation runs with the GIL
released.
"""
from ._native import Error
from ._files import export_gguf, machine_info, merge, quantize
from ._model import Model, TextStream, Tokenizer, load
from ._train import TrainResult, plan, plan_inference, train

__version__ = "0.1.0"

__all__ = [
    "Error", "Model", "TextStream", "Tokenizer", "TrainResult", "export_gguf", "load", "machine_info", "merge",
    "plan", "plan_inference", "quantize", "train",
]
