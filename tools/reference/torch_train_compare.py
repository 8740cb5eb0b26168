#!/usr/bin/env python3
"""Our training steps against the same steps in PyTorch + transformers on the
CPU (PEFT for LoRA): what a user who does not use llama.cpp would pick. Same
model shape, context, threads and optimizer, back to back per round on the
machine at hand.

    python3 tools/reference/torch_train_compare.py [--bench build/bench_train] \\
        [--rounds 3] [--steps 5] [--ctx 256] [--threads 2] [--method full,lora] \\
        [--dtype f32,autocast,bf16] [--ours PATH[@COMPUTE] ...] [--lora-file Q.gguf] MODEL.gguf
    python3 tools/reference/torch_train_compare.py --shape 1b [--retrograd build/retrograd] \\
        [--shape-dir DIR] [--dtype f32,autocast,bf16] [--method lora] ...

--dtype picks PyTorch's ways of running the same model (a comma list runs each, every one in a
fresh process, per round):
  f32       the model in float32 (the default; what this script always measured);
  autocast  the float32 model, the forward and the loss under
            torch.autocast("cpu", dtype=torch.bfloat16) (mixed precision: F32 master weights and
            optimizer state, BF16 products; the backward outside the context, as PyTorch says);
  bf16      the model cast to bfloat16 (model.to(torch.bfloat16)): weights, activations and the
            optimizer state of full fine-tuning in BF16 (oneDNN's BF16 kernels, on AMX where the
            CPU has it). PEFT keeps LoRA adapters in float32 on a BF16 base (its default
            autocast_adapter_dtype), and so does this script's own LoRA.

The PyTorch model is transformers' LlamaForCausalLM (or Qwen2ForCausalLM for a
qwen2 file) built from the GGUF's hyperparameters (layers, widths, heads, kv
heads, head_dim, vocabulary, RoPE base, norm epsilon, tied head when the file
has no output.weight), with random weights: a step's time does not depend on
the values (so MODEL may be of any type; only its hyperparameters are read). An lfm2 or mamba2 file (e.g. `retrograd make-tiny --shape
lfm2-350m` / `mamba2-130m`) is loaded with its weights: Lfm2ForCausalLM through
transformers' GGUF reader, Mamba2ForCausalLM through model_logits.py (transformers'
CPU path, torch_forward: its chunked scan in plain torch ops, as a user without the
CUDA kernels gets); LoRA there adapts what ours does by default (lfm2: q, k, v, o,
w1/w3/w2 and the short conv's in_proj/out_proj; mamba2: in_proj and out_proj). Each step is one sequence of CTX random token ids with
the next-token labels: forward with the loss, backward, AdamW step (lr 5e-5
full, 2e-4 LoRA; weight decay 0.01; betas 0.9/0.999), zero_grad.
torch.set_num_threads(THREADS). LoRA: PEFT's LoraConfig(r=16, lora_alpha=32,
dropout 0, the seven projections q, k, v, o, gate, up, down), the base frozen;
where PEFT is not installed, the same adapters by this script's own LoraLinear
(A [16, in] Kaiming-uniform, B [out, 16] zero, scale 32/16, the input cast to the
adapter's float32 and the result back, as PEFT does). The LoRA line says which.
One warm-up step, then STEPS timed ones; the median step's tokens/s.

Ours: bench_train with RG_BENCH_TRAIN_MODEL, the same context, threads and step
count, rank 16 / alpha 32 on the seven projections. By default ours trains MODEL
(full and LoRA) and also --lora-file for LoRA (e.g. the shipped Q4_1 file: LoRA on
a quantized base, which PyTorch has no counterpart for). --ours PATH[@COMPUTE]
(repeatable) names ours' files instead, each with training.compute_dtype
(auto, f32 or bf16; RG_BENCH_TRAIN_COMPUTE): e.g. the BF16 file @bf16, the
Q4_K_M file @bf16 and the F32 file @bf16 (issue 25's mixed precision) beside
PyTorch's three. A row ours cannot run (compute_dtype=bf16 on a CPU without a
matrix unit) prints bench_train's refusal and the script goes on.

--shape 1b (or smollm2, tiny): the files are made first, into --shape-dir
(default /tmp/rg_torch_compare; kept for later runs) by `retrograd make-tiny
--arch llama --shape SHAPE --type f32|bf16` and `retrograd quantize BF16 OUT
Q4_K_M`, and without --ours the rows are issue 25's: LoRA on the BF16 file @auto,
the Q4_K_M file @bf16, the F32 file @bf16 and @f32; full fine-tuning of the BF16
file @auto and the F32 file @bf16 and @f32. A 1B-shaped F32 file is about 5 GB
(BF16 2.5 GB).

Per round, method and PyTorch dtype, PyTorch then ours; then the median and the
worst of the per-round ratios (ours / PyTorch) for every pair. PyTorch,
transformers and PEFT are reference-only dependencies: install them by hand for
the comparison (CI never does). A benchmark helper, not part of the product.
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


DTYPES = ("f32", "autocast", "bf16")
COMPUTES = ("auto", "f32", "bf16")
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def own_lora(model, targets, r=16, alpha=32):
    """LoRA without PEFT: every nn.Linear whose name ends in one of targets gets a float32
    adapter (A [r, in] Kaiming-uniform as PEFT's default, B [out, r] zero, scale alpha / r); the
    whole base is frozen. The input is cast to the adapter's dtype and the result back to the
    base's, as PEFT does on a BF16 base."""
    import math
    import torch

    class LoraLinear(torch.nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            self.lora_A = torch.nn.Parameter(torch.empty(r, base.in_features, dtype=torch.float32))
            self.lora_B = torch.nn.Parameter(torch.zeros(base.out_features, r, dtype=torch.float32))
            torch.nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            self.scale = alpha / r

        def forward(self, x):
            y = self.base(x)
            d = torch.nn.functional.linear(torch.nn.functional.linear(x.to(self.lora_A.dtype), self.lora_A), self.lora_B)
            return y + (d * self.scale).to(y.dtype)

    for p in model.parameters():
        p.requires_grad_(False)
    swaps = [(name, mod) for name, mod in model.named_modules()
             if isinstance(mod, torch.nn.Linear) and name.split(".")[-1] in targets]
    for name, mod in swaps:
        parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        setattr(parent, name.rsplit(".", 1)[-1], LoraLinear(mod))
    if not swaps:
        sys.exit(f"own LoRA: no nn.Linear named {targets} in the model")
    return model


def torch_steps(cfg, method, dtype, ctx, threads, steps):
    import contextlib
    import torch
    import transformers
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    kw = {k: v for k, v in cfg.items() if k not in ("arch", "path")}
    targets = list(LORA_TARGETS)
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
    model = model.to(torch.bfloat16) if dtype == "bf16" else model.float()
    model.train()
    lr = 5e-5
    lora_impl = "-"
    if method == "lora":
        try:
            import peft
        except ImportError:
            peft = None
        if peft is not None:
            lc = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, bias="none", target_modules=targets)
            model = peft.get_peft_model(model, lc)  # autocast_adapter_dtype: F32 adapters on a BF16 base
            lora_impl = f"peft {peft.__version__}"
        else:
            model = own_lora(model, targets)
            lora_impl = "own LoraLinear (PEFT not installed)"
        lr = 2e-4
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg["vocab_size"], (1, ctx), generator=g)
    times = []
    for k in range(steps + 1):
        t0 = time.perf_counter()
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "autocast" else contextlib.nullcontext()
        with amp:
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if k > 0:
            times.append(time.perf_counter() - t0)
    return [ctx / t for t in times], torch.__version__, lora_impl


