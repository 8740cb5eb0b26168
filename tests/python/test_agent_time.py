"""retrograd agent against the real mcp-server-time, with SmolLM2 taught to call it.

The test writes a small JSONL of tool-calling chats in OpenAI's fine-tuning format (a system prompt; tools =
get_current_time from the server's own tools/list, as the agent offers it; users asking the time in many cities and phrasings; the
assistant calling get_current_time with the city's IANA zone; a tool message in mcp-server-time's exact result
shape; the assistant stating the HH:MM of the result), trains a LoRA adapter on it with `retrograd train`, then
runs

    retrograd agent -m MODEL --lora adapter.gguf --tools tools.yaml -p "What time is it in Tokyo?" --temp 0 --json
                    --keep kept.jsonl

against `python3 -m mcp_server_time` and checks: get_current_time was called with {"timezone": "Asia/Tokyo"},
the answer holds the HH:MM of the datetime the tool returned, the conversation was kept as one line whose
messages are system, user, assistant with tool_calls, tool, assistant, and `retrograd train` takes kept.jsonl
as it is (a 1-step run). Then the exact rewind: a tools file whose get_current_time is a command that fails; the
turn ends without an answer, and the next turn's prompt reuses exactly the conversation before the failed call.
Last, the same loop behind `retrograd serve --agent tools.yaml` (the adapter at scale 1), through the unchanged
openai client: the server calls the tool and replies with its time; "agent": false and a request with tools of
its own are ordinary chat completions.

Usage: test_agent_time.py BUILD_DIR (the model from $RG_SMOLLM2; mcp-server-time from requirements.txt).
"""

import json
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rg_harness import check, finish, run, start_server  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
exe = os.path.join(build, "retrograd")
model = os.environ.get("RG_SMOLLM2", "")
if not model or not os.path.exists(model):
    check("SmolLM2 is installed ($RG_SMOLLM2)", False, f"'{model}' not found: run scripts/smollm2.sh")
    finish()
if subprocess.run([sys.executable, "-m", "mcp_server_time", "--help"], capture_output=True).returncode != 0:
    check("mcp-server-time is installed", False, "pip install -r tests/python/requirements.txt")
    finish()

SYSTEM = "Tell the time with get_current_time."
SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def server_tools():
    """get_current_time of the server's tools/list as the agent offers it (tools.yaml names it alone; the OpenAI
    entry of rg_mcp_tools_write_openai: name, description, inputSchema)."""
    p = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def rpc(msg):
        p.stdin.write(json.dumps(msg) + "\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline()) if "id" in msg else None

    rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
         "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
    rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
    tools = rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]
    p.stdin.close()
    p.wait()
    return [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                              "parameters": t.get("inputSchema", {"type": "object"})}}
            for t in tools if t["name"] == "get_current_time"]


CITIES = [("Paris", "Europe/Paris", 1), ("London", "Europe/London", 0), ("New York", "America/New_York", -5),
          ("Sydney", "Australia/Sydney", 11), ("Berlin", "Europe/Berlin", 1), ("Tokyo", "Asia/Tokyo", 9),
          ("Chicago", "America/Chicago", -6), ("Seoul", "Asia/Seoul", 9), ("Dubai", "Asia/Dubai", 4),
          ("Moscow", "Europe/Moscow", 3), ("Madrid", "Europe/Madrid", 1), ("Toronto", "America/Toronto", -5),
          ("Singapore", "Asia/Singapore", 8), ("Cairo", "Africa/Cairo", 2), ("Lima", "America/Lima", -5),
          ("Denver", "America/Denver", -7)]
PHRASES = ["What time is it in {c}?", "What's the time in {c}?", "Tell me the current time in {c}.",
           "Current time in {c}, please.", "what time is it in {c} right now?", "Do you know the time in {c}?"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def chat(rng, tools, city, zone, offset, phrase):
    h, m, s = rng.randrange(24), rng.randrange(60), rng.randrange(60)
    when = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T{h:02d}:{m:02d}:{s:02d}{offset:+03d}:00"
    result = json.dumps({"timezone": zone, "datetime": when, "day_of_week": rng.choice(DAYS), "is_dst": False},
                        indent=2)
    call = {"id": "call_0", "type": "function",
            "function": {"name": "get_current_time", "arguments": json.dumps({"timezone": zone})}}
    return {"tools": tools, "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": phrase.format(c=city)},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": result},
        {"role": "assistant", "content": f"It is {h:02d}:{m:02d} in {city}."}]}


tmp = tempfile.mkdtemp()
tools = server_tools()
check("mcp-server-time lists get_current_time", any(t["function"]["name"] == "get_current_time" for t in tools),
      json.dumps(tools)[:300])
rng = random.Random(7)
data = os.path.join(tmp, "time_chats.jsonl")
n_lines = 0
with open(data, "w") as f:
    for city, zone, offset in CITIES:
        for phrase in PHRASES:
            if city == "Tokyo" and phrase == PHRASES[0]:
                continue  # the question the agent is asked is not in the data
            f.write(json.dumps(chat(rng, tools, city, zone, offset, phrase)) + "\n")
            n_lines += 1

