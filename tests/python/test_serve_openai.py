"""`retrograd serve` through the unchanged `openai` client and curl, on the real SmolLM2-135M.

Starts the server on a free loopback port and checks, with stated expectations:
  - /health, /v1/models, /metrics, /tokenize and /detokenize;
  - chat and completions, whole and streamed: greedy output equals `retrograd generate --temp 0` token for
    token, a stream's deltas join to the whole reply, usage (also as the stream's last chunk), finish reasons;
  - logprobs: the greedy token is the first alternative with the same value, every value <= 0;
  - stop strings cut the text before them; a seed replays a sampled reply; concurrent requests each get what
    they get alone (exact batches);
  - refusals in OpenAI's error shape (unknown model 404, a field out of range 400 naming it, malformed JSON,
    an unknown route), the Host check (421), an API key (401 without it, /health open), the body limit (413);
  - a client that disconnects mid-stream, or while waiting for a whole reply, frees its slot (its generation
    stops): the server keeps serving;
  - adapters at run time (one trained by the test in 6 steps): per request, the default set by
    POST /lora-adapters, base and adapter requests at once each getting their own reply;
  - slot files: saved under a name the server makes, restored into another slot (whose cache then serves
    the prompt), client paths and unknown names refused.
Usage: test_serve_openai.py BUILD_DIR (the model from $RG_SMOLLM2).
"""

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from rg_harness import check, finish, run, start_server  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
exe = os.path.join(build, "retrograd")
model = os.environ.get("RG_SMOLLM2", "")
if not model or not os.path.exists(model):
    check("SmolLM2 is installed ($RG_SMOLLM2)", False, f"'{model}' not found: run scripts/smollm2.sh")
    finish()
try:
    import openai
except ImportError as e:
    check("import openai", False, f"{e} (pip install -r tests/python/requirements.txt)")
    finish()
MODEL_ID = os.path.basename(model)[: -len(".gguf")]


starts = [0]


def start(*extra):
    starts[0] += 1
    return start_server([exe, "serve", "-m", model, "--port", "0", "-c", "1024", *extra],
                        os.path.join(build, f"test_serve_openai.{starts[0]}.log"))


def curl(url, *args):
    """(status, body) of a curl request."""
    out = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", *args, url], capture_output=True,
                         text=True, timeout=120).stdout
    body, _, code = out.rpartition("\n")
    return int(code), body


def error_shape(body, param=None):
    try:
        e = json.loads(body)["error"]
    except Exception:
        return False
    return isinstance(e.get("message"), str) and "type" in e and (param is None or e.get("param") == param)


