"""Prompt files: Spec-Bench JSONL, HumanEval JSONL, instruction corpora (source, category, prompt, response)
and our own assets/prompts/*.jsonl (rows may mix)."""
import json
from dataclasses import dataclass
from pathlib import Path

from core.errors import SpecError
from core.paths import ASSETS

CATEGORIES = ("conv", "mt", "summ", "qa", "math", "rag", "code")
DEFAULT_PROMPTS = ASSETS / "prompts" / "speclens_prompts.jsonl"
MAX_LINE = 100_000
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
SPEC_BENCH = {**{c: "conv" for c in MT_BENCH}, "translation": "mt", "summarization": "summ", "qa": "qa",
              "math_reasoning": "math", "rag": "rag"}
INSTRUCTIONS = {"conversation": "conv", "generation": "conv", "translation": "mt", "summarization": "summ", "qa": "qa",
                "math": "math", "code": "code"}  # instruction/response corpora (source, category, prompt, response)


@dataclass
class Prompt:
    id: str
    category: str    # one of CATEGORIES
    text: str        # the first user turn


def category_of(row: dict, where: str) -> str:
    """Our name for a row's category. Spec-Bench rows have int ids (its "math" is MT-bench -> conv);
    our own rows have str ids and already use CATEGORIES."""
    name = row["category"]
    if not isinstance(name, str):
        raise SpecError(f"{where}: category must be a string, got {type(name).__name__}")
    if isinstance(row["question_id"], str) and name in CATEGORIES:
        return name
    if name in SPEC_BENCH:
        return SPEC_BENCH[name]
    raise SpecError(f"{where}: unknown category {name!r}")


def parse_row(row, where: str) -> Prompt:
    """A Prompt from one Spec-Bench-style (question_id, category, turns) or HumanEval (task_id, prompt) row."""
    if isinstance(row, dict) and {"question_id", "category", "turns"} <= row.keys():
        turns = row["turns"]
        if not (isinstance(turns, list) and turns and all(isinstance(t, str) for t in turns)):
            raise SpecError(f"{where}: 'turns' must be a non-empty list of strings")
        return Prompt(str(row["question_id"]), category_of(row, where), turns[0])
    if isinstance(row, dict) and {"task_id", "prompt"} <= row.keys():
        if not isinstance(row["prompt"], str):
            raise SpecError(f"{where}: 'prompt' must be a string")
        return Prompt(str(row["task_id"]), "code", row["prompt"])
    if isinstance(row, dict) and {"source", "category", "prompt"} <= row.keys() and str(row["category"]) in INSTRUCTIONS:
        if not isinstance(row["prompt"], str):
            raise SpecError(f"{where}: 'prompt' must be a string")
        return Prompt(where, INSTRUCTIONS[row["category"]], row["prompt"])
    raise SpecError(f"{where}: need fields question_id, category, turns (Spec-Bench), task_id, prompt (HumanEval) "
                    "or source, category, prompt (instruction corpora)")


def read_lines(path: Path) -> list[str]:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise SpecError(f"{path}: cannot read ({err.strerror or err})") from None
    lines = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise SpecError(f"{path}:{n}: invalid UTF-8") from None
        if len(lines[-1]) > MAX_LINE:
            raise SpecError(f"{path}:{n}: line longer than {MAX_LINE} characters")
    return lines


def read_file(path) -> list[Prompt]:
    path = Path(path)
    prompts = []
    for n, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as err:  # JSONDecodeError is a ValueError
            raise SpecError(f"{path}:{n}: not valid JSON ({getattr(err, 'msg', type(err).__name__)})") from None
        prompts.append(parse_row(row, f"{path}:{n}"))
    if not prompts:
        raise SpecError(f"{path}: no prompts (empty file)")
    return prompts


def load_prompts(paths=DEFAULT_PROMPTS, limit: int | None = None, categories=None) -> list[Prompt]:
    """Prompts of one or more files, in file order, optionally only `categories`, at most `limit`."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    unknown = set(categories or ()) - set(CATEGORIES)
    if unknown:
        raise SpecError(f"unknown categories {sorted(unknown)}; choose from {', '.join(CATEGORIES)}")
    prompts = [p for path in paths for p in read_file(path) if not categories or p.category in categories]
    return prompts[:limit] if limit is not None else prompts


def per_category(prompts: list[Prompt], k: int | None) -> list[Prompt]:
    """The first k prompts of each category, in their order (k None: all)."""
    seen, out = {}, []
    for p in prompts:
        seen[p.category] = seen.get(p.category, 0) + 1
        if k is None or seen[p.category] <= k:
            out.append(p)
    return out


def example_prompts() -> list[Prompt]:
    """The first shipped prompt of each category, in CATEGORIES order (for the UI)."""
    prompts = load_prompts(DEFAULT_PROMPTS)
    return [next(p for p in prompts if p.category == c) for c in CATEGORIES]
