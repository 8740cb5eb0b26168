#!/usr/bin/env python3
"""Reference logits from PyTorch + transformers (an implementation nobody here wrote).

    python3 tools/reference/model_logits.py BUILD_DIR OUT_DIR [SMOLLM2.gguf] [--arch A]...

--arch A (repeatable) writes only the tiny fixtures of those architectures (llama, qwen2,
qwen3, lfm2, mamba2, gemma2, gemma3), leaving the other fixtures in OUT_DIR as they are.

transformers loads each GGUF file directly (dequantizing it), so the reference is
independent of our loader; it fails when any weight of the model was not in the file.
transformers has no GGUF mapping for mamba2: there Mamba2ForCausalLM is made from a config
read off the file's keys, and its weights are the file's tensors read by gguf-py
(dequantized) with the layout conversions of llama.cpp's converter undone: conv1d.weight
[K, conv_dim] -> (conv_dim, 1, K), A_log = log(-ssm_a) (the file stores A = -exp(A_log)),
D and dt_bias as they are, ssm_norm [D_in/G, G] flattened to D_in; the head tied. gemma2 and gemma3
are made the same way (gemma_from_gguf): transformers' GGUF mapping for them reads neither the caps
nor query_pre_attn_scalar (its defaults, 50/30 and 256, would stand), so Gemma2ForCausalLM /
Gemma3ForCausalLM (text) are built from a config of the file's keys (query_pre_attn_scalar =
key_length, the query scale llama.cpp uses below 27B; gemma3's sliding layers with RoPE base
rope.freq_base_swa or 10000, the global ones rope.freq_base), eager attention, and the file's
tensors with llama.cpp's converter undone: every *norm.weight stored as 1 + w becomes w (HF computes
x r (1 + w)). Writes one fixture per model to OUT_DIR:

  <name>.ref : magic "RGRL", u32 version 1, u64 fnv1a64 of the GGUF bytes,
               u32 n_tokens, u32 n_vocab, u32 top_k (0 = every logit stored),
               i32 ids[n_tokens], then per token either f32 logits[n_vocab]
               or top_k pairs (i32 id, f32 logit), highest first.

The tiny fixtures are written first with `retrograd make-tiny` (deterministic bytes;
the checksum lets the C test notice a drift). The llama GGUF stores attn_q/attn_k with
llama.cpp's row permutation for NORMAL rope; transformers undoes it on load (that is the
independent path under test). For qwen3, whose GGUF mapping in transformers ignores
attention.key_length, the script checks that the config's head_dim equals that key. SmolLM2 prompts are tokenized with the
Hugging Face tokenizer that transformers builds from the GGUF file; the C test also
checks our tokenizer gives the same ids.
Needs: torch, transformers, accelerate, gguf, numpy (tools only; not in CI).
"""
import os
import struct
import subprocess
import sys

import numpy as np
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

TINY = [  # name, architecture, make-tiny arguments
    ("tiny-qwen2-f32", "qwen2", ["--type", "f32"]),
    ("tiny-qwen2-f16", "qwen2", ["--type", "f16"]),
    ("tiny-qwen2-bf16", "qwen2", ["--type", "bf16"]),
    ("tiny-qwen2-f16-tied", "qwen2", ["--type", "f16", "--tied"]),
    ("tiny-qwen2-q8_0", "qwen2", ["--type", "q8_0"]),
    ("tiny-qwen2-q4_k_m", "qwen2", ["--type", "q4_k_m"]),
    ("tiny-llama-f32", "llama", ["--type", "f32"]),
    ("tiny-llama-q8_0", "llama", ["--type", "q8_0"]),
    ("tiny-qwen3-f32", "qwen3", ["--type", "f32"]),
    ("tiny-qwen3-q8_0", "qwen3", ["--type", "q8_0"]),
    ("tiny-lfm2-f32", "lfm2", ["--type", "f32"]),
    ("tiny-lfm2-q8_0", "lfm2", ["--type", "q8_0"]),
    ("tiny-mamba2-f32", "mamba2", ["--type", "f32"]),
    ("tiny-mamba2-q8_0", "mamba2", ["--type", "q8_0"]),
    ("tiny-mamba2-g2-f32", "mamba2", ["--type", "f32", "--groups", "2"]),  # heads 0-3 and 4-7 share B, C; grouped norm
    ("tiny-gemma2-f32", "gemma2", ["--type", "f32"]),
    ("tiny-gemma2-q8_0", "gemma2", ["--type", "q8_0"]),
    ("tiny-gemma3-f32", "gemma3", ["--type", "f32"]),
    ("tiny-gemma3-q8_0", "gemma3", ["--type", "q8_0"]),
]
SMOL_PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox jumps over the lazy dog. In 1969, Apollo 11",
]


