"""Tool lists, tool calls and tool results rendered by retrograd (src/text/chat.c) against the
real templates rendered by jinja2 the way transformers' apply_chat_template does: trim_blocks,
lstrip_blocks, loopcontrols, and a `tojson` that is json.dumps(x, ensure_ascii=False).

    python3 tests/python/test_chat_tools_reference.py [BUILD_DIR]

The templates are tests/data/templates/qwen2.5-instruct.jinja (Hermes tools and calls) and
lfm2.jinja. Each conversation goes to `BUILD_DIR/test_tool_calls --render` in OpenAI's form
(arguments as JSON text) and to jinja2 as a server hands it to transformers (arguments parsed).
LFM2's template has no tool_calls branch, so for it the calls are written into the assistant
content here, as Python calls (what the model generates and what chat.h documents).
"""

import json
import os
import subprocess
import sys

from rg_harness import check, finish

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"

try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError as e:  # pragma: no cover - environment problem, reported plainly
    print(f"FAIL import jinja2: {e} (pip install -r tests/python/requirements.txt)")
    print("0 passed, 1 failed")
    sys.exit(1)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def jinja_render(template, messages, tools, bos):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    return env.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                            bos_token=bos, eos_token="")


def py_literal(v):
    if v is True:
        return "True"
    if v is False:
        return "False"
    if v is None:
        return "None"
    if isinstance(v, list):
        return "[" + ", ".join(py_literal(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(json.dumps(k, ensure_ascii=False) + ": " + py_literal(x) for k, x in v.items()) + "}"
    return json.dumps(v, ensure_ascii=False)


def lfm2_calls(calls):
    items = []
    for c in calls:
        args = json.loads(c["function"]["arguments"])
        items.append(c["function"]["name"] + "(" + ", ".join(f"{k}={py_literal(v)}" for k, v in args.items()) + ")")
    return "<|tool_call_start|>[" + ", ".join(items) + "]<|tool_call_end|>"


def for_jinja(messages, family):
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            if family == "lfm2":
                m["content"] = lfm2_calls(m.pop("tool_calls")) + (m.get("content") or "")
            else:
                m["tool_calls"] = [{**c, "function": {**c["function"],
                                                      "arguments": json.loads(c["function"]["arguments"])}}
                                   for c in m["tool_calls"]]
        out.append(m)
    return out


def ours(template, messages, tools, bos):
    req = {"template": template, "bos": bos, "add_generation_prompt": True, "messages": messages}
    if tools is not None:
        req["tools"] = tools
    p = subprocess.run([os.path.join(BUILD, "test_tool_calls"), "--render"], input=json.dumps(req).encode(),
                       capture_output=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.decode(errors="replace"))
    return p.stdout.decode()


def call(i, name, args_text):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args_text}}


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city \u2014 \"quoted\", back\\slash, tab\t, caf\u00e9 \u4e2d \U0001F600",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Z\u00fcrich", "Paris"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 1.5e1}},
                   "required": ["city"]}}}
NOW = {"type": "function", "function": {"name": "now", "description": "", "parameters": {}}}
TOOLS = [WEATHER, NOW]

CALLS = [call(1, "get_weather", '{"city": "Z\\u00fcrich", "days": 2, "note": "say \\"hi\\"\\n\\u0001",'
                                ' "ratio": 1.50, "big": 12345678901234567890, "e": 1e16, "flags": [true, false, null]}'),
         call(2, "now", "{}")]

CONVERSATIONS = {
    "tools, no system": ([{"role": "user", "content": "Weather in Z\u00fcrich?"}], TOOLS),
    "tools and system": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], TOOLS),
    "tools, empty system": ([{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}], TOOLS),
    "calls and results": ([
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "Weather in Z\u00fcrich, and the time?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temp": 21, "sky": "sunny"}'},
        {"role": "tool", "tool_call_id": "call_2", "name": "now", "content": "12:00"},
        {"role": "assistant", "content": "Sunny, 21 degrees; it is noon."},
        {"role": "user", "content": "Thanks"}], TOOLS),
    "calls without content": ([
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": "", "tool_calls": [call(3, "now", "{}")]},
        {"role": "tool", "content": "12:00"}], [NOW]),
    "results without tools": ([
        {"role": "user", "content": "x"}, {"role": "tool", "content": "y"}, {"role": "assistant", "content": "z"}],
        None),
}

TEMPLATES = [("qwen2.5-instruct.jinja", "chatml", ""), ("lfm2.jinja", "lfm2", "<|startoftext|>")]

for file, family, bos in TEMPLATES:
    with open(os.path.join(ROOT, "tests", "data", "templates", file), encoding="utf-8") as f:
        template = f.read()
    for name, (messages, tools) in CONVERSATIONS.items():
        label = f"{file}: {name}"
        try:
            want = jinja_render(template, for_jinja(messages, family), tools, bos)
            got = ours(template, messages, tools, bos)
        except Exception as e:  # a failed render is a failed check, with its reason
            check(label, False, str(e))
            continue
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        check(label, got == want, f"differs at character {at}: ours {got[at:at + 80]!r}, jinja2 {want[at:at + 80]!r}")

finish()
