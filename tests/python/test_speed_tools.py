#!/usr/bin/env python3
"""tools/reference/llama_bench_compare.py, the comparison behind issue 5's speed
bar, run against stand-ins for llama-bench and bench_generate (the real ones
need llama.cpp and SmolLM2 and take minutes), so that its pairing of rows,
ratios, medians and errors are checked in CI.

Usage: python3 tests/python/test_speed_tools.py [BUILD_DIR]   (BUILD_DIR unused)

1. Per round and type it runs llama-bench on DIR/smollm2-<type>.gguf with
   `-t 2 -p 128 -n 32 -r REPS -o json` and bench_generate with RG_BENCH_TYPES
   and RG_BENCH_REPS; it takes the best of llama-bench's samples and
   bench_generate's prompt and generation columns (the shipped Q4_1's row is
   labelled "q4_1 (shipped)"), and prints the per-round ratios and the median
   and worst of them, as computed here from the stand-ins' numbers.
2. A missing model file or a bench that prints no row for the type is an error
   naming it, with a non-zero exit.

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
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
