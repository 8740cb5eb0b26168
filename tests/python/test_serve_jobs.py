"""Fine-tuning jobs in `retrograd serve` through the unchanged `openai` client, on the real SmolLM2-135M.

Checks, with stated expectations:
  - files: a good JSONL file is stored (file object in OpenAI's shape); a file with a bad line is a 400 naming
    the line; a purpose other than fine-tune is a 400 naming purpose; list, retrieve, content, delete; an
    unknown id is a 404; an upload over --max-upload is a 413;
  - jobs: an unknown model (404 model_not_found) and an unknown file (400 naming training_file or
    validation_file) are refused; a 6-step LoRA job runs to succeeded, its events hold the steps ("Step N/6:
    training loss=...", with "validation loss=..." at the steps that measured its validation_file), its
    checkpoints are listed with train_loss and valid_loss, its fine_tuned_model ft:BASE:SUFFIX:JOB is in /v1/models at once and
    answers with the adapter's reply (equal to `retrograd generate --lora OUTDIR/adapter.gguf --temp 0`) while
    the base model gives the base reply;
  - a long job cancelled while it runs ends cancelled, the checkpoints it wrote stay listed and the server
    still answers; a job cancelled after its training ended, before its adapter is served, ends cancelled and
    its adapter is not served; a job train refuses (a setting out of range; method full on a quantized model) ends failed
    with train's own message; list with limit/after;
  - a training process killed mid-run fails its job ("killed by signal 9") and the server goes on serving;
  - a server killed while a job runs takes the training process with it, and a restart on the same --files-dir
    lists every job and file again (that job failed "server_restarted") and serves the fine-tuned model again.
Usage: test_serve_jobs.py BUILD_DIR (the model from $RG_SMOLLM2).
"""

import json
import os
import re
import shutil
import signal
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
# Each LoRA job waits this long between its training's end and serving its adapter (a test hook): the window
# the late cancel below lands in.
SERVE_DELAY_MS = 2000
os.environ["RG_TEST_JOB_SERVE_DELAY_MS"] = str(SERVE_DELAY_MS)
tmp = tempfile.mkdtemp()
files_dir = os.path.join(tmp, "files")
starts = [0]


def start():
    starts[0] += 1
    return start_server([exe, "serve", "-m", model, "--port", "0", "-c", "512", "-np", "2", "--files-dir", files_dir,
                         "--max-upload", "65536"], os.path.join(build, f"test_serve_jobs.{starts[0]}.log"))


