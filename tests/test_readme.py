"""The README's Hugging Face Spaces front matter: what a Space builds from it is what the tests ran on."""
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def front_matter() -> dict:
    text = README.read_text()
    assert text.startswith("---\n")
    block = text[4:text.index("\n---\n", 4)]
    return dict((k.strip(), v.strip().strip('"')) for k, v in (line.split(":", 1) for line in block.splitlines()))


def test_the_spaces_front_matter_pins_the_python_the_tests_run_on():
    assert front_matter()["python_version"] == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_the_spaces_front_matter_names_the_app_file_that_exists():
    assert (README.parent / front_matter()["app_file"]).is_file()
