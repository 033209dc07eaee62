# %% [markdown]
# # leantune from Python: a quickstart
#
# Run it from the repository root after `pip install .` (`python examples/quickstart.py`), or open
# it in Jupyter / VS Code, where each `# %%` is a cell. It uses the small files in ../shared
# (LEANTUNE_SHARED): stories260K, a 260K-parameter Llama trained on children's stories, and
# Aesop's fables, which it LoRA-tunes the model on in under a minute.

# %%
import os

import leantune

SHARED = os.environ.get("LEANTUNE_SHARED", "../shared")
OUT = os.environ.get("LEANTUNE_OUT", "out/quickstart")

# A llama2.c folder: the checkpoint and its tok*.bin tokenizer are found inside it. A Hugging Face
# folder (config.json + safetensors, tokenizer.json) loads the same way.
model = leantune.load(f"{SHARED}/models/stories260K")
print(model)
print(leantune.machine_info())

# %% [markdown]
# ## Generate: a string, or a stream of pieces

# %%
prompt = "One day a hungry Fox"
print(prompt + model.generate(prompt, max_tokens=60, temperature=0, repetition_penalty=1.2))

print(prompt, end="")
for piece in model.generate(prompt, max_tokens=60, temperature=0.8, top_p=0.95, seed=1, stream=True):
    print(piece, end="", flush=True)
print()

# %% [markdown]
# ## Tokens and logits (a numpy array over the engine's buffer: no copy)

# %%
ids = model.tokenizer.encode(prompt)
logits = model.logits(ids)
top = logits.argsort()[::-1][:5]
print(ids, "->", [(model.tokenizer.token_text(int(t)), round(float(logits[t]), 2)) for t in top])

# %% [markdown]
# ## Plan, then fine-tune with LoRA
#
# A config is a dict (or the path of a YAML file) with the keys of `leantune train`.
# `leantune.plan` says what the run will allocate before anything is loaded; `leantune.train`
# shows a progress bar (tqdm, when installed), calls `callback` with every metrics record, and
# stops cleanly on Ctrl-C between two steps (resume with `resume="auto"`).

# %%
config = {
    "base_model": f"{SHARED}/models/stories260K/stories260K.bin",
    "tokenizer": f"{SHARED}/models/stories260K/tok512.bin",
    "datasets": [{"path": f"{SHARED}/data/aesop_fables/aesop_fables.txt", "min_blank_lines": 2}],
    "val_set_size": 0.05,
    "method": "lora", "lora_r": 16, "lora_alpha": 32, "lora_target_modules": "all-linear",
    "micro_batch_size": 8, "sequence_len": 128, "learning_rate": 4e-3, "warmup_steps": 5,
    "max_steps": 40, "eval_steps": 20, "save_steps": 20,
    "output_dir": OUT, "overwrite_output_dir": True,
}
plan = leantune.plan(config)
print(plan["table"])
print(f"predicted peak: {plan['predicted_peak_bytes'] / 2**20:.1f} MiB")

# a tqdm bar when tqdm is installed (else the engine prints its own progress lines); pass
# callback=print to receive every metrics record instead
run = leantune.train(config)
print(f"held-out loss {run.first_eval_loss:.3f} -> {run.last_eval_loss:.3f}; {run.steps} steps")
print("adapter:", run.adapter)
print("report: ", run.report)

# %% [markdown]
# ## The same prompt with the adapter

# %%
tuned = leantune.load(f"{SHARED}/models/stories260K", adapter=run.adapter)
print(prompt + tuned.generate(prompt, max_tokens=60, temperature=0, repetition_penalty=1.2))

# %% [markdown]
# Errors carry the engine's message, naming what is wrong:

# %%
try:
    leantune.train({**config, "lora_rank": 8})
except leantune.Error as e:
    print("leantune.Error:", e)
