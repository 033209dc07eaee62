# `leantune plan` and the ledger end to end: a run over its memory budget stops before allocating
# and lists the changes that fit, and the first of them trains within that budget (measured peak
# RSS); the plan of a Llama-3-8B config.json alone (no weights) with LoRA r=16; the training
# report and `plan --html` rendered in headless Chromium, loading without errors and drawing their
# charts.
import json
import re
import shutil
import subprocess

import pytest

LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
             "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False}


def aesop_args(shared_dir, out):
    return ["--base_model", str(shared_dir / "models/stories260K/stories260K.bin"),
            "--tokenizer", str(shared_dir / "models/stories260K/tok512.bin"),
            "--datasets", str(shared_dir / "data/aesop_fables/aesop_fables.txt"),
            "--method", "lora", "--lora_target_modules", "all-linear", "--micro_batch_size", "16",
            "--sequence_len", "256", "--max_steps", "2", "--eval_batches", "1", "--threads", "1",
            "--output_dir", str(out)]


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if ok:
        assert p.returncode == 0, p.stderr + p.stdout
    return p


@pytest.fixture(scope="module")
def budget_run(leantune_bin, shared_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("budget")
    args = aesop_args(shared_dir, out)
    plan = json.loads(run([leantune_bin, "plan", *args, "--json"]).stdout)
    assert plan["predicted_peak_bytes"] == plan["arena_bytes"] + plan["data_bytes"] + plan["baseline_bytes"]
    budget = int(plan["predicted_peak_bytes"] * 0.8)
    over = run([leantune_bin, "train", *args, "--memory_budget", str(budget)], ok=False)
    assert over.returncode != 0
    assert "nothing was allocated" in over.stderr and "Changes that fit" in over.stderr, over.stderr
    assert not (out / "metrics.jsonl").exists()  # stopped before training
    first = re.search(r"^  (\S.*?)\s+predicted peak", over.stderr, re.M).group(1)
    change = []  # "key: value, key: value" -> --key value
    for part in first.split(", "):
        k, v = part.split(": ")
        change += ["--" + k, v.split(" ")[0]]
    res = run([leantune_bin, "train", *args, "--memory_budget", str(budget), *change])
    return dict(out=out, budget=budget, change=first, stdout=res.stdout,
                ledger=json.loads((out / "ledger.json").read_text()))


def test_first_fitting_change_runs_within_the_budget(budget_run):
    led = budget_run["ledger"]
    assert led["predicted_peak_bytes"] <= budget_run["budget"], budget_run["change"]
    assert led["peak_rss_bytes"] <= budget_run["budget"], (budget_run["change"], led["peak_rss_bytes"])
    # the ledger measured every planned arena byte resident, and the prediction held within 10%
    for cat, n in led["planned"].items():
        if cat != "data":
            assert led["max_resident"][cat] == n, cat
    assert abs(led["peak_rss_bytes"] - led["predicted_peak_bytes"]) / led["predicted_peak_bytes"] < 0.10
    phases = [s["phase"] for s in led["samples"]]
    assert phases[0] == "loaded" and phases[-1] == "optimizer" and phases.count("forward") == 5


def test_budget_below_the_weights_says_so(leantune_bin, shared_dir, tmp_path):
    p = run([leantune_bin, "plan", *aesop_args(shared_dir, tmp_path), "--memory_budget", "1 MB"], ok=False)
    assert p.returncode != 0 and "smaller than the model's weights alone" in p.stderr, p.stderr
    p = run([leantune_bin, "plan", *aesop_args(shared_dir, tmp_path), "--memory_budget", "6 parsecs"], ok=False)
    assert "unknown unit 'parsecs'" in p.stderr, p.stderr
    p = run([leantune_bin, "plan", *aesop_args(shared_dir, tmp_path), "--actuary", "--gpu", "V100"], ok=False)
    assert "unknown GPU profile 'V100'" in p.stderr and "H200 141GB" in p.stderr, p.stderr


def test_llama3_8b_plan_from_config_json_alone(leantune_bin, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    p = json.loads(run([leantune_bin, "plan", "--base_model", str(tmp_path), "--method", "lora", "--lora_r", "16",
                        "--lora_target_modules", "all-linear", "--micro_batch_size", "1", "--sequence_len", "512",
                        "--json"]).stdout)
    params, lora = 8030261248, 41943040  # hand counts, see tests/plan/test_ledger.cpp
    cats = p["categories"]
    assert cats["frozen_weights"] == 4 * params
    assert cats["trainable_params"] == cats["gradients"] == 4 * lora
    assert cats["optimizer_state"] == 8 * lora
    assert cats["activations"] == 4 * 512 * (32 * 43154 + 33 * 4096 + 4096 + 1)
    # h = silu(gate)·up and the normed inputs xn1, xn2, refilled before each layer's backward
    assert cats["recompute"] == 4 * 512 * (14336 + 2 * 4096)


def render(html_path, tmp_path):
    """Loads the page in headless Chromium with a probe script; returns what the probe saw."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "headless Chromium is needed: scripts/install-test-deps.sh installs Debian's chromium"
    page = html_path.read_text()
    probe = ("<script>window.__errors=[];window.addEventListener('error',e=>window.__errors.push(String(e.message)));"
             "</script>")
    check = ("<script>window.addEventListener('load',()=>{const svgs=[...document.querySelectorAll('svg')];"
             "const drawn=svgs.filter(s=>{const b=s.getBoundingClientRect();return b.width>0&&b.height>0&&"
             "s.querySelectorAll('polyline,rect').length>0;}).length;"
             "const marks=document.querySelectorAll('polyline,rect').length;"
             "document.body.insertAdjacentHTML('beforeend','<pre id=probe>'+JSON.stringify({svgs:svgs.length,"
             "drawn:drawn,marks:marks,errors:window.__errors})+'</pre>');});</script>")
    page = page.replace("<head>", "<head>" + probe, 1).replace("</body>", check + "</body>", 1)
    wrapped = tmp_path / ("probe-" + html_path.name)
    wrapped.write_text(page)
    p = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--virtual-time-budget=5000", "--dump-dom", wrapped.as_uri()],
                       capture_output=True, text=True, timeout=120)
    m = re.search(r"<pre id=\"probe\">(.*?)</pre>", p.stdout, re.S)
    assert m, p.stderr[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"'))


def test_training_report_renders_in_chromium(budget_run, tmp_path):
    html = (budget_run["out"] / "report.html").read_text()
    assert "memory by category" in html and "memory over the first step" in html
    r = render(budget_run["out"] / "report.html", tmp_path)
    assert r["errors"] == [], r
    assert r["svgs"] == 6 and r["drawn"] == 6, r  # loss, lr, throughput, RSS, categories, timeline


def test_plan_html_renders_in_chromium(leantune_bin, shared_dir, tmp_path):
    out = tmp_path / "plan.html"
    run([leantune_bin, "plan", *aesop_args(shared_dir, tmp_path / "o"), "--html", str(out)])
    r = render(out, tmp_path)
    assert r["errors"] == [] and r["svgs"] == 1 and r["drawn"] == 1 and r["marks"] >= 8, r
