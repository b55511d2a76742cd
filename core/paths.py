"""Where the project's files live (the checkout's assets/, the cache root) and how they are written.

    ASSETS / "prompts" / ...                          # shipped tables, heads, prompts, example traces
    cache_root() / "models" | "gguf" | "kernels" ...  # ~/.cache/speclens, or $SPECLENS_CACHE

Atomic file writes: a reader sees the old file or the complete new one, never a half-written one.

    write_atomic(path, b"bytes" | "text" | writer)   # writer(tmp_path) writes the whole file at tmp_path

The data goes to a hidden temporary name in the same directory (same filesystem, so the final
os.replace is atomic); on any error, or if the writer leaves nothing, the temporary file is removed and
`path` is left as it was. A process killed mid-write leaves at most a `.NAME.*.tmp` file, which no
loader opens.
"""
import csv
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout
ASSETS = ROOT / "assets"


def cache_root() -> Path:
    return Path(os.environ.get("SPECLENS_CACHE") or Path.home() / ".cache" / "speclens").expanduser()


def write_atomic(path, data, mode: int = 0o644) -> Path:
    """Write `data` (bytes, str as UTF-8, or a callable taking the temp path) to `path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if callable(data):
            os.close(fd)
            data(tmp)
        else:
            _write_fd(fd, data)
        if not os.path.isfile(tmp):
            raise FileNotFoundError(f"the writer for {path} left no file")
        os.chmod(tmp, mode)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    return path


def _write_fd(fd: int, data) -> None:
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        os.close(fd)
        raise TypeError(f"write_atomic needs bytes, str or a callable, got {type(data).__name__}")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


def append_csv(path: Path, cols, row: dict) -> None:
    """One row appended and flushed at once (header first): a cut run keeps every finished row."""
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow(row)
