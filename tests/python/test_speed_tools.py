#!/usr/bin/env python3
"""The peer-comparison scripts of tools/reference/ run against stand-ins for the
peers and for our benches (the real ones need llama.cpp, PyTorch and SmolLM2
and take minutes), so that their pairing of rows, ratios, medians and errors
are checked in CI: llama_bench_compare.py (llama-bench and bench_generate),
llama_finetune_compare.py (llama-finetune and bench_train) and
torch_train_compare.py (a PyTorch worker and bench_train).

Usage: python3 tests/python/test_speed_tools.py [BUILD_DIR]   (BUILD_DIR: where retrograd is, for a tiny GGUF)

1. Per round and type it runs llama-bench on DIR/smollm2-<type>.gguf with
   `-t 2 -p 128 -n 32 -r REPS -o json` and bench_generate with RG_BENCH_TYPES
   and RG_BENCH_REPS; it takes the best of llama-bench's samples and
   bench_generate's prompt and generation columns (the shipped Q4_1's row is
   labelled "q4_1 (shipped)"), and prints the per-round ratios and the median
   and worst of them, as computed here from the stand-ins' numbers.
2. A missing model file or a bench that prints no row for the type is an error
   naming it, with a non-zero exit.

3. llama_finetune_compare.py: llama-finetune's per-window progress lines
   (written with carriage returns, as its progress bar is) are timed as they
   arrive, the first window dropped, validation lines ignored; bench_train's
   step line read; the ratio is ours / llama.cpp within the stand-ins' timing;
   the token_embd caveat is printed; a text too short and a failing
   llama-finetune are errors.
4. torch_train_compare.py: the PyTorch worker gets the GGUF's shape (layers,
   widths, heads, tied head) and the method; rows pair the worker's median with
   bench_train's for full, LoRA on the F32 file and LoRA on --lora-file; a
   failing worker is an error.

Prints `PASS name` / `FAIL name: details` and `N passed, N failed`; exit 1 on failure.
"""

import os
import re
import stat
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "reference", "llama_bench_compare.py")
FINETUNE_TOOL = os.path.join(ROOT, "tools", "reference", "llama_finetune_compare.py")
TORCH_TOOL = os.path.join(ROOT, "tools", "reference", "torch_train_compare.py")

# Stand-in numbers: llama-bench samples per (type, round) and ours.
LLAMA = {"f32": [(300, 30), (320, 31)], "q4_1": [(200, 80), (210, 90)], "bf16": [(100, 10)]}
OURS = {"f32": [(450, 33), (400, 29)], "q4_1": [(500, 150), (520, 160)]}

FAKE_LLAMA = r'''#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
want = ["-t", "2", "-p", "128", "-n", "32", "-r", "5", "-o", "json"]
if a[0] != "-m" or a[2:] != want:
    sys.exit("fake llama-bench: unexpected arguments %r" % a)
typ = os.path.basename(a[1])[len("smollm2-"):-len(".gguf")]
state = os.path.join(os.path.dirname(a[1]), "llama-" + typ + ".round")
r = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(r + 1))
pp, tg = LLAMA_TABLE[typ][r]
print(json.dumps([
    {"n_prompt": 128, "n_gen": 0, "avg_ts": pp - 5, "samples_ts": [pp - 10, pp, pp - 3]},
    {"n_prompt": 0, "n_gen": 32, "avg_ts": tg - 1, "samples_ts": [tg - 2, tg - 1, tg]},
]))
'''

FAKE_BENCH = r'''#!/usr/bin/env python3
import os, sys
typ = os.environ["RG_BENCH_TYPES"]
assert os.environ["RG_BENCH_REPS"] == "5", os.environ["RG_BENCH_REPS"]
state = os.path.join(os.environ["RG_BENCH_CACHE"], "ours-" + typ + ".round")
r = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(r + 1))
pp, tg = OURS_TABLE.get(typ, [(0, 0), (0, 0)])[r]
print("bench_generate: SmolLM2-135M, prompt 128 tokens, 32 generated (greedy), 2 threads, best of 5")
print("type             prompt tok/s    gen tok/s   llama.cpp pp   llama.cpp tg     gen of ceiling   after prompt")
if typ != "bf16":
    label = "q4_1 (shipped)" if typ == "q4_1" else typ
    print("%-16s %12.1f %12.1f %14s %14s %18s %14.1f" % (label, pp, tg, "-", "-", "-", tg - 1))
print("(ratios in parentheses: ours / llama.cpp)")
'''

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        print(f"PASS {name}")
        passed += 1
    else:
        print(f"FAIL {name}: {detail}")
        failed += 1