def fnv1a64(path):
    h = 0xCBF29CE484222325
    data = np.fromfile(path, dtype=np.uint8)
    # Chunked pure-Python FNV is slow on 100 MB; fold 1 MB at a time with numpy-free loop over bytes.
    for b in data.tobytes():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def write(path, gguf, ids, logits, top_k):
    with open(path, "wb") as f:
        f.write(b"RGRL")
        f.write(struct.pack("<IQIII", 1, fnv1a64(gguf), len(ids), logits.shape[1], top_k))
        f.write(np.asarray(ids, dtype=np.int32).tobytes())
        for row in logits:
            if top_k == 0:
                f.write(row.astype(np.float32).tobytes())
            else:
                order = np.argsort(-row, kind="stable")[:top_k]
                for i in order:
                    f.write(struct.pack("<if", int(i), float(row[i])))


def check_head_dim(model, gguf):
    """transformers reads no attention.key_length for qwen3 (its config default is 128)."""
    reader = GGUFReader(gguf)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    field = reader.fields.get(f"{arch}.attention.key_length")
    if field is not None and int(field.parts[-1][0]) != model.config.head_dim:
        raise SystemExit(f"{gguf}: key_length {int(field.parts[-1][0])}, transformers head_dim {model.config.head_dim}")


def load_checked(model, sd, gguf):
    """model with the state dict sd: every weight from the file (a tied head excepted), the head tied."""
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"{gguf}: weights missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model


def mamba2_from_gguf(gguf):
    """Mamba2ForCausalLM with the file's keys and tensors (transformers reads no mamba2 GGUF)."""
    from gguf import dequantize
    from transformers import Mamba2Config, Mamba2ForCausalLM
    reader = GGUFReader(gguf)

    def key(k):
        return reader.fields["mamba2." + k].parts[-1][0].item()

    tensors = {t.name: torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32))
               for t in reader.tensors}
    d, n_inner, n_heads = key("embedding_length"), key("ssm.inner_size"), key("ssm.time_step_rank")
    vocab = tensors["token_embd.weight"].shape[0]
    cfg = Mamba2Config(vocab_size=vocab, hidden_size=d, state_size=key("ssm.state_size"), num_heads=n_heads,
                       head_dim=n_inner // n_heads, n_groups=key("ssm.group_count"), expand=n_inner // d,
                       conv_kernel=key("ssm.conv_kernel"), num_hidden_layers=key("block_count"),
                       layer_norm_epsilon=key("attention.layer_norm_rms_epsilon"), use_bias=False,
                       use_conv_bias=True, tie_word_embeddings="output.weight" not in tensors)
    model = Mamba2ForCausalLM(cfg)
    sd = {"backbone.embeddings.weight": tensors["token_embd.weight"],
          "backbone.norm_f.weight": tensors["output_norm.weight"]}
    if "output.weight" in tensors:
        sd["lm_head.weight"] = tensors["output.weight"]
    for i in range(cfg.num_hidden_layers):
        b, h = f"blk.{i}.", f"backbone.layers.{i}."
        sd[h + "norm.weight"] = tensors[b + "attn_norm.weight"]
        sd[h + "mixer.in_proj.weight"] = tensors[b + "ssm_in.weight"]                # (n_in, d)
        sd[h + "mixer.conv1d.weight"] = tensors[b + "ssm_conv1d.weight"].unsqueeze(1)  # (conv_dim, K) -> (conv_dim, 1, K)
        sd[h + "mixer.conv1d.bias"] = tensors[b + "ssm_conv1d.bias"]
        sd[h + "mixer.dt_bias"] = tensors[b + "ssm_dt.bias"]
        A = tensors[b + "ssm_a"].reshape(-1).double()
        if not bool((A < 0).all()):
            raise SystemExit(f"{gguf}: {b}ssm_a has a value >= 0, not -exp(A_log)")
        sd[h + "mixer.A_log"] = torch.log(-A).float()
        sd[h + "mixer.D"] = tensors[b + "ssm_d"].reshape(-1)
        sd[h + "mixer.norm.weight"] = tensors[b + "ssm_norm.weight"].reshape(-1)    # (G, D_in/G) -> D_in
        sd[h + "mixer.out_proj.weight"] = tensors[b + "ssm_out.weight"]              # (d, D_in)
    return load_checked(model, sd, gguf)


GEMMA_LAYER = {  # Gemma{2,3}DecoderLayer modules -> GGUF (llama.cpp's tensor names)
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "post_feedforward_layernorm": "post_ffw_norm",
}


