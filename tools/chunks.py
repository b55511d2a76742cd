"""Model weights in sha256-checked chunks, for a machine that receives only the working tree (<= 64 MiB a call).

    python -m tools.chunks split [--model ALIAS | --files F ...] [--out runs/chunks] [--mib N] [--prompts JSONL ...]
    python -m tools.chunks receive [--src runs/chunks] [--store runs/weights]       # once per call, on the device

split: the payload files (an offline alias: its GGUF as cached under cache_root()/gguf; or any files, each
with the path it installs to under cache_root()) are concatenated, zlib-compressed (level 1: the GGUF's 4-bit
blocks shrink ~6 %, its tokenizer text more) and cut into parts of at most --mib MiB (default: what fits beside
the working tree in one call). manifest.json lists every file (install path, size, sha256) and every part
(size, sha256). --prompts also writes distill_prompts.jsonl.gz (prompt texts only) for the self-distillation.
receive: every part under --src whose sha256 matches moves into --store; when the store holds them all, they
are joined, decompressed, each file checked against its sha256 and installed atomically under cache_root()
(SPECLENS_CACHE), where core.models finds it (a GGUF is converted there on first load). It also installs a
carried gguf wheel (--src/gguf-*.whl) when the gguf package is missing (pip, no index).
"""
import argparse
import gzip
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

from core.paths import write_atomic
from core.errors import SpecError

CALL_MIB = 64          # what one device call carries: the working tree plus the carried paths
MARGIN_MIB = 2         # left free in each call (the tree changes between calls: logs, small files)
PART = "part-{:03d}.bin"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_of(path) -> str:
    from core.models import sha256_file
    return sha256_file(Path(path))


def tree_bytes(root=".") -> int:
    """Bytes of what a device call copies besides the carried paths: tracked + untracked, non-ignored files."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, capture_output=True)
    if out.returncode != 0:
        raise SpecError(f"{root} is not a git working tree (git ls-files failed)")
    names = [n for n in out.stdout.decode().split("\0") if n]
    return sum(os.path.getsize(Path(root) / n) for n in names if (Path(root) / n).is_file())


def default_part_bytes(root=".") -> int:
    free = (CALL_MIB - MARGIN_MIB) * 2**20 - tree_bytes(root)
    if free < 2**20:
        raise SpecError(f"the working tree ({tree_bytes(root) / 2**20:.1f} MiB) leaves no room for a chunk in a "
                        f"{CALL_MIB} MiB call")
    return free


def alias_files(name: str) -> list:
    """[(local path, install path under cache_root())] of an offline alias: its GGUF."""
    from core.models import ALIASES, fetch_gguf
    if name not in ALIASES:
        raise SpecError(f"unknown offline model {name!r}; choose from {', '.join(ALIASES)}")
    gguf = fetch_gguf(name)
    return [(gguf, f"gguf/{gguf.name}")]


def split(files, out, part_bytes: int, level: int = 1) -> dict:
    """Write part-000.bin ... and manifest.json under `out` for [(path, install path)]; returns the manifest."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*.bin"):
        old.unlink()
    comp, parts, buf = zlib.compressobj(level), [], bytearray()
    entries = []
    for path, install in files:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
                buf += comp.compress(block)
                buf = _flush_parts(buf, out, parts, part_bytes)
        entries.append({"install": install, "size": os.path.getsize(path), "sha256": digest.hexdigest()})
    buf += comp.flush()
    buf = _flush_parts(buf, out, parts, part_bytes)
    if buf:
        _write_part(out, parts, bytes(buf))
    manifest = {"codec": "zlib", "files": entries, "parts": parts, "part_bytes": part_bytes}
    write_atomic(out / "manifest.json", json.dumps(manifest, indent=1))
    return manifest


