#!/usr/bin/env python3
"""Our training steps against the same steps in PyTorch + transformers on the
CPU (PEFT for LoRA): what a user who does not use llama.cpp would pick. Same
model shape, context, threads and optimizer, back to back per round on the
machine at hand.

    python3 tools/reference/torch_train_compare.py [--bench build/bench_train] \\
        [--rounds 3] [--steps 5] [--ctx 256] [--threads 2] [--method full,lora] \\
        [--lora-file Q.gguf] MODEL_F32.gguf

The PyTorch model is transformers' LlamaForCausalLM (or Qwen2ForCausalLM for a
qwen2 file) built from the GGUF's hyperparameters (layers, widths, heads, kv
heads, head_dim, vocabulary, RoPE base, norm epsilon, tied head when the file
has no output.weight), in float32, with random weights: a step's time does not
depend on the values. An lfm2 or mamba2 file (e.g. `retrograd make-tiny --shape
lfm2-350m` / `mamba2-130m`) is loaded with its weights: Lfm2ForCausalLM through
transformers' GGUF reader, Mamba2ForCausalLM through model_logits.py (transformers'
CPU path, torch_forward: its chunked scan in plain torch ops, as a user without the
CUDA kernels gets); LoRA there adapts what ours does by default (lfm2: q, k, v, o,
w1/w3/w2 and the short conv's in_proj/out_proj; mamba2: in_proj and out_proj). Each step is one sequence of CTX random token ids with
the next-token labels: forward with the loss, backward, AdamW step (lr 5e-5
full, 2e-4 LoRA; weight decay 0.01; betas 0.9/0.999), zero_grad.
torch.set_num_threads(THREADS). LoRA: PEFT's LoraConfig(r=16, lora_alpha=32,
dropout 0, the seven projections q, k, v, o, gate, up, down), the base frozen.
One warm-up step, then STEPS timed ones; the median step's tokens/s.

Ours: bench_train with RG_BENCH_TRAIN_MODEL (full: MODEL; LoRA: MODEL, the same
F32 base, and also --lora-file when given, e.g. the shipped Q4_1 file: LoRA on
a quantized base, which PyTorch has no counterpart for), the same context,
threads and step count, rank 16 / alpha 32 on the seven projections.

Per round and method, PyTorch then ours; then the median and the worst of the
per-round ratios (ours / PyTorch). PyTorch, transformers and PEFT are
reference-only dependencies: install them by hand for the comparison (CI never
does). A benchmark helper, not part of the product.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time


def gguf_config(path):
    """The transformers config of a llama/qwen2 GGUF (hyperparameters only)."""
    from gguf import GGUFReader
    r = GGUFReader(path)

    def val(key, default=None):
        f = r.fields.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        return v.tobytes().decode() if f.types and f.types[0].name == "STRING" else v.tolist()[0]

    arch = val("general.architecture")
    if arch not in ("llama", "qwen2", "lfm2", "mamba2"):
        sys.exit(f"{path}: architecture {arch!r}; this script builds llama, qwen2, lfm2 and mamba2")
    names = {t.name for t in r.tensors}
    n_vocab = next(t.shape for t in r.tensors if t.name == "token_embd.weight")[1]
    if arch in ("lfm2", "mamba2"):  # the hybrids are read from the file itself (their layer layout is in it)
        return dict(arch=arch, path=os.path.abspath(path), vocab_size=int(n_vocab),
                    hidden_size=val(f"{arch}.embedding_length"), num_hidden_layers=val(f"{arch}.block_count"),
                    tie_word_embeddings="output.weight" not in names)
    n_embd, n_head = val(f"{arch}.embedding_length"), val(f"{arch}.attention.head_count")
    cfg = dict(arch=arch, vocab_size=int(n_vocab), hidden_size=n_embd,
               intermediate_size=val(f"{arch}.feed_forward_length"), num_hidden_layers=val(f"{arch}.block_count"),
               num_attention_heads=n_head, num_key_value_heads=val(f"{arch}.attention.head_count_kv", n_head),
               head_dim=val(f"{arch}.attention.key_length", n_embd // n_head),
               rope_theta=val(f"{arch}.rope.freq_base", 10000.0),
               rms_norm_eps=val(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5),
               max_position_embeddings=val(f"{arch}.context_length", 2048),
               tie_word_embeddings="output.weight" not in names)
    return cfg


def torch_steps(cfg, method, ctx, threads, steps):
    import torch
    import transformers
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    kw = {k: v for k, v in cfg.items() if k != "arch"}
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    if cfg["arch"] == "lfm2":
        d, name = os.path.split(cfg["path"])
        model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
        # ours by default: q, k, v, o, gate, up, down and the short conv's in/out projections
        targets = ["q_proj", "k_proj", "v_proj", "out_proj", "w1", "w3", "w2", "in_proj"]
    elif cfg["arch"] == "mamba2":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from model_logits import mamba2_from_gguf
        model = mamba2_from_gguf(cfg["path"])
        targets = ["in_proj", "out_proj"]  # a mamba2 layer has no other matrix (PEFT refuses out_proj: see main)
    elif cfg["arch"] == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kw))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw))
    model.float().train()
    lr = 5e-5
    if method == "lora":
        import peft
        lc = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, bias="none", target_modules=targets)
        model = peft.get_peft_model(model, lc)
        lr = 2e-4
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg["vocab_size"], (1, ctx), generator=g)
    times = []
    for k in range(steps + 1):
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if k > 0:
            times.append(time.perf_counter() - t0)
    return [ctx / t for t in times], torch.__version__


def torch_run(worker, cfg, method, ctx, threads, steps):
    """One PyTorch measurement in a fresh process (as each of ours is): WORKER --worker JSON prints
    {"tok_s": [...], "torch": VERSION}."""
    job = json.dumps(dict(cfg=cfg, method=method, ctx=ctx, threads=threads, steps=steps))
    cmd = ([sys.executable, os.path.abspath(__file__)] if worker is None else [worker]) + ["--worker", job]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"the PyTorch run ({method}) failed:\n{r.stderr[-2000:]}")
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
        return out["tok_s"], out["torch"]
    except (ValueError, KeyError, IndexError):
        sys.exit(f"the PyTorch run ({method}) printed no result:\n{r.stdout[-1000:]}")


def ours(exe, model, method, ctx, threads, steps):
    env = dict(os.environ, RG_BENCH_TRAIN_MODEL=model, RG_BENCH_TRAIN_CTX=str(ctx), RG_BENCH_THREADS=str(threads),
               RG_BENCH_TRAIN_METHOD=method)
    out = subprocess.run([exe, str(steps)], check=True, capture_output=True, text=True, env=env).stdout
    m = re.search(r"^step seconds \((\d+) tokens each\):((?: [\d.]+)+)$", out, re.M)
    if not m:
        sys.exit(f"bench_train printed no step line:\n{out}")
    return [int(m.group(1)) / float(x) for x in m.group(2).split()]


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        job = json.loads(sys.argv[2])
        tok_s, version = torch_steps(job["cfg"], job["method"], job["ctx"], job["threads"], job["steps"])
        print(json.dumps({"tok_s": tok_s, "torch": version}))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench_train")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--method", default="full,lora")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)  # a stand-in for the PyTorch process (tests)
    ap.add_argument("--lora-file", help="also LoRA on this file (e.g. the shipped Q4_1), ours only against the same torch row")
    ap.add_argument("model")
    a = ap.parse_args()
    for path in [a.model] + ([a.lora_file] if a.lora_file else []):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing")
    methods = [m for m in a.method.split(",") if m]
    for m in methods:
        if m not in ("full", "lora"):
            sys.exit(f"--method {m!r}: full or lora")
    cfg = gguf_config(a.model)
    if cfg["arch"] == "mamba2" and "lora" in methods:
        # PEFT 0.21 refuses out_proj (and conv1d) as LoRA targets of Mamba-2 models (its fused CUDA
        # path reads those weights directly), so the two sides could not adapt the same matrices.
        sys.exit("--method lora on a mamba2 file: PEFT refuses LoRA on Mamba-2's out_proj, so PyTorch cannot do "
                 "the steps ours does (in_proj and out_proj); use --method full")
    rows = {}  # label -> list of (torch, ours)
    print(f"PyTorch vs bench_train: {os.path.basename(a.model)} shape ({cfg['num_hidden_layers']} layers, "
          f"{cfg['hidden_size']} wide, vocab {cfg['vocab_size']}, tied {cfg['tie_word_embeddings']}), context {a.ctx}, "
          f"{a.threads} threads, AdamW, {a.steps} timed steps after one warm-up, {a.rounds} rounds")
    print(f"{'round':>5} {'row':24} {'torch tok/s':>12} {'ours tok/s':>11} {'ratio':>6}")
    version = "?"
    for r in range(a.rounds):
        for method in methods:
            tt, version = torch_run(a.torch_worker, cfg, method, a.ctx, a.threads, a.steps)
            tm = statistics.median(tt)
            files = [(a.model, f"{method} f32")]
            if method == "lora" and a.lora_file:
                files.append((a.lora_file, f"lora {os.path.basename(a.lora_file)}"))
            for path, label in files:
                om = statistics.median(ours(a.bench, path, method, a.ctx, a.threads, a.steps))
                rows.setdefault(label, []).append((tm, om))
                print(f"{r + 1:>5} {label:24} {tm:12.1f} {om:11.1f} {om / tm:6.2f}", flush=True)
    print(f"median of the per-round ratios (ours / PyTorch {version}), and the worst round:")
    for label, v in rows.items():
        rs = [o / t for t, o in v]
        print(f"  {label:24} {statistics.median(rs):.2f} (worst {min(rs):.2f})")


if __name__ == "__main__":
    main()