def script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def run(tmp, *types, rounds=2):
    cmd = [sys.executable, TOOL, "--llama-bench", os.path.join(tmp, "llama-bench"), "--bench",
           os.path.join(tmp, "bench_generate"), "--rounds", str(rounds), tmp, *types]
    return subprocess.run(cmd, capture_output=True, text=True)


# llama-finetune stand-in: a set-up window of 0.5 s, then windows of WINDOW_S seconds each
# (256 tokens: 256 / WINDOW_S tok/s), with a validation line between them that must not count.
WINDOW_S = 0.1
FAKE_FINETUNE = r"""#!/usr/bin/env python3
import os, sys, time
a = sys.argv[1:]
want = ["-c", "256", "-b", "256", "-ub", "256", "-t", "2", "--epochs", "1", "-val-split", "0", "-o"]
if a[0] != "-m" or a[2] != "-f" or a[4:-1] != want:
    sys.exit("fake llama-finetune: unexpected arguments %r" % a)
if os.environ.get("FAKE_FINETUNE_FAIL"):
    sys.stderr.write("llama_model_load: error loading model\n")
    sys.exit(1)
n = 8
for d in range(1, n + 1):
    time.sleep(0.5 if d == 1 else WINDOW_S)
    sys.stderr.write("train: [\u2588\u2588  ] data=%07d/%07d loss=%.5f\u00b10.01 acc=1.00\u00b10.1%% t=00:00:0%d ETA=00:00:01 \r"
                     % (d, n, 10.0 - d, min(d, 9)))
    sys.stderr.flush()
    if d == 4:
        sys.stderr.write("val:   [\u2588   ] data=0000001/0000001 loss=9.0\u00b10 acc=0\u00b10%% t=00:00:00 \r")
sys.stderr.write("\n")
open(a[-1], "w").write("model")
"""

# bench_train stand-in: STEP_S seconds per 256-token step (256 / STEP_S tok/s).
STEP_S = 0.05
FAKE_TRAIN = r"""#!/usr/bin/env python3
import os, sys
steps = int(sys.argv[1])
env = os.environ
assert env["RG_BENCH_TRAIN_CTX"] == "256" and env["RG_BENCH_THREADS"] == "2", env
method, model = env["RG_BENCH_TRAIN_METHOD"], env["RG_BENCH_TRAIN_MODEL"]
s = STEP_TABLE[method] * (2 if model.endswith("q4.gguf") else 1)
print("bench_train: 2 threads")
print("file %s  1.0 tok/s" % method)
print("step seconds (256 tokens each):" + "".join(" %.4f" % s for _ in range(steps)))
"""

FAKE_RETROGRAD = r"""#!/usr/bin/env python3
import os, sys
assert sys.argv[1] == "tokenize" and "--count" in sys.argv, sys.argv
print(os.environ.get("FAKE_TOKENS", "100000"))
"""

# PyTorch worker stand-in: checks the job, answers tok/s lists per method.
FAKE_TORCH = r"""#!/usr/bin/env python3
import json, sys
assert sys.argv[1] == "--worker"
job = json.loads(sys.argv[2])
c = job["cfg"]
shape = (c["arch"], c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
         c["vocab_size"], c["tie_word_embeddings"], job["ctx"], job["threads"], job["steps"])
if shape != WANT_SHAPE:
    sys.exit("fake torch: job %r, wanted %r" % (shape, WANT_SHAPE))
if job["method"] == FAIL_METHOD:
    sys.exit("Traceback: RuntimeError: out of memory")
print("some log line")
print(json.dumps({"tok_s": TORCH_TABLE[job["method"]], "torch": "9.9-fake"}))
"""