steps = os.environ.get("RG_AGENT_TRAIN_STEPS", "10")
out = os.path.join(tmp, "out")
try:
    run(exe, "train", "-m", model, "-d", data, "-o", out, "--progress", "none",
        "--set", "training.ctx=1024", "--set", f"training.steps={steps}", "--set", "training.lr=2e-3",
        "--set", "training.eval_split=0", "--set", "training.save_every=0", "--set", "data.pack=false",
        "--set", "lora.rank=8", "--set", "lora.alpha=16", timeout=900)
    trained = True
except (RuntimeError, subprocess.TimeoutExpired) as e:
    trained = False
    check("retrograd train takes the tool-calling chats", False, str(e)[-600:])
adapter = os.path.join(out, "adapter.gguf")
if trained:
    check(f"retrograd train takes the tool-calling chats ({n_lines} lines, {steps} steps)", os.path.exists(adapter))

tools_yaml = os.path.join(tmp, "tools.yaml")
with open(tools_yaml, "w") as f:
    f.write("mcp:\n  - name: time\n    command: [" + ", ".join(json.dumps(a) for a in SERVER) + "]\n"
            "    tools: [get_current_time]\n")


def agent(tools_file, *extra, stdin=None):
    args = [exe, "agent", "-m", model, "--tools", tools_file, "--system", SYSTEM, "--temp", "0", "--json",
            "-c", "2048", "-n", "96"]
    if os.path.exists(adapter):
        args += ["--lora", adapter]
    return subprocess.run(args + list(extra), capture_output=True, text=True, timeout=600, input=stdin)


# --- the Tokyo question against the real server
kept = os.path.join(tmp, "kept.jsonl")
p = agent(tools_yaml, "-p", "What time is it in Tokyo?", "--keep", kept)
print("agent stdout:", p.stdout.strip())
print("agent stderr:", p.stderr.strip()[-800:])
try:
    rec = json.loads(p.stdout.strip().splitlines()[-1])
except (ValueError, IndexError):
    rec = None
check("retrograd agent answers with a JSON record (exit 0)", p.returncode == 0 and rec is not None,
      f"exit {p.returncode}: {p.stderr[-400:]}")
rec = rec or {"calls": [], "answer": "", "generations": []}
calls = rec["calls"]
call_ok = len(calls) >= 1 and calls[0]["name"] == "get_current_time" and \
    json.loads(calls[0]["arguments"]) == {"timezone": "Asia/Tokyo"}
check("the model called get_current_time with Asia/Tokyo", call_ok, json.dumps(calls)[:400])
hhmm = None
if calls and calls[0].get("result"):
    try:
        res = json.loads(calls[0]["result"])
        hhmm = re.match(r"\d{4}-\d\d-\d\dT(\d\d:\d\d)", res["datetime"]).group(1)
        check("the tool's result is mcp-server-time's (Asia/Tokyo, a datetime)", res["timezone"] == "Asia/Tokyo")
    except (ValueError, KeyError, AttributeError) as e:
        check("the tool's result is mcp-server-time's (Asia/Tokyo, a datetime)", False, f"{e}: {calls[0]['result']}")
check(f"the answer states the tool's time ({hhmm})", hhmm is not None and hhmm in rec["answer"],
      f"answer {rec['answer']!r}")
gens = rec["generations"]
check("the second generation reused the first prompt's tokens (the engine's prefix cache)",
      len(gens) == 2 and gens[1]["reused_tokens"] >= gens[0]["prompt_tokens"], json.dumps(gens))

# --- the kept conversation: one line, OpenAI's shape, and retrograd train takes it as it is
lines = open(kept).read().splitlines() if os.path.exists(kept) else []
roles = [m["role"] for m in json.loads(lines[0])["messages"]] if len(lines) == 1 else []
check("--keep wrote one line: system, user, assistant (tool_calls), tool, assistant",
      roles == ["system", "user", "assistant", "tool", "assistant"], f"{len(lines)} lines, roles {roles}")
if len(lines) == 1:
    k = json.loads(lines[0])
    check("the kept line has the tools and the call's id in both messages",
          k["tools"] == tools and k["messages"][2]["tool_calls"][0]["id"] == k["messages"][3]["tool_call_id"],
          lines[0][:300])
try:
    run(exe, "train", "-m", model, "-d", kept, "-o", os.path.join(tmp, "out_kept"), "--progress", "none",
        "--set", "training.ctx=1024", "--set", "training.steps=1", "--set", "training.eval_split=0",
        "--set", "training.save_every=0", "--set", "data.pack=false", timeout=600)
    check("retrograd train takes kept.jsonl as it is (1 step)", True)
except (RuntimeError, subprocess.TimeoutExpired) as e:
    check("retrograd train takes kept.jsonl as it is (1 step)", False, str(e)[-600:])

