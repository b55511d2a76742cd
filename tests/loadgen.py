"""Load script (not collected by pytest): N concurrent gradio_client sessions against `python app.py`.

    python tests/loadgen.py --sessions 8 [--max-new-tokens 24] [--method nanospec] [--json out.json]

Starts the app on 127.0.0.1 (port from GRADIO_SERVER_PORT, a free one by default), runs one plain greedy
(AR) reference of the default prompt through core.pipeline.Pipeline in this process, then has every
session call the named endpoint generate(prompt, method, max_new_tokens) at once. Session i asks for
max_new_tokens - i tokens (at least 1), so a session that saw another's state would return the wrong
length or text. Checks: every session finishes, its text equals the AR reference cut at its length
(lossless), queued sessions report a queue rank, and the server's RSS grows by less than --rss-bound-mb
(the model is loaded once, not per session). Every wait is bounded; exit code 0 = all checks passed.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--method", default="nanospec")
    p.add_argument("--prompt", default=None, help="default: the app's default prompt (first example)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for the whole load phase")
    p.add_argument("--start-timeout", type=float, default=600.0, help="seconds for the app to come up")
    p.add_argument("--rss-bound-mb", type=float, default=300.0)
    p.add_argument("--json", default=None, help="write the measurements here")
    return p.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    log = open(log_path, "w")
    return subprocess.Popen([sys.executable, "app.py", "--host", "127.0.0.1"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def connect(port: int, proc: subprocess.Popen, timeout: float):
    """A gradio_client Client once the app answers (bounded by `timeout`)."""
    from gradio_client import Client
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with code {proc.returncode}")
        try:
            return Client(f"http://127.0.0.1:{port}/", verbose=False)
        except Exception:
            time.sleep(2.0)
    raise TimeoutError(f"the app did not come up within {timeout:.0f} s")


def rss_mb(pid: int) -> dict:
    """Current (VmRSS) and peak (VmHWM) resident memory of a process, in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) / 1024
    return out


def reference_texts(prompt: str, n: int) -> list:
    """texts[k] = the plain greedy (AR) text of the first k new tokens, through core.pipeline.Pipeline."""
    from core.config import SpecConfig
    from core.pipeline import Pipeline
    records = list(Pipeline.load().run(prompt, SpecConfig(method="ar", max_new_tokens=n)))
    texts, acc = [""], ""
    for rec in records:  # one token per record for AR (prefill included)
        acc += rec.text
        texts.append(acc)
    return texts


def one_session(port: int, prompt: str, method: str, n: int, deadline: float, out: dict) -> None:
    """Submit one generate job from a fresh Client (its own session); record statuses and latency."""
    from gradio_client import Client
    from gradio_client.utils import Status
    t0 = time.monotonic()
    out.update(requested=n, ranks=[], statuses=[])
    try:
        job = Client(f"http://127.0.0.1:{port}/", verbose=False).submit(prompt, method, n, api_name="/generate")
        while not job.done() and time.monotonic() < deadline:
            st = job.status()
            if st.code.value not in out["statuses"][-1:]:
                out["statuses"].append(st.code.value)
            if st.code == Status.IN_QUEUE and st.rank is not None:
                out["ranks"].append(st.rank)
            time.sleep(0.5)
        result = job.result(timeout=max(deadline - time.monotonic(), 1.0))
        out.update(ok=True, result=result)
    except Exception as e:
        out.update(ok=False, error=f"{type(e).__name__}: {e}")
    out["latency_s"] = time.monotonic() - t0


def run_sessions(port: int, prompt: str, args) -> list:
    deadline = time.monotonic() + args.timeout
    outs = [{} for _ in range(args.sessions)]
    threads = [threading.Thread(target=one_session, daemon=True,
                                args=(port, prompt, args.method, max(args.max_new_tokens - i, 1), deadline, outs[i]))
               for i in range(args.sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.0) + 5.0)
    return outs


def check(outs: list, ref: list) -> list:
    """Problems found (empty = all good): failures, wrong lengths, text differing from the AR reference."""
    problems = []
    for i, o in enumerate(outs):
        if not o.get("ok"):
            problems.append(f"session {i}: {o.get('error', 'did not finish')}")
            continue
        r, n = o["result"], o["requested"]
        want = ref[min(n, len(ref) - 1)]
        if r["new_tokens"] != min(n, len(ref) - 1):
            problems.append(f"session {i}: asked {n} tokens, got {r['new_tokens']}")
        if r["text"] != want:
            problems.append(f"session {i}: text differs from AR: {r['text']!r} vs {want!r}")
    return problems


def report(outs, ref, rss_before, rss_after, wall, args) -> dict:
    lat = sorted(o.get("latency_s", float("nan")) for o in outs)
    return {"sessions": args.sessions, "method": args.method, "max_new_tokens": args.max_new_tokens,
            "wall_s": round(wall, 1), "latency_s": [round(x, 1) for x in lat],
            "latency_min_median_max_s": [round(lat[0], 1), round(lat[len(lat) // 2], 1), round(lat[-1], 1)],
            "max_queue_rank_seen": max((max(o["ranks"]) for o in outs if o.get("ranks")), default=None),
            "sessions_that_saw_a_rank": sum(bool(o.get("ranks")) for o in outs),
            "rss_before_mb": round(rss_before["VmRSS"], 1), "rss_after_mb": round(rss_after["VmRSS"], 1),
            "rss_peak_mb": round(rss_after["VmHWM"], 1),
            "rss_growth_mb": round(rss_after["VmRSS"] - rss_before["VmRSS"], 1),
            "tokens_per_s": [round(o["result"]["tokens_per_s"], 2) for o in outs if o.get("ok")],
            "problems": check(outs, ref)}


def main(argv=None) -> int:
    args = parse(argv)
    from core.prompts import example_prompts
    prompt = args.prompt or example_prompts()[0].text
    port = int(os.environ.get("GRADIO_SERVER_PORT") or free_port())
    proc = start_app(port, Path(os.environ.get("TMPDIR", "/tmp")) / f"speclens-loadgen-{port}.log")
    try:
        client = connect(port, proc, args.start_timeout)
        ref = reference_texts(prompt, args.max_new_tokens)
        client.predict(prompt, "ar", 1, api_name="/generate")  # warm: the model is loaded before measuring
        rss_before, t0 = rss_mb(proc.pid), time.monotonic()
        outs = run_sessions(port, prompt, args)
        wall, rss_after = time.monotonic() - t0, rss_mb(proc.pid)
        alive = client.predict(prompt, "ar", 1, api_name="/generate")["new_tokens"] == 1
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    out = report(outs, ref, rss_before, rss_after, wall, args)
    out["serves_after_load"] = alive
    if out["rss_growth_mb"] > args.rss_bound_mb:
        out["problems"].append(f"RSS grew {out['rss_growth_mb']} MiB > bound {args.rss_bound_mb}")
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if not out["problems"] and alive else 1


if __name__ == "__main__":
    sys.exit(main())
