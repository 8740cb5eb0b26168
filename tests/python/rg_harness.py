"""What the Python reference checks share: PASS/FAIL lines, the final count, running the CLI.

check(name, ok, details) prints `PASS name` or `FAIL name: details`; finish() prints
`N passed, N failed` and exits 1 when any check failed; run(*args) runs a command and returns
its stdout, raising with its stderr when it fails; require_gguf() imports the reference `gguf`
package or reports why it cannot (a failed check, not a traceback); start_server(argv, log_path)
starts `retrograd serve` on a free port and waits until /health answers.
"""

import re
import subprocess
import sys
import time
import urllib.request

counts = {"passed": 0, "failed": 0}


def check(name, ok, details=""):
    if ok:
        print(f"PASS {name}")
        counts["passed"] += 1
    else:
        print(f"FAIL {name}: {details}")
        counts["failed"] += 1


def finish():
    print(f"{counts['passed']} passed, {counts['failed']} failed")
    sys.exit(1 if counts["failed"] else 0)


def run(*args, timeout=120):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


def require_gguf():
    try:
        import gguf
    except ImportError as e:  # pragma: no cover - environment problem, reported plainly
        print(f"FAIL import gguf: {e} (pip install -r tests/python/requirements.txt)")
        print("0 passed, 1 failed")
        sys.exit(1)
    return gguf


def start_server(argv, log_path, timeout=60):
    """Starts argv (a `retrograd serve ... --port 0` command line), its stderr to log_path; waits for the
    "listening on http://HOST:PORT" line and a /health that answers 200. Returns (process, url); raises
    RuntimeError with the log's tail when the server exits or the time runs out."""
    log = open(log_path, "w+")
    p = subprocess.Popen(argv, stderr=log, text=True)
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        time.sleep(0.05)
        log.seek(0)
        text = log.read()
        m = re.search(r"listening on http://([^\s]+)", text)
        if m:
            url = "http://" + m.group(1)
            while time.time() < deadline:
                try:
                    urllib.request.urlopen(url + "/health", timeout=5)
                    return p, url
                except Exception:
                    time.sleep(0.1)
        if p.poll() is not None:
            break
    p.kill()
    raise RuntimeError(f"the server did not start: {text[-2000:]}")