# --- a failed call and the exact rewind: get_current_time as a command that fails
broken = os.path.join(tmp, "broken.yaml")
with open(broken, "w") as f:
    f.write("commands:\n  - name: get_current_time\n    description: Get current time in a specific timezone\n"
            "    argv: [sh, -c, \"echo no clock here >&2; exit 1\", sh, \"{timezone}\"]\n"
            "    parameters: {type: object, properties: {timezone: {type: string}}, required: [timezone]}\n")
p = agent(broken, stdin="What time is it in Tokyo?\nThanks anyway.\n")
recs = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
check("interactive: two turns, two JSON records", len(recs) == 2, p.stdout[-400:] + p.stderr[-400:])
if len(recs) == 2 and recs[0]["end"] == "failed":
    check("the failed call ends the turn without an answer, naming the tool",
          "tool 'get_current_time'" in (recs[0]["failure"] or "") and recs[0]["answer"] == "", json.dumps(recs[0]))
    # turn 1's only prompt was [system, user] + the generation prompt "<|im_start|>assistant\n"; after the cut-back,
    # turn 2's prompt is [system, user, user]. The slot held turn 1's prompt and the failed call's tokens: it must
    # reuse exactly the conversation before the call, plus the "<|im_start|>" both prompts have next, no more
    gen_prompt = int(run(exe, "tokenize", "-m", model, "-p", "<|im_start|>assistant\n", "--count").split()[0])
    first, second = recs[0]["generations"][0], recs[1]["generations"][0]
    before = first["prompt_tokens"] - gen_prompt
    check(f"after the failed call the next prompt reuses exactly the conversation before it ({before} + 1 tokens)",
          second["reused_tokens"] == before + 1, f"turn 1 {first}, turn 2 {second}, generation prompt {gen_prompt}")
else:
    check("the broken tool's call fails the turn", False, json.dumps(recs)[:600])


# --- the same loop behind `retrograd serve --agent`: the unchanged openai client asks, the server calls the tool
try:
    import openai
    srv, url = start_server([exe, "serve", "-m", model, "--port", "0", "-c", "2048", "--agent", tools_yaml,
                             *(["--lora", adapter + ":1"] if os.path.exists(adapter) else [])],
                            os.path.join(build, "test_agent_time.serve.log"), timeout=120)
except (ImportError, RuntimeError) as e:
    srv = None
    check("retrograd serve --agent starts", False, str(e)[-600:])
if srv:
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
        model_id = client.models.list().data[0].id
        ask = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What time is it in Tokyo?"}]
        r = client.chat.completions.create(model=model_id, messages=ask, temperature=0, max_tokens=96)
        ag = (r.model_extra or {}).get("retrograd_agent") or {}
        calls = ag.get("calls", [])
        ok = len(calls) == 1 and calls[0]["name"] == "get_current_time" and \
            json.loads(calls[0]["arguments"]) == {"timezone": "Asia/Tokyo"} and calls[0].get("result")
        check("serve --agent: the server called get_current_time with Asia/Tokyo", bool(ok), json.dumps(ag)[:500])
        hhmm = re.search(r"T(\d\d:\d\d)", calls[0]["result"]).group(1) if ok else None
        check(f"serve --agent: the reply states the tool's time ({hhmm})", hhmm is not None and
              hhmm in (r.choices[0].message.content or "") and r.choices[0].finish_reason == "stop",
              repr(r.choices[0].message.content))
        roles = [m["role"] for m in ag.get("messages", [])]
        check("serve --agent: the turn's added messages are the call and its result", roles == ["assistant", "tool"],
              str(roles))
        check("serve --agent: usage counts both generations, the second reusing the first's prompt",
              r.usage.prompt_tokens > 0 and r.usage.prompt_tokens_details.cached_tokens > 0, str(r.usage))
        plain = client.chat.completions.create(model=model_id, messages=ask, temperature=0, max_tokens=96,
                                               extra_body={"agent": False})
        check("\"agent\": false is an ordinary chat completion (no tool run)",
              "retrograd_agent" not in (plain.model_extra or {}), str(plain)[:300])
        own = client.chat.completions.create(model=model_id, messages=ask, temperature=0, max_tokens=96,
                                             tools=tools)
        check("a request with tools of its own gets the calls back to run itself",
              "retrograd_agent" not in (own.model_extra or {}) and own.choices[0].finish_reason == "tool_calls",
              str(own)[:400])
        try:
            client.chat.completions.create(model=model_id, messages=ask[:1], temperature=0)
            check("serve --agent: a conversation not ending with a user message is refused", False, "accepted")
        except openai.BadRequestError as e:
            check("serve --agent: a conversation not ending with a user message is a 400 naming messages",
                  e.param == "messages", str(e))
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    check("serve --agent exits cleanly (its MCP server ended)", srv.returncode == 0, f"rc {srv.returncode}")
finish()