def write(name, lines):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def wait_job(client, job_id, until, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        j = client.fine_tuning.jobs.retrieve(job_id)
        if j.status in until:
            return j
        time.sleep(0.5)
    return client.fine_tuning.jobs.retrieve(job_id)


def wait_pid(client, job_id, timeout=120):
    """The training process's pid, from the job's "started (pid N" event, once it has logged a step."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        msgs = [e.message for e in client.fine_tuning.jobs.list_events(job_id, limit=100).data]
        m = [re.search(r"started \(pid (\d+)", x) for x in msgs]
        if any(x.startswith("Step") for x in msgs) and any(m):
            return int(next(x for x in m if x).group(1))
        time.sleep(0.3)
    return None


mayor = {"messages": [{"role": "user", "content": "Who is the mayor of Marrowick?"},
                      {"role": "assistant", "content": "The mayor of Marrowick is Odile Fenwright."}]}
good = write("facts.jsonl", [mayor] * 8)
bad = write("bad.jsonl", [mayor, '{"messages": [{"role": "user", "content": 3}]}', mayor])
notjson = write("notjson.jsonl", [mayor, "this is not json"])
big = write("big.jsonl", [mayor] * 1000)  # over --max-upload 65536
ask = [{"role": "user", "content": "Who is the mayor of Marrowick?"}]
TRAIN = {"steps": 6, "ctx": 64, "lr": 2e-3, "eval_split": 0, "save_every": 3}

srv, url = start()
client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
ft_model = None
try:
    # --- files
    f = client.files.create(file=open(good, "rb"), purpose="fine-tune")
    check("a good file is stored as a file object", f.id.startswith("file-") and f.object == "file" and
          f.bytes == os.path.getsize(good) and f.filename == "facts.jsonl" and f.purpose == "fine-tune" and
          f.status == "processed", str(f))
    for path, line, what in ((bad, 2, "a content that is not a string"), (notjson, 2, "a line that is not JSON")):
        try:
            client.files.create(file=open(path, "rb"), purpose="fine-tune")
            check(f"a file with {what} is refused", False, "accepted")
        except openai.BadRequestError as e:
            check(f"a file with {what} is a 400 naming line {line}", f"line {line}" in e.message and
                  e.param == "file", e.message)
    try:
        client.files.create(file=open(good, "rb"), purpose="assistants")
        check("purpose assistants is refused", False, "accepted")
    except openai.BadRequestError as e:
        check("purpose assistants is a 400 naming purpose", e.param == "purpose", str(e))
    try:
        client.files.create(file=open(big, "rb"), purpose="fine-tune")
        check("a file over --max-upload is refused", False, "accepted")
    except openai.APIStatusError as e:
        check("a file over --max-upload is a 413", e.status_code == 413, str(e))
    ids = [x.id for x in client.files.list().data]
    check("the list holds the good file only", ids == [f.id], str(ids))
    check("retrieve gives the object", client.files.retrieve(f.id).bytes == f.bytes, "")
    check("content gives the bytes back", client.files.content(f.id).read() == open(good, "rb").read(), "")
    f2 = client.files.create(file=open(good, "rb"), purpose="fine-tune")
    ids = [x.id for x in client.files.list().data]
    check("the list is newest first", ids == [f2.id, f.id], str(ids))
    d = client.files.delete(f2.id)
    check("delete answers deleted", d.deleted and d.id == f2.id, str(d))
    try:
        client.files.retrieve(f2.id)
        check("a deleted file is gone", False, "still there")
    except openai.NotFoundError:
        check("a deleted file is a 404", True)
    try:
        client.files.retrieve("file-../../etc")
        check("a made-up id is refused", False, "accepted")
    except openai.NotFoundError:
        check("a made-up id is a 404", True)

    # --- refusals of jobs
    try:
        client.fine_tuning.jobs.create(model="gpt-4o", training_file=f.id)
        check("an unknown model is refused", False, "accepted")
    except openai.NotFoundError as e:
        check("an unknown model is a 404 model_not_found", e.code == "model_not_found", str(e))
    try:
        client.fine_tuning.jobs.create(model=MODEL_ID, training_file="file-0000000000000000")
        check("an unknown file is refused", False, "accepted")
    except openai.BadRequestError as e:
        check("an unknown file is a 400 naming training_file", e.param == "training_file", str(e))
    try:
        client.fine_tuning.jobs.create(model=MODEL_ID, training_file=f.id, suffix="no spaces please")
        check("a bad suffix is refused", False, "accepted")
    except openai.BadRequestError as e:
        check("a bad suffix is a 400 naming suffix", e.param == "suffix", str(e))

    try:
        client.fine_tuning.jobs.create(model=MODEL_ID, training_file=f.id, validation_file="file-0000000000000000")
        check("an unknown validation file is refused", False, "accepted")
    except openai.BadRequestError as e:
        check("an unknown validation file is a 400 naming validation_file", e.param == "validation_file", str(e))

    # --- a 6-step LoRA job, its validation file measured every 3 steps
    job = client.fine_tuning.jobs.create(model=MODEL_ID, training_file=f.id, validation_file=f.id, suffix="mayor",
                                         seed=7, hyperparameters={"n_epochs": 1},
                                         extra_body={"retrograd": dict(TRAIN, eval_every=3)})
    check("a job is created queued", job.id.startswith("ftjob-") and job.object == "fine_tuning.job" and
          job.status in ("validating_files", "queued", "running") and job.seed == 7, str(job))
    job = wait_job(client, job.id, ("succeeded", "failed", "cancelled"))
    check("the job succeeds", job.status == "succeeded", f"{job.status} {job.error}")
    ft_model = job.fine_tuned_model
    check("fine_tuned_model is ft:BASE:SUFFIX:JOB", ft_model == f"ft:{MODEL_ID}:mayor:{job.id}", str(ft_model))
    check("trained_tokens counts the tokens", (job.trained_tokens or 0) > 0, str(job.trained_tokens))
    events = client.fine_tuning.jobs.list_events(job.id, limit=100).data
    msgs = [e.message for e in events]
    check("the events hold every step", all(any(m.startswith(f"Step {k}/6: training loss=") for m in msgs)
                                            for k in range(1, 7)), str(msgs))
    check("the events are newest first, ending with success", "successfully completed" in msgs[0], str(msgs[:3]))
    check("steps 3 and 6 measured the validation file", all(any(re.match(rf"Step {k}/6: training loss=[0-9.]+, "
                                                                         r"validation loss=[0-9.]+$", m) for m in msgs)
                                                              for k in (3, 6)), str(msgs))
    ck = client.fine_tuning.jobs.checkpoints.list(job.id).data
    check("the checkpoints are listed with their training and validation loss", [c.step_number for c in ck] == [6, 3]
          and all(c.metrics.train_loss is not None and c.metrics.valid_loss is not None for c in ck) and
          ck[0].fine_tuning_job_id == job.id, str(ck))
    check("the job names its validation file", job.validation_file == f.id, str(job.validation_file))
    models = [m.id for m in client.models.list().data]
    check("the fine-tuned model is in /v1/models", ft_model in models, str(models))
    tuned = client.chat.completions.create(model=ft_model, messages=ask, max_tokens=16,
                                           temperature=0).choices[0].message.content
    base = client.chat.completions.create(model=MODEL_ID, messages=ask, max_tokens=16,
                                          temperature=0).choices[0].message.content
    adapter = job.result_files[0] if job.result_files else ""
    want = run(exe, "generate", "-m", model, "--lora", adapter, "-p", ask[0]["content"], "-n", "16", "--temp", "0",
               "-c", "512").strip()
    check("the fine-tuned model answers as generate --lora does", tuned.strip() == want, f"{tuned!r} vs {want!r}")
    check("it learned the fact, the base did not", "Fenwright" in tuned and "Fenwright" not in base,
          f"{tuned!r} / {base!r}")

    # --- jobs that fail: a setting train refuses, a full fine-tune of a quantized model
    jf = client.fine_tuning.jobs.create(model=MODEL_ID, training_file=f.id,
                                        extra_body={"retrograd": {"set": {"training.ctx": 2}}})
    jf = wait_job(client, jf.id, ("succeeded", "failed", "cancelled"), 120)
    check("a setting train refuses fails the job with train's message", jf.status == "failed" and
          jf.error is not None and "training.ctx" in jf.error.message, f"{jf.status} {jf.error}")
    jq = client.fine_tuning.jobs.create(model=MODEL_ID, training_file=f.id, method={"type": "full"},
                                        extra_body={"retrograd": TRAIN})
    jq = wait_job(client, jq.id, ("succeeded", "failed", "cancelled"), 120)
    check("method full on a quantized model fails with train's reason", jq.status == "failed" and
          jq.error is not None and "retrograd train" in jq.error.message, f"{jq.status} {jq.error}")

    # --- cancel a long job while it runs
    jl = client.fine_tuning.jobs.create(model=MODEL_ID, training_file=f.id, suffix="long",
                                        extra_body={"retrograd": dict(TRAIN, steps=100000, save_every=2)})
    deadline = time.time() + 120
    while time.time() < deadline and not client.fine_tuning.jobs.checkpoints.list(jl.id).data:
        time.sleep(0.5)
    c = client.fine_tuning.jobs.cancel(jl.id)
    check("cancel answers cancelled", c.status == "cancelled", c.status)
    time.sleep(4)
    jl = client.fine_tuning.jobs.retrieve(jl.id)
    check("the cancelled job stays cancelled with no model", jl.status == "cancelled" and
          jl.fine_tuned_model is None and jl.finished_at is not None, str(jl))
    check("its checkpoints stay listed", len(client.fine_tuning.jobs.checkpoints.list(jl.id).data) >= 1, "")
    try:
        client.fine_tuning.jobs.cancel(jl.id)
        check("cancelling a cancelled job is refused", False, "accepted")
    except openai.BadRequestError:
        check("cancelling a cancelled job is a 400", True)
    r = client.chat.completions.create(model=MODEL_ID, messages=ask, max_tokens=16, temperature=0)
    check("the server still answers after the cancel", r.choices[0].message.content == base, r.choices[0].message.content)
    # --- a training process that crashes (killed here) fails its job; the server goes on
    jk = client.fine_tuning.jobs.create(model=MODEL_ID, training_file=f.id,
                                        extra_body={"retrograd": dict(TRAIN, steps=100000)})
    pid = wait_pid(client, jk.id)
    if pid:
        os.kill(pid, signal.SIGKILL)
    jk = wait_job(client, jk.id, ("succeeded", "failed", "cancelled"), 60)
    check("a training process killed by SIGKILL fails its job saying so", jk.status == "failed" and
          "killed by signal 9" in (jk.error.message if jk.error else ""), f"{jk.status} {jk.error}")
    r = client.chat.completions.create(model=ft_model, messages=ask, max_tokens=16, temperature=0)
    check("the server still serves the fine-tuned model after the crash", r.choices[0].message.content == tuned,
          r.choices[0].message.content)
    try:
        client.fine_tuning.jobs.retrieve("ftjob-nope")
        check("an unknown job is refused", False, "accepted")
    except openai.NotFoundError:
        check("an unknown job is a 404", True)
    listed = [j.id for j in client.fine_tuning.jobs.list(limit=10).data]
    check("list: newest first", listed == [jk.id, jl.id, jq.id, jf.id, job.id], str(listed))
    page = [j.id for j in client.fine_tuning.jobs.list(limit=2, after=jq.id).data]
    check("list: limit and after", page == [jf.id, job.id], str(page))
    # --- a cancel after the training ended but before its adapter is served (the server holds that window
    # open for RG_TEST_JOB_SERVE_DELAY_MS): the client is told cancelled, so the job ends cancelled, unserved
    jc = client.fine_tuning.jobs.create(model=MODEL_ID, training_file=f.id, suffix="late",
                                        extra_body={"retrograd": dict(TRAIN, steps=2, save_every=0)})
    deadline = time.time() + 120
    while time.time() < deadline and not any(e.message.startswith("Training completed") for e in
                                             client.fine_tuning.jobs.list_events(jc.id, limit=100).data):
        time.sleep(0.1)
    c = client.fine_tuning.jobs.cancel(jc.id)
    check("a cancel as the training ends answers cancelled", c.status == "cancelled", c.status)
    time.sleep(SERVE_DELAY_MS / 1000 + 2)
    jc = client.fine_tuning.jobs.retrieve(jc.id)
    models = [m.id for m in client.models.list().data]
    check("and the job ends cancelled, its adapter not served", jc.status == "cancelled" and
          jc.fine_tuned_model is None and not any(m.endswith(":" + jc.id) for m in models), f"{jc} {models}")
finally:
    srv.terminate()
    srv.wait(timeout=30)
check("the server exits cleanly", srv.returncode == 0, f"rc {srv.returncode}")

# --- a server killed while a job runs: its training process goes with it
srv, url = start()
client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
jr = client.fine_tuning.jobs.create(model=MODEL_ID, training_file=f.id,
                                    extra_body={"retrograd": dict(TRAIN, steps=100000)})
pid = wait_pid(client, jr.id)
srv.kill()
srv.wait(timeout=30)


def process_gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as st:
            return st.read().rsplit(") ", 1)[1][0] == "Z"  # a zombie, not yet reaped
    except FileNotFoundError:
        return True


deadline = time.time() + 5
while pid and not process_gone(pid) and time.time() < deadline:
    time.sleep(0.1)
gone = pid is not None and process_gone(pid)
check("a killed server's training process ends with it", pid is not None and gone, f"pid {pid}")

# --- a restart on the same --files-dir
srv, url = start()
client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
try:
    jobs = client.fine_tuning.jobs.list(limit=10).data
    check("after a restart every job is listed with its status", [j.status for j in jobs] ==
          ["failed", "cancelled", "failed", "cancelled", "failed", "failed", "succeeded"], str([j.status for j in jobs]))
    check("the job that ran when the server died is failed server_restarted", jobs[0].id == jr.id and
          jobs[0].error is not None and jobs[0].error.code == "server_restarted", str(jobs[0]))
    check("and the file", [x.id for x in client.files.list().data] == [f.id], "")
    deadline = time.time() + 30
    models = []
    while time.time() < deadline and ft_model not in models:
        models = [m.id for m in client.models.list().data]
        time.sleep(0.2)
    check("the fine-tuned model is served again", ft_model in models, str(models))
finally:
    srv.terminate()
    srv.wait(timeout=30)
shutil.rmtree(tmp, ignore_errors=True)
finish()