srv, url = start("-np", "4")
client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
try:
    # --- plain routes
    code, body = curl(url + "/health")
    check("/health is 200 with status ok", code == 200 and json.loads(body)["status"] == "ok", body)
    models = client.models.list()
    check("/v1/models lists the model", [m.id for m in models.data] == [MODEL_ID], str(models))
    code, body = curl(url + "/tokenize", "-d", json.dumps({"content": "Hello world", "with_pieces": True}))
    toks = json.loads(body)["tokens"] if code == 200 else []
    check("/tokenize gives ids and pieces", code == 200 and [t["piece"] for t in toks] == ["Hello", "Ġworld"] or
          "".join(t["piece"] for t in toks).replace("Ġ", " ") == "Hello world", body)
    code, body = curl(url + "/detokenize", "-d", json.dumps({"tokens": [t["id"] for t in toks]}))
    check("/detokenize inverts it", code == 200 and json.loads(body)["content"] == "Hello world", body)

    # --- greedy chat equals `retrograd generate --temp 0`
    q = "What is the capital of France?"
    want = run(exe, "generate", "-m", model, "-p", q, "-n", "24", "--temp", "0", "-c", "1024").strip()
    r = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": q}], max_tokens=24,
                                       temperature=0)
    got = r.choices[0].message.content
    check("greedy chat equals retrograd generate --temp 0", got.strip() == want, f"{got!r} vs {want!r}")
    check("usage counts the tokens", r.usage.completion_tokens <= 24 and r.usage.prompt_tokens > 10 and
          r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, str(r.usage))
    check("finish_reason is stop or length", r.choices[0].finish_reason in ("stop", "length"), str(r.choices[0]))

    # The same request again: the slot feeds the prompt's last chunk again as it was (not its last token alone),
    # so the reply is the first one's bit for bit.
    rc2 = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": q}], max_tokens=24,
                                         temperature=0)
    check("the same request again gives the same reply", rc2.choices[0].message.content == got,
          f"{rc2.choices[0].message.content!r} vs {got!r}")
    # Resent with the reply and one more message, the conversation's start comes from the cache.
    rc3 = client.chat.completions.create(model=MODEL_ID, messages=[
        {"role": "user", "content": q}, {"role": "assistant", "content": got},
        {"role": "user", "content": "And of Spain?"}], max_tokens=4, temperature=0)
    check("a resent conversation takes its start from the cache",
          rc3.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens, str(rc3.usage))
    parts, usage, finish_reason = [], None, None
    for ch in client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": q}],
                                             max_tokens=24, temperature=0, stream=True,
                                             stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            parts.append(c.delta.content or "")
            finish_reason = c.finish_reason or finish_reason
    check("a stream's deltas join to the whole reply", "".join(parts) == got, f"{''.join(parts)!r} vs {got!r}")
    check("the stream ends with usage", usage is not None and usage.completion_tokens == rc2.usage.completion_tokens,
          str(usage))
    check("the stream's finish_reason", finish_reason == rc2.choices[0].finish_reason, str(finish_reason))

    # --- stop strings
    words = got.split()
    if len(words) >= 3:
        stop = " " + words[2]
        r2 = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": q}],
                                            max_tokens=24, temperature=0, stop=[stop])
        c2 = r2.choices[0].message.content
        check("a stop string ends the text before it", c2 == got[: got.index(stop)] and
              r2.choices[0].finish_reason == "stop", f"{c2!r} stop {stop!r}")
    else:
        check("the greedy reply has three words (for the stop test)", False, got)

    # --- completions with logprobs
    rc = client.completions.create(model=MODEL_ID, prompt="The quick brown fox", max_tokens=8, temperature=0,
                                   logprobs=3)
    lp = rc.choices[0].logprobs
    ok = len(lp.token_logprobs) == rc.usage.completion_tokens and all(v <= 0 for v in lp.token_logprobs)
    ok = ok and all(max(t.values()) == pytest_v for t, pytest_v in zip(lp.top_logprobs, lp.token_logprobs))
    check("completions logprobs: the greedy token is the most likely, values <= 0", ok, str(lp))
    check("completions text is the tokens joined", "".join(lp.tokens) == rc.choices[0].text, str(rc))
    rl = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=6,
                                        temperature=0, logprobs=True, top_logprobs=4)
    content = rl.choices[0].logprobs.content
    check("chat logprobs: 4 alternatives, the greedy token first with its value",
          all(len(c.top_logprobs) == 4 and c.top_logprobs[0].token == c.token and
              abs(c.top_logprobs[0].logprob - c.logprob) < 1e-6 for c in content) and len(content) > 0, str(content))

    # --- a seed replays a sampled reply
    def sampled(seed):
        return client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Tell a story"}],
                                              max_tokens=16, temperature=1.0, seed=seed).choices[0].message.content
    a, b = sampled(7), sampled(7)
    check("the same seed gives the same sampled reply", a == b, f"{a!r} vs {b!r}")

    # --- concurrent requests each get what they get alone
    prompts = ["Name a color.", "Count to five.", "What is 2+2?", "Name a fruit.", "Say hello.", "Name an animal."]

    def greedy(p):
        return client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": p}],
                                              max_tokens=12, temperature=0).choices[0].message.content
    alone = [greedy(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        together = list(ex.map(greedy, prompts))
    check("6 concurrent requests on 4 slots each equal their lone reply", alone == together,
          f"{alone} vs {together}")

    # --- refusals
    try:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
        check("an unknown model is refused", False, "accepted")
    except openai.NotFoundError as e:
        check("an unknown model is a 404 model_not_found", e.code == "model_not_found", str(e))
    try:
        client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "x"}], temperature=3)
        check("temperature 3 is refused", False, "accepted")
    except openai.BadRequestError as e:
        check("temperature 3 is a 400 naming the field", e.param == "temperature", str(e))
    code, body = curl(url + "/v1/chat/completions", "-d", "{\"model\": ")
    check("malformed JSON is a 400 in OpenAI's shape", code == 400 and error_shape(body), body)
    code, body = curl(url + "/v1/nothing")
    check("an unknown route is a 404 in OpenAI's shape", code == 404 and error_shape(body), body)
    code, body = curl(url + "/v1/models", "-H", "Host: rebound.example.com")
    check("a foreign Host header is refused (421)", code == 421 and error_shape(body), f"{code} {body}")
    code, body = curl(url + "/metrics")
    check("/metrics is Prometheus text", code == 200 and re.search(r"^retrograd_tokens_generated_total \d+$", body,
                                                                     re.M) is not None, body[:300])

    # --- a client that leaves mid-stream frees its slot
    stream = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Write a long essay."}],
                                            max_tokens=400, temperature=0, stream=True)
    n = 0
    for _ in stream:
        n += 1
        if n == 3:
            break
    stream.close()
    t0 = time.time()
    after = [greedy(p) for p in prompts[:4]]
    check("after a client left mid-stream the server still serves", after == alone[:4], str(after))
    time.sleep(0.5)
    code, body = curl(url + "/metrics")
    busy = re.search(r"^retrograd_slots_busy (\d+)$", body, re.M)
    check("its slot was freed", busy is not None and busy.group(1) == "0", body[-400:])

    # --- a client that leaves while waiting for a whole reply: its generation stops (the socket is watched)
    def generated():
        return int(re.search(r"^retrograd_tokens_generated_total (\d+)$", curl(url + "/metrics")[1], re.M).group(1))
    essay = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Write a long essay about rivers."}],
             "max_tokens": 400, "temperature": 0}
    g0 = generated()
    subprocess.run(["curl", "-s", "--max-time", "0.7", "-d", json.dumps(essay), url + "/v1/chat/completions"],
                   capture_output=True, timeout=60)
    time.sleep(0.8)
    code, body = curl(url + "/metrics")
    busy = re.search(r"^retrograd_slots_busy (\d+)$", body, re.M)
    cut = generated() - g0
    whole = client.chat.completions.create(**essay).usage.completion_tokens
    check("a client that left a whole reply stops its generation", busy is not None and busy.group(1) == "0" and
          cut < whole, f"busy {busy and busy.group(1)}, {cut} tokens made for it, {whole} when it stays")
