"""Token display helpers shared by the text, stream and tree views."""
import html
import math

VISIBLE_WS = {"\n": "↵", "\t": "⇥", "\r": "␍"}


def esc(s) -> str:
    return html.escape(str(s), quote=True)


def token_str(vocab: dict, tid) -> str:
    """Display string of a token id from the trace's vocab map (JSON keys are strings)."""
    if tid is None:
        return "∅"
    s = vocab.get(str(tid))
    if s is None:
        s = vocab.get(tid)
    return s if s is not None else f"⟨{tid}⟩"


def chip_label(vocab: dict, tid, width: int = 12) -> str:
    """A compact, whitespace-visible label for chips and tree nodes."""
    s = "".join(VISIBLE_WS.get(c, "␣") if c.isspace() and c != " " else c for c in token_str(vocab, tid))
    s = s.replace(" ", "·") if s.strip() == "" else s
    return s if len(s) <= width else s[: width - 1] + "…"


def prob_from_logp(logp):
    if logp is None:
        return None
    try:
        return math.exp(float(logp))
    except (TypeError, ValueError, OverflowError):
        return None


def fmt_prob(p) -> str:
    return "—" if p is None else f"{p:.2f}"


def fmt_in_vocab(flag) -> str:
    if flag is None:
        return "n/a"
    return "yes" if flag else "NO"


def records_upto(trace: dict, step: int | None) -> list:
    """Records with index <= step (None = all). Index = position in the record list."""
    recs = trace.get("records", [])
    return recs if step is None else recs[: max(0, int(step)) + 1]


def last_index(trace: dict) -> int:
    return max(len(trace.get("records", [])) - 1, 0)


def emitted_ids(trace: dict) -> list:
    """Every token id the run emitted, in order."""
    return [t for r in trace.get("records", []) for t in r.get("emitted", [])]