FAKE_LLAMA_FILE = r'''#!/usr/bin/env python3
import json, sys
pp, tg = {"lfm2-q4_k_m.gguf": (400, 40), "lfm2-f16.gguf": (300, 20)}[sys.argv[2].rsplit("/", 1)[-1]]
print(json.dumps([{"n_prompt": 128, "n_gen": 0, "avg_ts": pp, "samples_ts": [pp - 1, pp]},
                  {"n_prompt": 0, "n_gen": 32, "avg_ts": tg, "samples_ts": [tg]}]))
'''
FAKE_BENCH_FILE = r'''#!/usr/bin/env python3
import os
pp, tg = {"lfm2-q4_k_m.gguf": (600, 50), "lfm2-f16.gguf": (330, 30)}[os.path.basename(os.environ["RG_BENCH_MODEL"])]
print("type             prompt tok/s    gen tok/s     gen of ceiling   after prompt")
print("%-16s %12.1f %12.1f %18s %14.1f" % ("file", pp, tg, "99% of 40", tg - 1))
'''


def check_model_mode(tmp):
    """--model FILE: each file as it is, llama-bench and bench_generate's "file" row (RG_BENCH_MODEL)."""
    d = os.path.join(tmp, "files")
    os.makedirs(d)
    script(os.path.join(d, "llama-bench"), FAKE_LLAMA_FILE)
    script(os.path.join(d, "bench_generate"), FAKE_BENCH_FILE)
    paths = [os.path.join(d, n) for n in ("lfm2-q4_k_m.gguf", "lfm2-f16.gguf")]
    for path in paths:
        open(path, "wb").close()
    cmd = [sys.executable, TOOL, "--llama-bench", os.path.join(d, "llama-bench"), "--bench",
           os.path.join(d, "bench_generate"), "--rounds", "2"] + [x for p in paths for x in ("--model", p)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    check("--model files run", r.returncode == 0, r.stderr[-400:])
    line = "  lfm2-q4_k_m.gguf             prompt 1.50 (worst 1.50)   generation 1.25 (worst 1.25)"
    check("--model rows: ours / llama-bench per file", line in r.stdout, f"wanted {line!r} in\n{r.stdout}")
    r = subprocess.run(cmd[:-1] + [os.path.join(d, "gone.gguf")], capture_output=True, text=True)
    check("--model: a missing file is named", r.returncode != 0 and "gone.gguf is missing" in r.stderr, r.stderr[-400:])


def check_finetune_tool(tmp):
    d = os.path.join(tmp, "ft")
    os.makedirs(d)
    script(os.path.join(d, "llama-finetune"), FAKE_FINETUNE.replace("WINDOW_S", repr(WINDOW_S)))
    script(os.path.join(d, "bench_train"), FAKE_TRAIN.replace("STEP_TABLE", repr({"full": STEP_S})))
    script(os.path.join(d, "retrograd"), FAKE_RETROGRAD)
    model, text = os.path.join(d, "model.gguf"), os.path.join(d, "text.txt")
    open(model, "wb").close()
    open(text, "w").write("word " * 5000)

    def run_ft(env=None, rounds=2, windows=6):
        cmd = [sys.executable, FINETUNE_TOOL, "--llama-finetune", os.path.join(d, "llama-finetune"),
               "--bench", os.path.join(d, "bench_train"), "--retrograd", os.path.join(d, "retrograd"),
               "--rounds", str(rounds), "--windows", str(windows), model, text]
        return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))

    r = run_ft()
    check("finetune comparison runs", r.returncode == 0, r.stderr[-400:])
    rows = re.findall(r"^\s+(\d)\s+([\d.]+)\s+[\d.]+-[\d.]+\s+([\d.]+)\s+[\d.]+-[\d.]+\s+([\d.]+)\s+\((\d+) llama windows",
                      r.stdout, re.M)
    check("finetune: one row per round", len(rows) == 2, r.stdout)
    want_llama, want_ours = 256 / WINDOW_S, 256 / STEP_S
    ok = bool(rows)
    for _, lt, ot, ratio, nwin in rows:
        # windows 2..8 at WINDOW_S each (the first, with its 0.5 s set-up, has no line before it; jitter allowed)
        ok = ok and 0.7 * want_llama <= float(lt) <= 1.15 * want_llama and float(ot) == want_ours
        ok = ok and abs(float(ratio) - float(ot) / float(lt)) < 0.006 and nwin == "8"
    check("finetune: llama's windows timed between the lines' arrivals; ours from the step line", ok,
          f"{rows} (llama ~{want_llama:.0f}, ours {want_ours:.0f})\n{r.stdout}")
    med = re.search(r"median of the per-round ratios \(ours / llama-finetune\): ([\d.]+) \(worst ([\d.]+)\)", r.stdout)
    ratios = sorted(float(x[3]) for x in rows)
    check("finetune: median and worst of the rounds", bool(med) and rows and
          abs(float(med.group(1)) - statistics.median(ratios)) < 0.006 and abs(float(med.group(2)) - ratios[0]) < 0.006,
          r.stdout)
    check("finetune: the token_embd caveat is printed", "does not train token_embd" in r.stdout, r.stdout)
    r = run_ft(env={"FAKE_TOKENS": "500"}, rounds=1)
    check("finetune: a text too short is named", r.returncode != 0 and "500 tokens, 6 windows of 256 need" in r.stderr,
          r.stderr[-400:])
    r = run_ft(env={"FAKE_FINETUNE_FAIL": "1"}, rounds=1)
    check("finetune: a failing llama-finetune is an error with its log",
          r.returncode != 0 and "llama-finetune exited 1" in r.stderr and "error loading model" in r.stderr, r.stderr[-400:])


