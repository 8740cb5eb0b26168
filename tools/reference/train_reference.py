#!/usr/bin/env python3
"""Training references from PyTorch + transformers (an implementation nobody here wrote).

    python3 tools/reference/train_reference.py BUILD_DIR OUT_DIR [--arch A] [--f64-check]

--arch qwen2 (the default) writes OUT_DIR/train-grads.ref, train-adamw.ref and train-sgd.ref;
--arch lfm2, mamba2, gemma2 or gemma3 writes OUT_DIR/train-grads-ARCH.ref and train-adamw-ARCH.ref;
--arch llama or qwen3 writes OUT_DIR/train-grads-ARCH.ref (grads only).
lfm2 loads through transformers' GGUF mapping; mamba2 is model_logits.py's Mamba2ForCausalLM
made from the file (transformers has no mamba2 GGUF mapping), with A_log frozen: the file
stores A = -exp(A_log) and our full fine-tune keeps it, so neither side trains it. gemma2 and gemma3
are model_logits.py's gemma_from_gguf (eager attention; transformers' GGUF mapping reads neither the
caps nor query_pre_attn_scalar): HF's norm weights are w where the file stores 1 + w, so the
comparison adds 1 back and the final weights are written + 1 (the file's values); gradients and
deltas are the same on both sides. Text; the format is described byte by byte in tools/reference/README.md,
"Training fixtures".

The model is `retrograd make-tiny --arch A --type f32` (default seed 42), loaded by
transformers directly from the GGUF file; the script checks that every transformers
parameter equals its GGUF tensor bit for bit (flat index order agrees: an HF weight
[out, in] row-major is the GGUF tensor ne=[in, out]). llama's attn_q / attn_k rows are
stored permuted for NORMAL rope (llama.cpp's converter) and transformers undoes that on
load; the script applies the converter's permutation to those weights before comparing,
and to their gradients before writing, so every fixture is in GGUF order.

  grads : loss and every parameter's gradient (norm, max |g|, 65 samples) on batch 0.
  adamw : 10 steps of torch.optim.AdamW (decay on 2-D tensors only: the matrices; HF's conv
          kernels are 3-D and its norms, biases and D 1-D, as our RG_T_F32 rows are undecayed), clip_grad_norm_(1.0),
          get_cosine_schedule_with_warmup(3, 10); per step loss, pre-clip norm, lr; at the
          end per parameter ||final - initial|| and 65 sampled final values.
  sgd   : the same with torch.optim.SGD(lr=0.05), no clipping, constant lr.

Loss: sum over targets != -100 of cross-entropy(logits[b, i], labels[b, i]), divided by the
number of such targets in the whole batch (training.md section 5.8), computed here from the
logits (HF's internal label shifting is not used). Everything in float32 on the CPU, one
thread, deterministic algorithms, model in train mode (its dropout is 0).
--f64-check repeats every run in float64 and prints how far the float32 reference is from it.
Needs: torch, transformers, gguf, numpy (tools only; not in CI).
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup

SEED_WEIGHTS = 42  # make-tiny's default seed, written into the fixtures
B, T, VOCAB = 2, 64, 512
IGNORE = -100
IGNORED_SPAN = (1, 0, 8)  # sequence 1, positions [0, 8) additionally ignored
DATA_SEED = 1234
N_STEPS = 10
N_SAMPLES = 64
GOLDEN = 2654435761

ADAMW = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, max_grad_norm=1.0,
             warmup_steps=3, total_steps=N_STEPS)
SGD = dict(lr=0.05, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=0, max_grad_norm=0.0,
           warmup_steps=0, total_steps=N_STEPS)


def fnv1a64(path):
    h = 0xCBF29CE484222325
    with open(path, "rb") as f:
        data = f.read()
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


MAMBA2_NAMES = {  # Mamba2ForCausalLM's mixer modules -> GGUF (architectures.md 3.2)
    "norm": "attn_norm", "mixer.in_proj": "ssm_in", "mixer.conv1d": "ssm_conv1d", "mixer.norm": "ssm_norm",
    "mixer.out_proj": "ssm_out",
}
MAMBA2_BARE = {"mixer.dt_bias": "ssm_dt.bias", "mixer.D": "ssm_d", "mixer.A_log": "ssm_a"}


GEMMA_ARCHS = ("gemma2", "gemma3")


def norm_shift(arch, name):
    """What the GGUF value of a tensor adds to transformers': 1 for Gemma's norms (stored as 1 + w)."""
    return 1.0 if arch in GEMMA_ARCHS and name.endswith("norm.weight") else 0.0


def gguf_name(hf, arch=None):
    """transformers parameter name -> GGUF tensor name."""
    if hf in ("model.embed_tokens.weight", "backbone.embeddings.weight"):
        return "token_embd.weight"
    if hf == "model.norm.weight" or hf == "backbone.norm_f.weight":
        return "output_norm.weight"
    if hf == "model.embedding_norm.weight":  # lfm2's final norm (architectures.md 2.3)
        return "token_embd_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    if hf.startswith("backbone.layers."):
        parts = hf.split(".")
        n, rest = parts[2], ".".join(parts[3:])
        if rest in MAMBA2_BARE:
            return f"blk.{n}.{MAMBA2_BARE[rest]}"
        module, kind = rest.rsplit(".", 1)
        if module not in MAMBA2_NAMES:
            raise ValueError(f"unmapped parameter {hf}")
        return f"blk.{n}.{MAMBA2_NAMES[module]}.{kind}"
    parts = hf.split(".")  # model.layers.N.<module>.<sub>.<weight|bias> or model.layers.N.<norm>.weight
    if parts[:2] != ["model", "layers"]:
        raise ValueError(f"unmapped parameter {hf}")
    n, rest = parts[2], ".".join(parts[3:])
    if arch in GEMMA_ARCHS:
        from model_logits import GEMMA_LAYER
        module, kind = rest.rsplit(".", 1)
        if module not in GEMMA_LAYER:
            raise ValueError(f"unmapped parameter {hf}")
        return f"blk.{n}.{GEMMA_LAYER[module]}.{kind}"
    table = {
        "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm", "self_attn.q_norm": "attn_q_norm",
        "self_attn.k_norm": "attn_k_norm",
        # lfm2
        "self_attn.out_proj": "attn_output", "self_attn.q_layernorm": "attn_q_norm",
        "self_attn.k_layernorm": "attn_k_norm", "operator_norm": "attn_norm", "ffn_norm": "ffn_norm",
        "feed_forward.w1": "ffn_gate",
        "feed_forward.w3": "ffn_up", "feed_forward.w2": "ffn_down", "conv.in_proj": "shortconv.in_proj",
        "conv.conv": "shortconv.conv", "conv.out_proj": "shortconv.out_proj",
    }
    module, kind = rest.rsplit(".", 1)
    if module not in table:
        raise ValueError(f"unmapped parameter {hf}")
    return f"blk.{n}.{table[module]}.{kind}"


def gguf_rows(arch, config, name, flat):
    """A transformers tensor (flat, row-major [out, in]) in the GGUF file's flat order.

    Only llama's attn_q / attn_k differ: llama.cpp's converter stores row (h, half, j) of
    head h (half in {0, 1}, j < head_dim / 2) at row (h, j, half), so that NORMAL rope's
    adjacent pairs are NEOX's (j, j + head_dim / 2). Written from the description in the
    spec (architectures.md 1.4), the inverse of what transformers applies on load.
    """
    if arch != "llama" or not (".attn_q." in name or ".attn_k." in name):
        return flat
    n_head = config.num_attention_heads if ".attn_q." in name else config.num_key_value_heads
    n_in = config.hidden_size
    rows = flat.reshape(n_head, 2, -1, n_in)  # [head][half][j][in]
    return np.ascontiguousarray(rows.swapaxes(1, 2)).reshape(-1)


def load(gguf_path, dtype, arch):
    """The model, [(gguf name, ne0, ne1, parameter)] in the GGUF file's tensor order, and
    rows(name, flat): a flat transformers array of that tensor in GGUF order."""
    d, name = os.path.split(os.path.abspath(gguf_path))
    if arch == "mamba2":
        from model_logits import mamba2_from_gguf
        model = mamba2_from_gguf(gguf_path)
        for n, p in model.named_parameters():
            if n.endswith("mixer.A_log"):
                p.requires_grad_(False)  # A as stored is frozen (see the docstring)
    elif arch in GEMMA_ARCHS:
        from model_logits import gemma_from_gguf
        model = gemma_from_gguf(gguf_path)
    else:
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                     attn_implementation="eager")
    # nn.Embedding(padding_idx=pad) gives the pad token's row no gradient from the input lookup
    # (transformers sets it from the file's padding_token_id for lfm2): a convenience for padded
    # batches, not the loss's gradient, which we compute; the random rows hold the pad id too.
    emb = model.get_input_embeddings()
    if emb.padding_idx is not None:
        emb.padding_idx = None
    if getattr(model.config, "attention_dropout", 0.0) != 0.0:
        raise SystemExit("attention_dropout is not 0")
    if model.config.model_type != ("gemma3_text" if arch == "gemma3" else arch):
        raise SystemExit(f"transformers built a {model.config.model_type} model, expected {arch}")
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    hf_of = {gguf_name(n, arch): n for n, _ in trained}
    by_name = {gguf_name(n, arch): p for n, p in trained}
    reader = GGUFReader(gguf_path)
    order = []
    for t in reader.tensors:
        if arch == "mamba2" and t.name.endswith(".ssm_a"):
            continue  # frozen on both sides
        if t.name not in by_name:
            raise SystemExit(f"{t.name}: no transformers parameter maps to it")
        p = by_name.pop(t.name)
        ne = [int(x) for x in t.shape]  # ggml order
        g = np.asarray(t.data, dtype=np.float32).reshape(-1)
        w = gguf_rows(arch, model.config, t.name, p.detach().numpy().reshape(-1))  # row-major [out, in] == ggml [in, out]
        if norm_shift(arch, t.name):
            w = (w + np.float32(norm_shift(arch, t.name))).astype(np.float32)  # exact: HF's w = stored - 1 in [-0.5, 1]
        # conv weights (C, 1, K) and D (nh,) are the GGUF [K, C] and [1, nh] in the same flat order
        squeeze = lambda shape: [int(x) for x in shape if x != 1]
        if squeeze(p.shape) != squeeze(ne[::-1]) or g.size != w.size:
            raise SystemExit(f"{t.name}: shape {ne} vs transformers {list(p.shape)}")
        if not np.array_equal(g.view(np.uint32), w.view(np.uint32)):
            bad = int(np.flatnonzero(g.view(np.uint32) != w.view(np.uint32))[0])
            raise SystemExit(f"{t.name}: element {bad} differs: gguf {g[bad]!r} transformers {w[bad]!r}")
        order.append((t.name, ne[0], ne[1] if len(ne) > 1 else 1))
    if by_name:
        raise SystemExit(f"parameters without a GGUF tensor: {sorted(by_name)}")
    model.to(dtype)
    model.train()
    params = dict(model.named_parameters())
    return (model, [(n, e0, e1, params[hf_of[n]]) for n, e0, e1 in order],
            lambda n, flat: gguf_rows(arch, model.config, n, flat))


def batches():
    rng = np.random.default_rng(DATA_SEED)
    out = []
    for _ in range(N_STEPS):
        ids = rng.integers(0, VOCAB, size=(B, T), dtype=np.int64)
        labels = np.full((B, T), IGNORE, dtype=np.int64)
        labels[:, :T - 1] = ids[:, 1:]
        s, lo, hi = IGNORED_SPAN
        labels[s, lo:hi] = IGNORE
        out.append((ids, labels))
    return out


def loss_of(model, ids, labels):
    logits = model(input_ids=torch.from_numpy(ids)).logits  # [B, T, V] torch order
    valid = int((labels != IGNORE).sum())
    total = F.cross_entropy(logits.reshape(-1, VOCAB), torch.from_numpy(labels).reshape(-1),
                            ignore_index=IGNORE, reduction="sum")
    return total / valid, valid


def global_norm(params):
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])))


def sample_indices(values):
    """64 spread indices, then the argmax of |values| (first on ties)."""
    nel = values.size
    idx = [(j * GOLDEN) % nel for j in range(N_SAMPLES)]
    idx.append(int(np.argmax(np.abs(values))))
    return idx


def tensor_stats(vec):
    """(L2 norm in float64, max |x|, [(idx, value)]) of a flat array."""
    v64 = vec.astype(np.float64)
    return (float(np.sqrt(np.sum(v64 * v64))), float(np.max(np.abs(v64))),
            [(i, float(vec[i])) for i in sample_indices(vec)])


def run_grads(gguf, dtype, arch):
    model, order, rows = load(gguf, dtype, arch)
    ids, labels = batches()[0]
    model.zero_grad(set_to_none=True)
    loss, valid = loss_of(model, ids, labels)
    loss.backward()
    params = [p for _, _, _, p in order]
    stats = [(n, e0, e1, tensor_stats(rows(n, p.grad.detach().numpy().reshape(-1)))) for n, e0, e1, p in order]
    return dict(loss=loss.item(), valid=valid, gnorm=global_norm(params), tensors=stats)


def run_train(gguf, dtype, kind, arch):
    model, order, rows = load(gguf, dtype, arch)
    params = [p for _, _, _, p in order]
    init = [p.detach().clone() for p in params]
    if kind == "adamw":
        h = ADAMW
        decay = [p for p in params if p.dim() == 2]
        no_decay = [p for p in params if p.dim() != 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": h["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"], foreach=False)
        sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=h["warmup_steps"],
                                                num_training_steps=h["total_steps"])
    else:
        h = SGD
        opt = torch.optim.SGD(params, lr=h["lr"], momentum=h["momentum"], dampening=h["dampening"],
                              weight_decay=h["weight_decay"], nesterov=bool(h["nesterov"]), foreach=False)
        sched = None
    steps = []
    for k, (ids, labels) in enumerate(batches()):
        opt.zero_grad(set_to_none=True)
        loss, _ = loss_of(model, ids, labels)
        loss.backward()
        if h["max_grad_norm"] > 0:
            gnorm = float(torch.nn.utils.clip_grad_norm_(params, h["max_grad_norm"], foreach=False))
        else:
            gnorm = global_norm(params)
        lr = opt.param_groups[0]["lr"]
        opt.step()
        if sched is not None:
            sched.step()
        steps.append((k, loss.item(), gnorm, float(lr)))
    stats = []
    for (n, e0, e1, p), p0 in zip(order, init):
        final = rows(n, p.detach().double().numpy().reshape(-1) + norm_shift(arch, n))  # the file's value
        delta = rows(n, (p.detach().double() - p0.double()).numpy().reshape(-1))  # exact difference
        idx = sample_indices(delta)
        stats.append((n, e0, e1, (float(np.sqrt(np.sum(delta * delta))), float(np.max(np.abs(delta))),
                                  [(i, float(final[i])) for i in idx])))
    return dict(steps=steps, tensors=stats, hparams=h)


def fmt(x):
    return "%.9e" % x


def write(path, kind, arch, fnv, res):
    lines = [f"rgtrain 1 {kind}", f"model {arch} f32 seed {SEED_WEIGHTS} fnv1a64 {fnv:016x}"]
    hp = [("ignore_index", str(IGNORE)), ("batch", str(B)), ("seq", str(T)),
          ("steps", "1" if kind == "grads" else str(N_STEPS))]
    if kind == "adamw":
        h = ADAMW
        hp += [("lr", fmt(h["lr"])), ("beta1", fmt(h["beta1"])), ("beta2", fmt(h["beta2"])),
               ("eps", fmt(h["eps"])), ("weight_decay", fmt(h["weight_decay"])), ("decay_1d", "0"),
               ("max_grad_norm", fmt(h["max_grad_norm"])), ("schedule", "cosine"),
               ("warmup_steps", str(h["warmup_steps"])), ("total_steps", str(h["total_steps"]))]
    elif kind == "sgd":
        h = SGD
        hp += [("lr", fmt(h["lr"])), ("momentum", fmt(h["momentum"])), ("dampening", fmt(h["dampening"])),
               ("weight_decay", fmt(h["weight_decay"])), ("nesterov", str(h["nesterov"])),
               ("max_grad_norm", fmt(h["max_grad_norm"])), ("schedule", "constant"),
               ("warmup_steps", str(h["warmup_steps"])), ("total_steps", str(h["total_steps"]))]
    lines += [f"hparam {k} {v}" for k, v in hp]
    data = batches()[:1 if kind == "grads" else N_STEPS]
    lines.append(f"batches {len(data)} {B} {T}")
    for k, (ids, labels) in enumerate(data):
        for b in range(B):
            lines.append(f"ids {k} {b} " + " ".join(str(int(x)) for x in ids[b]))
            lines.append(f"labels {k} {b} " + " ".join(str(int(x)) for x in labels[b]))
    if kind == "grads":
        lines += [f"loss {fmt(res['loss'])}", f"valid {res['valid']}", f"gnorm {fmt(res['gnorm'])}"]
    else:
        lines += [f"step {k} {fmt(loss)} {fmt(g)} {fmt(lr)}" for k, loss, g, lr in res["steps"]]
    lines.append(f"tensors {len(res['tensors'])}")
    for name, e0, e1, (norm, maxabs, samples) in res["tensors"]:
        lines.append(f"tensor {name} {e0} {e1} norm {fmt(norm)} maxabs {fmt(maxabs)} samples {len(samples)}")
        lines += [f"sample {i} {fmt(v)}" for i, v in samples]
    lines.append("end")
    tmp = path + ".tmp"
    with open(tmp, "w", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def compare(kind, r32, r64):
    """Print how far the float32 reference is from the same computation in float64."""
    if kind == "grads":
        print(f"  f32 vs f64 {kind}: loss rel {rel(r32['loss'], r64['loss']):.2e}, "
              f"gnorm rel {rel(r32['gnorm'], r64['gnorm']):.2e}")
    else:
        worst_l = max(rel(a[1], b[1]) for a, b in zip(r32["steps"], r64["steps"]))
        worst_g = max(rel(a[2], b[2]) for a, b in zip(r32["steps"], r64["steps"]))
        print(f"  f32 vs f64 {kind}: per-step loss rel <= {worst_l:.2e}, gnorm rel <= {worst_g:.2e}")
    worst_n = max(rel(a[3][0], b[3][0]) for a, b in zip(r32["tensors"], r64["tensors"]))
    worst_s, where = 0.0, ""
    for a, b in zip(r32["tensors"], r64["tensors"]):
        scale = b[3][1]  # max |grad| (grads) or max |final - initial| (training) in f64
        for (ia, va), (ib, vb) in zip(a[3][2][:N_SAMPLES], b[3][2][:N_SAMPLES]):
            if abs(va - vb) / max(scale, 1e-30) > worst_s:
                worst_s, where = abs(va - vb) / max(scale, 1e-30), f"{a[0]}[{ia}]"
    print(f"  f32 vs f64 {kind}: tensor norm rel <= {worst_n:.2e}, "
          f"sample |diff|/maxabs <= {worst_s:.2e} ({where})")


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        raise SystemExit(__doc__)
    build, out = args[0], args[1]
    check64 = "--f64-check" in args[2:]
    arch = args[args.index("--arch") + 1] if "--arch" in args[2:-1] else "qwen2"
    if arch not in ("llama", "qwen2", "qwen3", "lfm2", "mamba2") + GEMMA_ARCHS:
        raise SystemExit(f"--arch {arch}: llama, qwen2, qwen3, lfm2, mamba2, gemma2 or gemma3")
    # qwen2 keeps the original file names and also writes both trajectories; the hybrids
    # (whose scan and conv backward the trajectory exercises step after step) the AdamW one.
    if arch == "qwen2":
        kinds, suffix = ("grads", "adamw", "sgd"), ""
    elif arch in ("lfm2", "mamba2") + GEMMA_ARCHS:
        kinds, suffix = ("grads", "adamw"), "-" + arch
    else:
        kinds, suffix = ("grads",), "-" + arch
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmpdir:
        gguf = os.path.join(tmpdir, "tiny.gguf")
        subprocess.run([os.path.join(build, "retrograd"), "make-tiny", "--arch", arch, "--type", "f32",
                        "-o", gguf], check=True, stdout=subprocess.DEVNULL)
        fnv = fnv1a64(gguf)
        for kind in kinds:
            if kind == "grads":
                run = lambda dt: run_grads(gguf, dt, arch)
            else:
                run = lambda dt: run_train(gguf, dt, kind, arch)
            res = run(torch.float32)
            fname = f"train-{kind}{suffix}.ref"
            write(os.path.join(out, fname), kind, arch, fnv, res)
            if kind == "grads":
                print(f"wrote {fname}: loss {res['loss']:.9e} valid {res['valid']} gnorm {res['gnorm']:.9e}")
                for name, _, _, (norm, maxabs, _) in res["tensors"]:
                    print(f"  {name:28s} |g| {norm:.6e}  max {maxabs:.6e}")
            else:
                print(f"wrote {fname}")
                for k, loss, g, lr in res["steps"]:
                    print(f"  step {k} loss {loss:.9e} gnorm {g:.9e} lr {lr:.9e}")
            if check64:
                compare(kind, res, run(torch.float64))
    print(f"fnv1a64 {fnv:016x}, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
