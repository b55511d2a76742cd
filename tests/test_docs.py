"""The documentation as a reference: every path it names exists, the README stays a product page, dated
measurements live in docs/log/ (one file per date and topic) and the log's index lists every entry."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LOG = DOCS / "log"

REPO_PREFIXES = ("core/", "ui/", "viz/", "tests/", "assets/", "docs/", "app.py", "requirements.txt", ".ci/", "bench/", "tools/",
                 "results/")
NOT_IN_REPO = ("runs/", "out/", "~/", "$")  # run outputs and the cache: made by commands, never committed
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"(`+)(.+?)\1", re.S)


def reference_docs() -> list:
    """README.md and every markdown page under docs/ but the dated log."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if LOG not in p.parents)]


def prose(text: str) -> str:
    """The text without fenced code blocks (commands to run, not paths the page names)."""
    return FENCE.sub("", text)


def is_placeholder(path: str) -> bool:
    return any(c in path for c in "*?{}<>[]") or "DIR" in path or path.startswith(NOT_IN_REPO)


def linked_paths(doc: Path, text: str) -> list:
    """Targets of markdown links, resolved against the file that holds them (URLs and bare anchors skipped)."""
    out = []
    for target in LINK.findall(prose(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path and not is_placeholder(path):
            out.append((target, (doc.parent / path).resolve()))
    return out


def code_paths(text: str) -> list:
    """Repository paths in backticks (the first word of the span: `tests/x.py -k y` names tests/x.py),
    resolved against the repository root."""
    out = []
    for _, span in CODE.findall(prose(text)):
        words = span.strip().split()
        word = words[0] if words else ""
        if not word.startswith(REPO_PREFIXES) or is_placeholder(word):
            continue
        path = word.split("::", 1)[0].rstrip(".,;:)")
        out.append((word, (ROOT / path).resolve()))
    return out


def missing_paths(doc: Path) -> list:
    text = doc.read_text()
    return [f"{doc.relative_to(ROOT)}: {name}" for name, path in linked_paths(doc, text) + code_paths(text)
            if not path.exists()]


def dated_headings(doc: Path) -> list:
    return [line for line in prose(doc.read_text()).splitlines() if line.startswith("#") and DATE.search(line)]


def test_every_path_a_doc_names_exists():
    assert [m for doc in reference_docs() for m in missing_paths(doc)] == []


def test_the_path_check_reports_a_broken_link_and_a_missing_path(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See [the runtime](no_such_page.md), `core/no_such_module.py` and `core/pipeline.py`.\n"
                    "```bash\npython core/not_a_reference.py\n```\n[a site](https://example.org) `runs/x.csv` `<DIR>/y`\n")
    text = page.read_text()
    broken = [name for name, path in linked_paths(page, text) + code_paths(text) if not path.exists()]
    assert broken == ["no_such_page.md", "core/no_such_module.py"]


def test_the_readme_is_at_most_150_lines():
    assert len(README.read_text().splitlines()) <= 150


def test_no_reference_doc_has_a_dated_heading():
    assert {str(d.relative_to(ROOT)): dated_headings(d) for d in reference_docs() if dated_headings(d)} == {}


def log_entries() -> list:
    """Every file under docs/log/ but its index, as a path relative to docs/log/."""
    return sorted(p.relative_to(LOG).as_posix() for p in LOG.rglob("*") if p.is_file() and p != LOG / "README.md")


def test_every_log_entry_is_listed_in_the_log_index():
    index = (LOG / "README.md").read_text()
    assert log_entries()
    assert [e for e in log_entries() if f"({e})" not in index] == []


def test_log_entries_are_named_date_first():
    names = [e for e in log_entries() if e.endswith(".md")]
    assert names
    assert [n for n in names if not re.match(r"^20\d\d-\d\d-\d\d-[a-z0-9-]+\.md$", n)] == []