def _flush_parts(buf: bytearray, out: Path, parts: list, part_bytes: int) -> bytearray:
    while len(buf) >= part_bytes:
        _write_part(out, parts, bytes(buf[:part_bytes]))
        buf = buf[part_bytes:]
    return buf


def _write_part(out: Path, parts: list, data: bytes) -> None:
    name = PART.format(len(parts))
    write_atomic(out / name, data)
    parts.append({"name": name, "size": len(data), "sha256": sha256_bytes(data)})


def read_manifest(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"no manifest at {path}: carry the manifest.json written by `python -m tools.chunks split`")
    return json.loads(path.read_text())


def receive(src, store, cache=None) -> dict:
    """Move the verified parts of `src` into `store`; install the files once every part is there.
    Returns {"have": n, "parts": total, "installed": [paths] (empty until complete)}."""
    src, store = Path(src), Path(store)
    manifest = read_manifest(src / "manifest.json") if (src / "manifest.json").is_file() else \
        read_manifest(store / "manifest.json")
    store.mkdir(parents=True, exist_ok=True)
    write_atomic(store / "manifest.json", json.dumps(manifest, indent=1))
    for part in manifest["parts"]:
        _take_part(src / part["name"], store / part["name"], part)
    have = sum((store / p["name"]).is_file() for p in manifest["parts"])
    installed = install(manifest, store, cache) if have == len(manifest["parts"]) else []
    return {"have": have, "parts": len(manifest["parts"]), "installed": installed}


def _take_part(arrived: Path, kept: Path, part: dict) -> None:
    if kept.is_file() or not arrived.is_file():
        return
    if sha256_of(arrived) != part["sha256"]:
        raise SpecError(f"{arrived.name}: sha256 mismatch (a damaged transfer; send this part again)")
    shutil.copyfile(arrived, kept.with_name(kept.name + ".tmp"))
    os.replace(kept.with_name(kept.name + ".tmp"), kept)


def install(manifest: dict, store: Path, cache=None) -> list:
    """Join + decompress the parts, check each file's sha256, write it atomically under cache_root()."""
    from core.paths import cache_root
    root = Path(cache or cache_root())
    done, stream = [], PartsReader(store, manifest["parts"])
    for entry in manifest["files"]:
        target = root / entry["install"]
        if target.is_file() and target.stat().st_size == entry["size"] and sha256_of(target) == entry["sha256"]:
            _skip(stream, entry["size"])
            done.append(str(target))
            continue
        write_atomic(target, lambda tmp, e=entry: _write_file(tmp, stream, e))
        done.append(str(target))
    return done


class PartsReader:
    """The decompressed payload of the stored parts (each re-checked): read(n) -> n bytes (fewer at the end)."""

    def __init__(self, store: Path, parts: list):
        self.store, self.parts, self.dec, self.buf = store, parts, zlib.decompressobj(), bytearray()
        self.chunks = self._chunks()

    def _chunks(self):
        for p in self.parts:
            data = (self.store / p["name"]).read_bytes()
            if sha256_bytes(data) != p["sha256"]:
                raise SpecError(f"{p['name']}: sha256 mismatch in the store; send this part again")
            for i in range(0, len(data), 1 << 22):
                yield self.dec.decompress(data[i:i + (1 << 22)])
        yield self.dec.flush()

    def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            nxt = next(self.chunks, None)
            if nxt is None:
                break
            self.buf += nxt
        out, self.buf = bytes(self.buf[:n]), self.buf[n:]
        return out


def _write_file(tmp, stream, entry) -> None:
    digest, left = hashlib.sha256(), entry["size"]
    with open(tmp, "wb") as f:
        while left:
            block = stream.read(min(left, 1 << 22))
            if not block:
                raise SpecError(f"{entry['install']}: the parts end early")
            digest.update(block)
            f.write(block)
            left -= len(block)
    if digest.hexdigest() != entry["sha256"]:
        raise SpecError(f"{entry['install']}: sha256 mismatch after reassembly")