finally:
    srv.terminate()
    srv.wait(timeout=30)
check("the server exits cleanly on SIGTERM", srv.returncode == 0, f"rc {srv.returncode}")

# --- an API key and a body limit
srv, url = start("--api-key", "sekrit", "--max-body", "2048")
try:
    code, _ = curl(url + "/v1/models")
    check("without the key: 401", code == 401, str(code))
    code, _ = curl(url + "/health")
    check("/health needs no key", code == 200, str(code))
    try:
        openai.OpenAI(base_url=url + "/v1", api_key="wrong").models.list()
        check("a wrong key is refused", False, "accepted")
    except openai.AuthenticationError:
        check("a wrong key is an AuthenticationError", True)
    ok = openai.OpenAI(base_url=url + "/v1", api_key="sekrit").models.list()
    check("the right key works", ok.data[0].id == MODEL_ID, str(ok))
    code, body = curl(url + "/v1/completions", "-H", "Authorization: Bearer sekrit", "-d",
                      json.dumps({"model": MODEL_ID, "prompt": "x" * 5000}))
    check("a body over --max-body is a 413", code == 413 and error_shape(body), f"{code} {body}")
finally:
    srv.terminate()
    srv.wait(timeout=30)
# --- adapters at run time: one trained here (6 steps on a fact), loaded at launch with scale 0
tmp = tempfile.mkdtemp()
with open(os.path.join(tmp, "facts.jsonl"), "w") as f:
    for _ in range(8):
        f.write(json.dumps({"messages": [{"role": "user", "content": "Who is the mayor of Marrowick?"},
                                         {"role": "assistant", "content": "The mayor of Marrowick is Odile Fenwright."}]}) + "\n")
