"""How serving and a fine-tuning job share the machine: requests/s and p50/p99 latency of N clients sending
chat completions to `retrograd serve`, with no job and while a job trains (its child `retrograd train` at
in the idle scheduling class), alternating runs so drift hits both alike.

Usage: bench/serve_while_training.py [--build build] [--model $RG_SMOLLM2] [--clients 4] [--requests 8]
         [--max-tokens 32] [--rounds 2] [--job-threads 0] [--ctx 128] [-np 4]
Each round: one run idle, one run while a LoRA job on a small chat file trains (created, waited for until
its first step is logged, cancelled after the run). Prints one row per run and the ratio training / idle.
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from rg_harness import start_server  # noqa: E402

try:
    import openai
except ImportError as e:
    raise SystemExit(f"import openai: {e} (pip install -r tests/python/requirements.txt)")

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--model", default=os.environ.get("RG_SMOLLM2", ""))
ap.add_argument("--clients", type=int, default=4)
ap.add_argument("--requests", type=int, default=8, help="requests per client per run")
ap.add_argument("--max-tokens", type=int, default=32)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--job-threads", type=int, default=0, help="the server's --job-threads (0: all cores)")
ap.add_argument("--ctx", type=int, default=128, help="the job's training.ctx")
ap.add_argument("-np", type=int, default=4)
a = ap.parse_args()
if not os.path.exists(a.model):
    raise SystemExit(f"no model '{a.model}' (--model or $RG_SMOLLM2; scripts/smollm2.sh installs SmolLM2)")
exe = os.path.join(a.build, "retrograd")
model_id = os.path.basename(a.model)[: -len(".gguf")]
tmp = tempfile.mkdtemp()


def start():
    return start_server([exe, "serve", "-m", a.model, "--port", "0", "-c", "1024", "-np", str(a.np), "--files-dir",
                         os.path.join(tmp, "files"), "--job-threads", str(a.job_threads)],
                        os.path.join(tmp, "serve.log"), timeout=120)


questions = ["What is the capital of France?", "Name three colors.", "Count from one to ten.", "What is 12 times 7?",
             "Write a haiku about the sea.", "Why is the sky blue?", "Name a large animal.", "Say hello in Spanish."]


def load(client):
    """Every client sends its requests one after another; returns (seconds, latencies, completion tokens)."""
    def one_client(k):
        lat, toks = [], 0
        for i in range(a.requests):
            q = questions[(k + i) % len(questions)]
            t0 = time.perf_counter()
            r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": q}],
                                               max_tokens=a.max_tokens, temperature=0)
            lat.append(time.perf_counter() - t0)
            toks += r.usage.completion_tokens
        return lat, toks
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(a.clients) as ex:
        res = list(ex.map(one_client, range(a.clients)))
    secs = time.perf_counter() - t0
    return secs, sorted(x for lat, _ in res for x in lat), sum(t for _, t in res)


def pct(xs, p):
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


srv, url = start()
client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
rows = []
try:
    data = os.path.join(tmp, "chat.jsonl")
    with open(data, "w") as f:
        for q in questions * 4:
            f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                             {"role": "assistant", "content": "A short answer to: " + q}]}) + "\n")
    fid = client.files.create(file=open(data, "rb"), purpose="fine-tune").id
    load(client)  # warm-up
    for rnd in range(a.rounds):
        for mode in ("idle", "training"):
            job = None
            if mode == "training":
                job = client.fine_tuning.jobs.create(model=model_id, training_file=fid, extra_body={"retrograd": {
                    "steps": 1000000, "ctx": a.ctx, "eval_split": 0, "save_every": 0}})
                deadline = time.time() + 300
                while time.time() < deadline and not any(
                        e.message.startswith("Step") for e in client.fine_tuning.jobs.list_events(job.id).data):
                    time.sleep(0.5)
            secs, lat, toks = load(client)
            steps = 0
            if job:
                steps = sum(e.message.startswith("Step") for e in client.fine_tuning.jobs.list_events(job.id,
                                                                                                       limit=100).data)
                client.fine_tuning.jobs.cancel(job.id)
                deadline = time.time() + 30
                while time.time() < deadline and client.fine_tuning.jobs.retrieve(job.id).finished_at is None:
                    time.sleep(0.2)
            n = len(lat)
            rows.append((rnd, mode, n, n / secs, toks / secs, statistics.median(lat), pct(lat, 99), steps))
finally:
    srv.terminate()
    srv.wait(timeout=60)
    shutil.rmtree(tmp, ignore_errors=True)

print(f"SmolLM2 {model_id}, {a.clients} clients x {a.requests} requests, max_tokens {a.max_tokens}, -np {a.np}, "
      f"job: LoRA ctx {a.ctx}, --job-threads {a.job_threads or 'all'}, training in SCHED_IDLE; {os.cpu_count()} cores")
print(f"{'round':>5} {'mode':>9} {'reqs':>5} {'req/s':>7} {'tok/s':>7} {'p50 s':>7} {'p99 s':>7} {'job steps':>9}")
for r in rows:
    print(f"{r[0]:>5} {r[1]:>9} {r[2]:>5} {r[3]:>7.2f} {r[4]:>7.1f} {r[5]:>7.3f} {r[6]:>7.3f} {r[7]:>9}")
mean = {}
for mode in ("idle", "training"):
    sel = [r for r in rows if r[1] == mode]
    mean[mode] = [statistics.mean(r[k] for r in sel) for k in (3, 5, 6)]
t, i = mean["training"], mean["idle"]
print(f"training / idle: req/s {t[0] / i[0]:.2f}x, p50 {t[1] / i[1]:.2f}x, p99 {t[2] / i[2]:.2f}x")
