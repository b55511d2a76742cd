"""llama.cpp runs as a benchmark peer: greedy decoding of one templated prompt (llama-completion), speculative decoding
with a draft GGUF (llama-speculative-simple --spec-type draft-simple), llama-bench's tg figure, and the parsers of
their output. The prompt is our exact chat-templated text (the detokenized `chat_prompt_ids`), passed unescaped on
the command line; `--verbose-prompt` shows llama.cpp's own tokenization of it, checked against our ids.
"""
import json
import re
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.errors import SpecError
from bench.llamacpp.build import binary


@dataclass
class PeerRun:
    text: str                       # generated text (special tokens not printed)
    new_tokens: int                 # tokens generated
    decode_tokens: int              # tokens generated in the generation phase (completion: all but the first)
    decode_s: float                 # generation phase only (no prompt eval)
    prompt_s: float                 # prompt eval
    prompt_ids: list = field(default_factory=list)  # llama.cpp's tokenization of the prompt ([] if not printed)
    drafted: int = 0                # speculative only
    accepted: int = 0
    repacked: bool = True           # False: rerun with --no-repack after a crash (`with_fallback`)

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / max(self.decode_s, 1e-9)


COMMON = ("--temp", "0", "--seed", "0", "--no-escape", "-c", "2048")


def completion_args(gguf: Path, prompt: str, n: int, threads: int) -> list:
    """llama-completion: raw prompt (no conversation mode, no re-templating), greedy, n new tokens."""
    return [str(binary("llama-completion")), "-m", str(gguf), "-p", prompt, "-n", str(n), "-t", str(threads),
            "-tb", str(threads), *COMMON, "-no-cnv", "--no-display-prompt", "--verbose-prompt"]


def speculative_args(gguf: Path, draft: Path, prompt: str, n: int, threads: int, draft_max: int) -> list:
    """llama-speculative-simple: the draft GGUF drafts up to draft_max tokens a step, the target verifies, greedy."""
    return [str(binary("llama-speculative-simple")), "-m", str(gguf), "-md", str(draft), "--spec-type", "draft-simple",
            "--spec-draft-n-max", str(draft_max), "--spec-draft-n-min", "0", "-p", prompt, "-n", str(n),
            "-t", str(threads), "-tb", str(threads), "-td", str(threads), "-tbd", str(threads), *COMMON]


def bench_args(gguf: Path, n: int, threads: int, reps: int, depth: int = 0) -> list:
    """llama-bench's generation of n tokens; depth: tokens already in its KV cache (-d), as after a prompt. The depth
    is filled one token a batch (-ub 1, untimed): this build's AMX-repacked kernels crash on a batch of 2 or more."""
    return [str(binary("llama-bench")), "-m", str(gguf), "-p", "0", "-n", str(n), "-t", str(threads),
            "-r", str(reps), "-o", "json", *(["-d", str(depth), "-ub", "1"] if depth else [])]


def pass_args(gguf: Path, n: int, threads: int, reps: int, depth: int = 0) -> list:
    """llama-bench's batch of n tokens after depth tokens of context (-p n -d depth), in whole batches: a verify's
    pass of n rows as llama.cpp runs it, with the logits of its last row only."""
    return [str(binary("llama-bench")), "-m", str(gguf), "-p", str(n), "-n", "0", "-t", str(threads), "-r", str(reps),
            "-o", "json", *(["-d", str(depth)] if depth else [])]


PERF = re.compile(r"(?P<what>prompt eval|\beval) time =\s*(?P<ms>[\d.]+) ms /\s*(?P<n>\d+) (?:tokens|runs)")
PROMPT_TOKEN = re.compile(r"^(?:[\d.]+ [A-Z] )?\s*(\d+) -> '", re.M)  # after the log's "0.00.560.776 I " prefix
SPEC = {k: re.compile(rf"{k}\s+(\d+) tokens in\s+([\d.]+) seconds") for k in ("encoded", "decoded")}
SPEC_COUNT = {k: re.compile(rf"\bn_{k}\s*=\s*(\d+)") for k in ("drafted", "accept")}


def prompt_tokens(log: str) -> list:
    """The prompt ids that --verbose-prompt printed (the block after 'number of tokens in prompt')."""
    m = re.search(r"number of tokens in prompt = (\d+)\n", log)
    if m is None:
        return []
    return [int(t) for t in PROMPT_TOKEN.findall(log[m.end():])[:int(m.group(1))]]


def parse_completion(stdout: str, log: str) -> PeerRun:
    """PeerRun from llama-completion's stdout (the generated text) and stderr (perf lines). The first new token
    comes out of the prompt eval, so the eval runs are the other n - 1: decode tok/s = runs / eval time."""
    perf = {m["what"].strip(): (float(m["ms"]), int(m["n"])) for m in PERF.finditer(log)}
    if "eval" not in perf or "prompt eval" not in perf:
        tail = " | ".join(log.strip().splitlines()[-3:])
        raise SpecError(f"llama-completion printed no timings; its stderr ended: {tail}")
    (eval_ms, runs), (prompt_ms, _) = perf["eval"], perf["prompt eval"]
    text = stdout.removesuffix("\n\n").removesuffix(" [end of text]\n")  # the tool's own closing lines
    return PeerRun(text=text, new_tokens=runs + 1, decode_tokens=runs, decode_s=eval_ms / 1e3, prompt_s=prompt_ms / 1e3,
                   prompt_ids=prompt_tokens(log))