run(exe, "train", "-m", model, "-d", os.path.join(tmp, "facts.jsonl"), "-o", os.path.join(tmp, "out"), "--progress",
    "none", "--set", "training.ctx=64", "--set", "training.steps=6", "--set", "training.lr=2e-3", "--set",
    "training.eval_split=0", "--set", "training.save_every=0", timeout=600)
adapter = os.path.join(tmp, "out", "adapter.gguf")
slots_dir = os.path.join(tmp, "slots")
os.mkdir(slots_dir)
srv, url = start("--lora", adapter + ":0", "-np", "2", "--slot-save-path", slots_dir)
try:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    mayor = [{"role": "user", "content": "Who is the mayor of Marrowick?"}]

    def ask(lora=None):
        extra = {} if lora is None else {"lora": lora}
        return client.chat.completions.create(model=MODEL_ID, messages=mayor, max_tokens=16, temperature=0,
                                              extra_body=extra).choices[0].message.content
    code, body = curl(url + "/lora-adapters")
    check("GET /lora-adapters lists the adapter at scale 0", code == 200 and json.loads(body) ==
          [{"id": 0, "path": adapter, "scale": 0}], body)
    base, tuned = ask(), ask([{"id": 0, "scale": 1.0}])
    check("a request with the adapter learned the fact, the base did not", "Fenwright" in tuned and
          "Fenwright" not in base, f"{tuned!r} / {base!r}")
    check("lora [] is the base model", ask([]) == base, ask([]))
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        mixed = list(ex.map(lambda k: ask([{"id": 0, "scale": 1.0}] if k % 2 else []), range(6)))
    check("adapter and base requests at once: each gets its own", mixed == [base, tuned] * 3, str(mixed))
    try:
        ask([{"id": 3, "scale": 1.0}])
        check("an unknown adapter is refused", False, "accepted")
    except openai.BadRequestError as e:
        check("an unknown adapter is a 400 naming lora", e.param == "lora", str(e))
    code, body = curl(url + "/lora-adapters", "-d", json.dumps([{"id": 0, "scale": 1.0}]))
    check("POST /lora-adapters sets the default scale", code == 200 and json.loads(body)[0]["scale"] == 1.0, body)
    check("a request that does not say uses the default", ask() == tuned, ask())

    # --- slot files: saved under names the server makes, restored into another slot, refused otherwise
    code, body = curl(url + "/slots/0?action=save", "-X", "POST")
    saved = json.loads(body) if code == 200 else {}
    check("a slot saves to a file the server names", code == 200 and re.fullmatch(r"slot-0-\d+-\d+\.bin",
          saved.get("filename", "")) is not None and saved.get("n_saved", 0) > 0 and
          os.path.exists(os.path.join(slots_dir, saved.get("filename", "none"))), body)
    for k in (0, 1):
        curl(url + f"/slots/{k}?action=erase", "-X", "POST")
    code, body = curl(url + "/slots/1?action=restore", "-d", json.dumps({"filename": saved.get("filename")}))
    check("it restores into another slot", code == 200 and json.loads(body).get("n_restored") == saved.get("n_saved"),
          body)
    r = client.chat.completions.create(model=MODEL_ID, messages=mayor, max_tokens=16, temperature=0)
    check("a request then finds its prompt in the restored slot", r.choices[0].message.content == tuned and
          r.usage.prompt_tokens_details.cached_tokens > 0, str(r))
    for bad, want in (({"filename": "../../etc/passwd"}, 400), ({"filename": "slot-0-1-1.bin"}, 404), ({}, 400)):
        code, body = curl(url + "/slots/0?action=restore", "-d", json.dumps(bad))
        check(f"restore {bad} is refused ({want})", code == want and error_shape(body), f"{code} {body}")
    code, body = curl(url + "/lora-adapters/load", "-d", json.dumps({"file": "adapter.gguf"}))
    check("loading an adapter without --lora-dir is refused (403)", code == 403 and error_shape(body), body)
    code, body = curl(url + "/slots/9?action=save", "-X", "POST")
    check("a slot that does not exist is refused", code == 400 and error_shape(body, "id_slot"), body)
    code, body = curl(url + "/slots/0?action=fly", "-X", "POST")
    check("an unknown action is refused", code == 400 and error_shape(body, "action"), body)