def torch_run(worker, cfg, method, dtype, ctx, threads, steps):
    """One PyTorch measurement in a fresh process (as each of ours is): WORKER --worker JSON prints
    {"tok_s": [...], "torch": VERSION, "lora": IMPL}."""
    job = json.dumps(dict(cfg=cfg, method=method, dtype=dtype, ctx=ctx, threads=threads, steps=steps))
    cmd = ([sys.executable, os.path.abspath(__file__)] if worker is None else [worker]) + ["--worker", job]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"the PyTorch run ({method}, {dtype}) failed:\n{r.stderr[-2000:]}")
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
        return out["tok_s"], out["torch"], out.get("lora", "-")
    except (ValueError, KeyError, IndexError):
        sys.exit(f"the PyTorch run ({method}, {dtype}) printed no result:\n{r.stdout[-1000:]}")


def ours(exe, model, method, compute, ctx, threads, steps):
    """bench_train's one-file row: the step tokens/s, or None with the reason when it refuses (e.g.
    compute_dtype=bf16 on a CPU without a matrix unit)."""
    env = dict(os.environ, RG_BENCH_TRAIN_MODEL=model, RG_BENCH_TRAIN_CTX=str(ctx), RG_BENCH_THREADS=str(threads),
               RG_BENCH_TRAIN_METHOD=method, RG_BENCH_TRAIN_COMPUTE=compute)
    r = subprocess.run([exe, str(steps)], capture_output=True, text=True, env=env)
    m = re.search(r"^step seconds \((\d+) tokens each\):((?: [\d.]+)+)$", r.stdout, re.M)
    if not m:
        why = [re.sub(r"^.*?\s{2,}", "", ln.strip()) for ln in r.stdout.splitlines() if "failed" in ln or "needs" in ln]
        if r.returncode != 0 and why:
            return None, why[-1]
        sys.exit(f"bench_train printed no step line:\n{r.stdout}{r.stderr}")
    return [int(m.group(1)) / float(x) for x in m.group(2).split()], ""