def parse_speculative(stdout: str, log: str, prompt: str) -> PeerRun:
    """PeerRun from llama-speculative-simple: stdout holds "\\n\\n" + prompt + generated text + 4 "\\n"; stderr the
    encoded / decoded counts and seconds and the drafted / accepted totals. Its prompt eval leaves the last prompt
    token to the decode loop, so every new token (it may overshoot n by up to the draft length) is "decoded"."""
    found = {k: rx.search(log) for k, rx in SPEC.items()}
    if not all(found.values()):
        tail = " | ".join(log.strip().splitlines()[-3:])
        raise SpecError(f"llama-speculative-simple printed no timings; its stderr ended: {tail}")
    text = stdout.removeprefix("\n\n").removesuffix("\n\n\n\n")
    text = text[len(prompt):] if text.startswith(prompt) else text
    counts = {k: int(m.group(1)) if (m := rx.search(log)) else 0 for k, rx in SPEC_COUNT.items()}
    new = int(found["decoded"].group(1))
    return PeerRun(text=text, new_tokens=new, decode_tokens=new, decode_s=float(found["decoded"].group(2)),
                   prompt_s=float(found["encoded"].group(2)), drafted=counts["drafted"], accepted=counts["accept"])


def parse_bench(stdout: str) -> dict:
    """{test: mean tok/s} from llama-bench -o json (tg64 for -p 0 -n 64; tg64@d105 after 105 tokens of context, -d 105)."""
    try:
        rows = json.loads(stdout)
    except json.JSONDecodeError as err:
        raise SpecError(f"llama-bench printed no JSON ({err})") from None
    return {test_name(r["n_prompt"], r["n_gen"], r.get("n_depth", 0)): r["avg_ts"] for r in rows}


def test_name(n_prompt: int, n_gen: int, depth: int = 0) -> str:
    """llama-bench's name of a test: tg64 (generate 64), pp512 (a 512-token prompt), + @d105 after 105 of context."""
    return (f"tg{n_gen}" if n_gen else f"pp{n_prompt}") + (f"@d{depth}" if depth else "")


class Crashed(SpecError):
    """A llama.cpp tool killed by a signal."""


def call(args: list, timeout: float = 600) -> tuple[str, str]:
    """(stdout, stderr) of a llama.cpp tool; SpecError with its last stderr lines if it fails."""
    try:
        done = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                              errors="replace")
    except subprocess.TimeoutExpired:
        raise SpecError(f"{Path(args[0]).name} ran past {timeout:.0f} s") from None
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise (Crashed if done.returncode < 0 else SpecError)(f"{Path(args[0]).name} exit {done.returncode}: {tail}")
    return done.stdout, done.stderr


def with_fallback(args: list) -> tuple[str, str, bool]:
    """(stdout, stderr, repacked): on an AMX Xeon, llama-completion and llama-speculative-simple of this llama.cpp
    crash (SIGSEGV as the thread pool starts) with their weights repacked for the CPU's extra kernels, while
    llama-bench runs them; such a run is repeated once with --no-repack (llama.cpp's generic CPU kernels), and says so."""
    try:
        return *call(args), True
    except Crashed:
        return *call(args + ["--no-repack"]), False


def complete(gguf: Path, prompt: str, n: int, threads: int) -> PeerRun:
    out, log, repacked = with_fallback(completion_args(gguf, prompt, n, threads))
    return replace(parse_completion(out, log), repacked=repacked)


def speculate(gguf: Path, draft: Path, prompt: str, n: int, threads: int, draft_max: int) -> PeerRun:
    out, log, repacked = with_fallback(speculative_args(gguf, draft, prompt, n, threads, draft_max))
    return replace(parse_speculative(out, log, prompt), repacked=repacked)


def bench_tg(gguf: Path, n: int = 64, threads: int = 2, reps: int = 3, depth: int = 0) -> float:
    """llama-bench's tok/s generating n tokens after `depth` tokens of context."""
    return parse_bench(call(bench_args(gguf, n, threads, reps, depth))[0])[test_name(0, n, depth)]


def agreement(tokenizer, ours: list, text: str) -> int:
    """How many of our greedy tokens lead llama.cpp's text re-encoded by our tokenizer (it prints text, not ids; a
    text prefix would count "L" as agreeing with "Le")."""
    theirs = tokenizer.encode(text, add_special_tokens=False)
    n = 0
    while n < min(len(ours), len(theirs)) and ours[n] == theirs[n]:
        n += 1
    return n