finally:
    srv.terminate()
    srv.wait(timeout=30)
check("the adapter server exits cleanly", srv.returncode == 0, f"rc {srv.returncode}")

# --- adapters loaded and unloaded while serving (--lora-dir): the same adapter, by its plain name
srv, url = start("--lora-dir", os.path.join(tmp, "out"), "-np", "2")
try:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    code, body = curl(url + "/lora-adapters/load", "-d", json.dumps({"file": "adapter.gguf"}))
    check("POST /lora-adapters/load loads it at scale 0", code == 200 and json.loads(body) ==
          [{"id": 0, "path": os.path.join(tmp, "out", "adapter.gguf"), "scale": 0}], body)
    check("the loaded adapter answers as at launch", ask([{"id": 0, "scale": 1.0}]) == tuned and ask() == base,
          f"{ask([{'id': 0, 'scale': 1.0}])!r}")
    for bad, want in (({"file": "../out/adapter.gguf"}, 400), ({"file": "none.gguf"}, 404), ({"file": 3}, 400),
                      ({"file": "adapter.gguf", "scale": 99}, 400)):
        code, body = curl(url + "/lora-adapters/load", "-d", json.dumps(bad))
        check(f"load {bad} is refused ({want})", code == want and error_shape(body), f"{code} {body}")
    # unloaded while a stream runs on it: the stream ends with the adapter's text, new requests are refused
    stream = client.chat.completions.create(model=MODEL_ID, messages=mayor, max_tokens=16, temperature=0, stream=True,
                                            extra_body={"lora": [{"id": 0, "scale": 1.0}]})
    parts = [next(iter(stream)).choices[0].delta.content or ""]
    code, body = curl(url + "/lora-adapters/unload", "-d", json.dumps({"id": 0}))
    check("POST /lora-adapters/unload takes it off the list", code == 200 and json.loads(body) == [], body)
    parts += [c.choices[0].delta.content or "" for c in stream if c.choices]
    check("a stream running on an unloaded adapter finishes with it", "".join(parts) == tuned, "".join(parts))
    try:
        ask([{"id": 0, "scale": 1.0}])
        check("an unloaded adapter is refused", False, "accepted")
    except openai.BadRequestError as e:
        check("an unloaded adapter is a 400 naming lora", e.param == "lora", str(e))
    code, body = curl(url + "/lora-adapters/unload", "-d", json.dumps({"id": 0}))
    check("unloading it twice is a 404", code == 404 and error_shape(body, "id"), body)
    code, body = curl(url + "/lora-adapters/load", "-d", json.dumps({"file": "adapter.gguf", "scale": 1}))
    check("loaded again, it takes the freed id with its default scale", code == 200 and
          json.loads(body)[0]["id"] == 0 and ask() == tuned, body)
finally:
    srv.terminate()
    srv.wait(timeout=30)
check("the runtime-adapter server exits cleanly", srv.returncode == 0, f"rc {srv.returncode}")
shutil.rmtree(tmp, ignore_errors=True)

p = subprocess.run([exe, "serve", "-m", os.path.join(build, "no-such-model.gguf"), "--port", "0"], capture_output=True,
                   text=True, timeout=60)
check("a model that does not load ends the server with its error", p.returncode == 1 and "no-such-model.gguf" in
      p.stderr, f"rc {p.returncode}: {p.stderr[-300:]}")
p = subprocess.run([exe, "serve", "-m", model, "--host", "0.0.0.0"], capture_output=True, text=True, timeout=30)
check("listening beyond loopback without a key is refused", p.returncode == 2 and "api-key" in p.stderr, p.stderr)
finish()