def shape_files(retrograd, shape, d):
    """make-tiny's F32 and BF16 files of the shape and the BF16 one quantized to Q4_K_M, in d (kept)."""
    os.makedirs(d, exist_ok=True)
    files = {}
    for typ in ("f32", "bf16"):
        path = os.path.join(d, f"{shape}-{typ}.gguf")
        if not os.path.exists(path):
            subprocess.run([retrograd, "make-tiny", "--arch", "llama", "--shape", shape, "--type", typ, "-o", path],
                           check=True)
        files[typ] = path
    q = os.path.join(d, f"{shape}-q4_k_m.gguf")
    if not os.path.exists(q):
        subprocess.run([retrograd, "quantize", "--quiet", files["bf16"], q, "Q4_K_M"], check=True)
    files["q4_k_m"] = q
    return files


def parse_ours(spec):
    path, _, compute = spec.partition("@")
    compute = compute or "auto"
    if compute not in COMPUTES:
        sys.exit(f"--ours {spec!r}: compute dtype {compute!r} is not one of {', '.join(COMPUTES)}")
    return path, compute


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        job = json.loads(sys.argv[2])
        tok_s, version, lora = torch_steps(job["cfg"], job["method"], job.get("dtype", "f32"), job["ctx"],
                                           job["threads"], job["steps"])
        print(json.dumps({"tok_s": tok_s, "torch": version, "lora": lora}))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench_train")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--method", default="full,lora")
    ap.add_argument("--dtype", default="f32", help="PyTorch's ways, a comma list of f32, autocast, bf16")
    ap.add_argument("--ours", action="append", default=[], metavar="PATH[@COMPUTE]",
                    help="ours trains this file with training.compute_dtype COMPUTE (auto, f32, bf16); repeatable")
    ap.add_argument("--shape", help="make the files of this make-tiny shape (1b, smollm2, tiny) and run issue 25's rows")
    ap.add_argument("--shape-dir", default="/tmp/rg_torch_compare")
    ap.add_argument("--retrograd", default="build/retrograd")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)  # a stand-in for the PyTorch process (tests)
    ap.add_argument("--lora-file", help="also LoRA on this file (e.g. the shipped Q4_1), ours only against the same torch row")
    ap.add_argument("model", nargs="?")
    a = ap.parse_args()
    dtypes = [d for d in a.dtype.split(",") if d]
    for d in dtypes:
        if d not in DTYPES:
            sys.exit(f"--dtype {d!r}: one of {', '.join(DTYPES)}")
    methods = [m for m in a.method.split(",") if m]
    for m in methods:
        if m not in ("full", "lora"):
            sys.exit(f"--method {m!r}: full or lora")
    # ours: method -> [(path, compute)]
    ours_rows = {}
    if a.shape:
        f = shape_files(a.retrograd, a.shape, a.shape_dir)
        a.model = a.model or f["f32"]
        ours_rows = {"lora": [(f["bf16"], "auto"), (f["q4_k_m"], "bf16"), (f["f32"], "bf16"), (f["f32"], "f32")],
                     "full": [(f["bf16"], "auto"), (f["f32"], "bf16"), (f["f32"], "f32")]}
    if not a.model:
        sys.exit("MODEL.gguf (or --shape) is needed")
    if a.ours:
        rows_given = [parse_ours(o) for o in a.ours]
        ours_rows = {m: rows_given for m in methods}
    elif not ours_rows:
        ours_rows = {"full": [(a.model, "auto")], "lora": [(a.model, "auto")] + ([(a.lora_file, "auto")] if a.lora_file else [])}
    for path in [a.model] + [p for v in ours_rows.values() for p, _ in v]:
        if not os.path.exists(path):
            sys.exit(f"{path} is missing")
    cfg = gguf_config(a.model)
    if cfg["arch"] == "mamba2" and "lora" in methods:
        # PEFT 0.21 refuses out_proj (and conv1d) as LoRA targets of Mamba-2 models (its fused CUDA
        # path reads those weights directly), so the two sides could not adapt the same matrices.
        sys.exit("--method lora on a mamba2 file: PEFT refuses LoRA on Mamba-2's out_proj, so PyTorch cannot do "
                 "the steps ours does (in_proj and out_proj); use --method full")
    rows = {}  # (method, torch dtype, ours label) -> list of (torch, ours)
    print(f"PyTorch vs bench_train: {os.path.basename(a.model)} shape ({cfg['num_hidden_layers']} layers, "
          f"{cfg['hidden_size']} wide, vocab {cfg['vocab_size']}, tied {cfg['tie_word_embeddings']}), context {a.ctx}, "
          f"{a.threads} threads, AdamW, {a.steps} timed steps after one warm-up, {a.rounds} rounds; PyTorch "
          f"{', '.join(dtypes)}")
    print(f"{'round':>5} {'method':6} {'torch':8} {'torch tok/s':>12} {'ours':34} {'ours tok/s':>11} {'ratio':>6}")
    version, lora_impl, refused = "?", "-", {}
    for r in range(a.rounds):
        for method in methods:
            for dtype in dtypes:
                tt, version, impl = torch_run(a.torch_worker, cfg, method, dtype, a.ctx, a.threads, a.steps)
                if method == "lora":
                    lora_impl = impl
                tm = statistics.median(tt)
                for path, compute in ours_rows.get(method, []):
                    label = f"{os.path.basename(path)} @{compute}"
                    key = (method, dtype, label)
                    if (method, label) in refused:
                        continue
                    ot, why = ours(a.bench, path, method, compute, a.ctx, a.threads, a.steps)
                    if ot is None:
                        refused[(method, label)] = why
                        print(f"{r + 1:>5} {method:6} {dtype:8} {tm:12.1f} {label:34} refused: {why}", flush=True)
                        continue
                    om = statistics.median(ot)
                    rows.setdefault(key, []).append((tm, om))
                    print(f"{r + 1:>5} {method:6} {dtype:8} {tm:12.1f} {label:34} {om:11.1f} {om / tm:6.2f}", flush=True)
    print(f"median of the per-round ratios (ours / PyTorch {version}; LoRA by {lora_impl}), and the worst round:")
    for (method, dtype, label), v in rows.items():
        rs = [o / t for t, o in v]
        print(f"  {method:6} torch {dtype:8} ours {label:34} {statistics.median(rs):.2f} (worst {min(rs):.2f})")
    for (method, label), why in refused.items():
        print(f"  {method:6} ours {label:34} not run: {why}")


if __name__ == "__main__":
    main()