def gemma_from_gguf(gguf):
    """Gemma2ForCausalLM / Gemma3ForCausalLM with the file's keys and tensors (see the docstring)."""
    from gguf import dequantize
    from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig
    reader = GGUFReader(gguf)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()

    def key(k, default=None):
        f = reader.fields.get(f"{arch}.{k}")
        return default if f is None else f.parts[-1][0].item()

    tensors = {t.name: torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32))
               for t in reader.tensors}
    d, n_head = key("embedding_length"), key("attention.head_count")
    head_dim = key("attention.key_length", d // n_head)
    common = dict(vocab_size=tensors["token_embd.weight"].shape[0], hidden_size=d,
                  intermediate_size=key("feed_forward_length"), num_hidden_layers=key("block_count"),
                  num_attention_heads=n_head, num_key_value_heads=key("attention.head_count_kv", n_head),
                  head_dim=head_dim, hidden_activation="gelu_pytorch_tanh",
                  max_position_embeddings=key("context_length"), rms_norm_eps=key("attention.layer_norm_rms_epsilon"),
                  tie_word_embeddings="output.weight" not in tensors, query_pre_attn_scalar=head_dim,
                  attention_bias=False, attention_dropout=0.0, pad_token_id=None)
    if arch == "gemma2":
        cfg = Gemma2Config(**common, sliding_window=key("attention.sliding_window", 4096),
                           attn_logit_softcapping=key("attn_logit_softcapping", 50.0),
                           final_logit_softcapping=key("final_logit_softcapping", 30.0),
                           rope_parameters={"rope_type": "default", "rope_theta": key("rope.freq_base", 10000.0)})
        cls = Gemma2ForCausalLM
    else:
        full = {"rope_type": "default", "rope_theta": key("rope.freq_base", 1000000.0)}
        if key("rope.scaling.factor"):
            full = {"rope_type": "linear", "factor": key("rope.scaling.factor"), "rope_theta": full["rope_theta"]}
        cfg = Gemma3TextConfig(**common, sliding_window=key("attention.sliding_window"),
                               final_logit_softcapping=key("final_logit_softcapping"), attn_logit_softcapping=None,
                               rope_parameters={"sliding_attention": {"rope_type": "default",
                                                                      "rope_theta": key("rope.freq_base_swa", 10000.0)},
                                                "full_attention": full})
        cls = Gemma3ForCausalLM
    cfg._attn_implementation = "eager"
    model = cls(cfg)
    unshift = lambda name, x: x - 1.0 if name.endswith("norm.weight") else x  # the converter stored 1 + w
    sd = {"model.embed_tokens.weight": tensors["token_embd.weight"],
          "model.norm.weight": unshift("output_norm.weight", tensors["output_norm.weight"])}
    if "output.weight" in tensors:
        sd["lm_head.weight"] = tensors["output.weight"]
    for i in range(cfg.num_hidden_layers):
        for hf, gg in GEMMA_LAYER.items():
            name = f"blk.{i}.{gg}.weight"
            if name in tensors:
                sd[f"model.layers.{i}.{hf}.weight"] = unshift(name, tensors[name])
    return load_checked(model, sd, gguf)


def logits_of(gguf, ids):
    d, name = os.path.split(os.path.abspath(gguf))
    arch = bytes(GGUFReader(gguf).fields["general.architecture"].parts[-1]).decode()
    if arch == "mamba2":
        model = mamba2_from_gguf(gguf)
    elif arch in ("gemma2", "gemma3"):
        model = gemma_from_gguf(gguf)
    else:
        model, info = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                           output_loading_info=True)
        if info["missing_keys"] or info["mismatched_keys"]:
            raise SystemExit(f"{gguf}: transformers left weights unread: {info}")
        check_head_dim(model, gguf)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def main():
    args = sys.argv[1:]
    archs = [args[i + 1] for i in range(len(args) - 1) if args[i] == "--arch"]
    args = [a for i, a in enumerate(args) if a != "--arch" and (i == 0 or args[i - 1] != "--arch")]
    build, out = args[0], args[1]
    os.makedirs(out, exist_ok=True)
    ids = [(i * 37 + 11) % 509 for i in range(16)]  # below the three special ids
    for name, arch, make_args in TINY:
        if archs and arch not in archs:
            continue
        gguf = os.path.join(out, name + ".gguf")
        subprocess.run([os.path.join(build, "retrograd"), "make-tiny", "--arch", arch, "--seed", "7", "-o", gguf]
                       + make_args, check=True, stdout=subprocess.DEVNULL)
        write(os.path.join(out, name + ".ref"), gguf, ids, logits_of(gguf, ids), 0)
        os.remove(gguf)
        print("wrote", name)
    if len(args) > 2:
        gguf = args[2]
        d, name = os.path.split(os.path.abspath(gguf))
        tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
        for k, prompt in enumerate(SMOL_PROMPTS):
            pid = tok(prompt, add_special_tokens=False)["input_ids"]
            write(os.path.join(out, f"smollm2-q4_1-{k}.ref"), gguf, pid, logits_of(gguf, pid), 64)
            print("wrote smollm2", k, len(pid), "tokens")


if __name__ == "__main__":
    main()