def _skip(stream, n: int) -> None:
    while n:
        n -= len(stream.read(min(n, 1 << 22))) or n


def install_wheel(src) -> str:
    """pip-install a carried gguf wheel (no index, no deps) when the gguf package is missing."""
    if importlib.util.find_spec("gguf") is not None:
        return "gguf already installed"
    wheels = sorted(Path(src).glob("gguf-*.whl"))
    if not wheels:
        return "gguf missing and no gguf-*.whl carried (a GGUF cannot be converted here)"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", str(wheels[-1])],
                          capture_output=True, text=True)
    return f"installed {wheels[-1].name}" if done.returncode == 0 else f"pip failed: {done.stderr.strip()[-200:]}"


def write_prompts(files, out, n: int) -> int:
    """distill_prompts.jsonl.gz: the first n prompts (texts only) of JSONL files with prompt/question fields."""
    from core.train.data import read_pairs
    prompts = [p for p, _ in read_pairs(files)][:n]
    data = "".join(json.dumps({"prompt": p}) + "\n" for p in prompts).encode()
    write_atomic(Path(out) / "distill_prompts.jsonl.gz", gzip.compress(data, 9))
    return len(prompts)


def plan_text(manifest: dict, tree: int, extras=()) -> str:
    """One line per call; the last call also carries `extras` (distill prompts, the gguf wheel)."""
    parts = manifest["parts"]
    extra = sum(os.path.getsize(e) for e in extras)
    total = sum(p["size"] for p in parts)
    raw = sum(f["size"] for f in manifest["files"])
    lines = [f"payload {raw / 2**20:.1f} MiB -> {total / 2**20:.1f} MiB compressed, {len(parts)} part(s); "
             f"working tree {tree / 2**20:.1f} MiB"]
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        names = " + ".join([p["name"], "manifest.json"] + ([Path(e).name for e in extras] if last else []))
        lines.append(f"  call {i + 1}: carry {names} -> {(p['size'] + tree + (extra if last else 0)) / 2**20:.1f} MiB "
                     f"with the tree")
    return "\n".join(lines)


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m tools.chunks", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("split", help="cut the weights into sha256-checked parts")
    s.add_argument("--model", default=None, help="offline alias (default: smollm2-135m-instruct)")
    s.add_argument("--files", nargs="+", default=None, help="FILE=INSTALL_PATH pairs instead of --model")
    s.add_argument("--out", default="runs/chunks")
    s.add_argument("--mib", type=float, default=None, help="part size (default: what fits beside the tree)")
    s.add_argument("--prompts", nargs="+", default=None, help="corpus JSONL files for distill_prompts.jsonl.gz")
    s.add_argument("--n-prompts", type=int, default=12000)
    r = sub.add_parser("receive", help="verify arrived parts, install the files when complete")
    r.add_argument("--src", default="runs/chunks")
    r.add_argument("--store", default="runs/weights")
    return p.parse_args(argv)


def payload(args) -> list:
    if args.files:
        pairs = [f.split("=", 1) for f in args.files]
        if any(len(x) != 2 for x in pairs):
            raise SpecError("--files takes FILE=INSTALL_PATH pairs")
        return [(Path(a), b) for a, b in pairs]
    from core.models import DEFAULT_MODEL
    return alias_files(args.model or DEFAULT_MODEL)


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.action == "receive":
        print(install_wheel(args.src))
        print(json.dumps(receive(args.src, args.store)))
        return 0
    part = int(args.mib * 2**20) if args.mib else default_part_bytes()
    manifest = split(payload(args), args.out, part)
    if args.prompts:
        print(f"distill prompts: {write_prompts(args.prompts, args.out, args.n_prompts)}")
    extras = sorted(Path(args.out).glob("gguf-*.whl")) + sorted(Path(args.out).glob("distill_prompts.jsonl.gz"))
    print(plan_text(manifest, tree_bytes(), extras))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