def check_torch_tool(tmp, build):
    d = os.path.join(tmp, "torch")
    os.makedirs(d)
    model = os.path.join(d, "tiny.gguf")
    q4 = os.path.join(d, "tiny-q4.gguf")
    mk = subprocess.run([os.path.join(build, "retrograd"), "make-tiny", "--arch", "qwen2", "--type", "f32", "-o", model],
                        capture_output=True, text=True)
    if mk.returncode != 0:
        check("torch: make-tiny for the stand-in's model", False, mk.stderr[-300:])
        return
    open(q4, "wb").close()
    torch_table = {"full": [100.0, 90.0, 110.0], "lora": [200.0, 180.0, 220.0]}
    # the tiny qwen2 of make-tiny: 2 layers, 256 wide, 4 heads, 2 kv heads, 512 tokens, untied head
    want_shape = ("qwen2", 2, 256, 4, 2, 512, False, 256, 2, 3)

    def run_torch(fail=None):
        fake = FAKE_TORCH.replace("WANT_SHAPE", repr(want_shape)).replace("TORCH_TABLE", repr(torch_table))
        script(os.path.join(d, "torch-worker"), fake.replace("FAIL_METHOD", repr(fail)))
        script(os.path.join(d, "bench_train"), FAKE_TRAIN.replace("STEP_TABLE", repr({"full": 1.28, "lora": 0.64})))
        cmd = [sys.executable, TORCH_TOOL, "--bench", os.path.join(d, "bench_train"), "--torch-worker",
               os.path.join(d, "torch-worker"), "--rounds", "2", "--steps", "3", "--lora-file", q4, model]
        return subprocess.run(cmd, capture_output=True, text=True)

    r = run_torch()
    check("torch comparison runs", r.returncode == 0, r.stderr[-600:])
    # a row: round, method, PyTorch's way, its tok/s, ours (file @compute_dtype), ours' tok/s, ratio
    rows = re.findall(r"^\s+(\d)\s+(full|lora)\s+(\S+)\s+([\d.]+)\s+(\S+) @(\S+)\s+([\d.]+)\s+([\d.]+)$", r.stdout, re.M)
    # ours: 256 / 1.28 = 200 (full), 256 / 0.64 = 400 (LoRA, F32), 200 (LoRA on the "q4" file: twice the time)
    want = {("full", "f32", "tiny.gguf"): (100.0, 200.0), ("lora", "f32", "tiny.gguf"): (200.0, 400.0),
            ("lora", "f32", "tiny-q4.gguf"): (200.0, 200.0)}
    got = {}
    for _, method, way, t, ours, compute, o, ratio in rows:
        got.setdefault((method, way, ours), []).append((float(t), float(o), float(ratio), compute))
    ok = set(got) == set(want) and all(len(v) == 2 for v in got.values())
    for label, v in got.items():
        for t, o, ratio, compute in v:
            ok = ok and label in want and (t, o) == want[label] and abs(ratio - o / t) < 0.006 and compute == "auto"
    check("torch: rows pair the worker's median with ours (full, LoRA F32, LoRA on --lora-file)", ok, r.stdout)
    check("torch: the medians are printed with the torch version",
          "ours / PyTorch 9.9-fake" in r.stdout
          and re.search(r"^\s+lora\s+torch f32\s+ours tiny-q4.gguf @auto\s+1.00 \(worst 1.00\)$", r.stdout, re.M) is not None
          and re.search(r"^\s+full\s+torch f32\s+ours tiny.gguf @auto\s+2.00 \(worst 2.00\)$", r.stdout, re.M) is not None,
          r.stdout)
    r = run_torch(fail="lora")
    check("torch: a failing worker is an error with its message",
          r.returncode != 0 and "the PyTorch run (lora, f32) failed" in r.stderr and "out of memory" in r.stderr, r.stderr[-400:])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        script(os.path.join(tmp, "llama-bench"), FAKE_LLAMA.replace("LLAMA_TABLE", repr(LLAMA)))
        script(os.path.join(tmp, "bench_generate"), FAKE_BENCH.replace("OURS_TABLE", repr(OURS)))
        for t in ["f32", "q4_1", "bf16"]:
            open(os.path.join(tmp, f"smollm2-{t}.gguf"), "wb").close()

        r = run(tmp, "f32", "q4_1")
        check("comparison runs", r.returncode == 0, r.stderr[-400:])
        rows = re.findall(r"^\s+(\d)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$",
                          r.stdout, re.M)
        check("one row per round and type", len(rows) == 4, r.stdout)
        ok = True
        for rnd, typ, lpp, opp, rpp, ltg, otg, rtg in rows:
            i = int(rnd) - 1
            want = (LLAMA[typ][i][0], OURS[typ][i][0], LLAMA[typ][i][1], OURS[typ][i][1])
            got = (float(lpp), float(opp), float(ltg), float(otg))
            ok = ok and got == want  # the best sample, ours as printed
            ok = ok and abs(float(rpp) - want[1] / want[0]) < 0.006 and abs(float(rtg) - want[3] / want[2]) < 0.006
        check("rows pair llama-bench's best samples with ours, ratios ours / llama", ok, r.stdout)
        for typ in ["f32", "q4_1"]:
            pr = [o[0] / l[0] for l, o in zip(LLAMA[typ], OURS[typ])]
            gr = [o[1] / l[1] for l, o in zip(LLAMA[typ], OURS[typ])]
            line = (f"  {typ:8} prompt {statistics.median(pr):.2f} (worst {min(pr):.2f})   "
                    f"generation {statistics.median(gr):.2f} (worst {min(gr):.2f})")
            check(f"median and worst for {typ}", line in r.stdout, f"wanted {line!r} in\n{r.stdout}")

        r = run(tmp, "q8_0", rounds=1)
        check("a missing model file is named", r.returncode != 0 and "smollm2-q8_0.gguf is missing" in r.stderr,
              r.stderr[-400:])
        r = run(tmp, "bf16", rounds=1)
        check("a bench without the type's row is an error", r.returncode != 0 and "no row for bf16" in r.stderr,
              r.stderr[-400:])
        os.remove(os.path.join(tmp, "smollm2-q4_1.gguf"))
        r = run(tmp, "f32", rounds=1)
        check("the shipped Q4_1 copy is required", r.returncode != 0 and "smollm2-q4_1.gguf is missing" in r.stderr,
              r.stderr[-400:])
        check_model_mode(tmp)
        check_finetune_tool(tmp)
        check_torch_tool(tmp, sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
