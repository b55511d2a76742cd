"""A GGUF model's matrices kept as their raw blocks, for `q8_mm` (q8_mm.c; AVX2, AVX-VNNI or AVX512-VNNI, the same
floats on each: isa.q8_variant): llama.cpp's arithmetic, each row of the input quantized to int8 and every block an
integer dot product, for Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q6_K (everything the shipped GGUFs hold).

Unlike the bf16 codes (gguf_codes.py) these products are not the model's bf16 products: the activations lose ~0.4 %
to int8 per block, as in llama.cpp. What stays exact is what losslessness rests on: each output row depends on its
own input row only, so verify rows equal 1-token passes bit for bit. `matrix_raw` concatenates the tensors that one
fused matrix holds (q|k|v, gate|up), rows in the order the converted model holds them (transformers un-permutes a
llama GGUF's q / k rows); `matches` checks rows of every part against the model's weights.
"""
from typing import NamedTuple

import numpy as np
import torch

from core.kernels.cpu import cpu_layer, gguf_codes, isa
from core.kernels.cpu.tuning import tuning

GGML_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
              11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 30: "BF16"}  # ggml's type ids
BLOCK = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34),
         "Q4_K": (256, 144), "Q6_K": (256, 210)}  # (inputs, bytes) per block of the types q8_mm multiplies
TYPES = {name: t for t, name in GGML_NAMES.items() if name in BLOCK}
K_TYPES = ("Q4_K", "Q6_K")  # their inputs are quantized per 256 (Q8_K), the others per 32 (Q8_0)
CHECK_ROWS = 8  # rows of each part compared with the model's weights at load
X8 = 8  # outputs per interleaved group (OB in q8_mm.c)
X8_KINDS = {"Q4_0": 144, "Q4_1": 160, "Q5_0": 176, "Q8_0": 272,  # the interleaved types: bytes per 32 inputs of a group (X8_BYTES)
            "Q4_K": 148, "Q6_K": 210}


class RawCodes(NamedTuple):
    """One [n, k] matrix as GGUF blocks, output row after output row (each row in its own type)."""
    n: int
    k: int
    types: torch.Tensor  # uint8 [n]: ggml type ids
    off: torch.Tensor    # int64 [n]: where each row's blocks start in raw (bytes)
    raw: torch.Tensor    # uint8 (empty once `slim` finds every output interleaved)
    kinds: int           # bit 0: some rows are K types, bit 1: some are 32-input types
    parts: tuple = ()    # ((kind, first row, rows), ...) for `matches`
    variant: str = ""    # the q8_mm variant that multiplies them (isa.Q8), fixed at load; "" = isa.q8_variant()
    x8: torch.Tensor | None = None      # uint8: groups of X8 outputs interleaved per block (pack_x8)
    x8_off: torch.Tensor | None = None  # int64 [ceil(n / X8)]: where each group starts in x8, -1: not interleaved

    @property
    def nbytes(self) -> int:
        extra = 0 if self.x8 is None else self.x8.numel() + self.x8_off.numel() * 8
        return self.raw.numel() + self.off.numel() * 8 + self.types.numel() + extra

    @property
    def read_bytes(self) -> int:
        """Bytes one product reads: each interleaved group's x8 blocks, every other output row's raw blocks."""
        if self.x8 is None:
            return self.raw.numel()
        if self.all_interleaved:
            return self.x8.numel()
        sizes = torch.diff(self.off, append=torch.tensor([self.raw.numel()]))
        packed = (self.x8_off >= 0).repeat_interleave(X8)[:self.n]
        return int(sizes[~packed].sum()) + self.x8.numel()

    @property
    def all_interleaved(self) -> bool:
        return self.x8 is not None and self.n % X8 == 0 and bool((self.x8_off >= 0).all())

    @property
    def label(self) -> str:
        return isa.Q8[self.variant or isa.q8_variant()][1]


def row_bytes(kind: str, k: int) -> int:
    if kind not in BLOCK:
        raise ValueError(f"{kind} is not one of {', '.join(BLOCK)}")
    inputs, size = BLOCK[kind]
    if k % inputs:
        raise ValueError(f"{kind} rows of {k} inputs are not whole blocks of {inputs}")
    return k // inputs * size


def matrix_raw(parts: list) -> RawCodes:
    """RawCodes of the matrix that concatenates `parts` [(kind, raw bytes, n, k, row order or None)] along the
    outputs; row r of a part is its GGUF row order[r]."""
    k = parts[0][3]
    if any(p[3] != k for p in parts):
        raise ValueError("the fused tensors differ in their input size")
    rows, types, spans, at = [], [], [], 0
    for kind, raw, n, _, order in parts:
        b, size = np.asarray(raw).reshape(-1).view(np.uint8), n * row_bytes(kind, k)
        if b.size != size:
            raise ValueError(f"{kind} [{n}, {k}]: {b.size} bytes, not {size}")
        r = b.reshape(n, -1)
        rows.append(r if order is None else r[np.asarray(order)])
        types.append(np.full(n, TYPES[kind], np.uint8))
        spans.append((kind, at, n))
        at += n
    sizes = np.concatenate([np.full(r.shape[0], r.shape[1], np.int64) for r in rows])
    off = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    kinds = (1 if any(p[0] in K_TYPES for p in parts) else 0) | (2 if any(p[0] not in K_TYPES for p in parts) else 0)
    raw = np.concatenate([r.reshape(-1) for r in rows])
    x8, x8_off = interleaved(spans, rows, at, k) if tuning().interleave else (None, None)
    return RawCodes(at, k, torch.from_numpy(np.concatenate(types)), torch.from_numpy(off), torch.from_numpy(raw),
                    kinds, tuple(spans), isa.q8_variant(), x8, x8_off)


def interleaved(spans: list, rows: list, n: int, k: int) -> tuple:
    """(x8 uint8, x8_off int64 [ceil(n / X8)]): every whole group of X8 outputs of an interleaved type that starts at a
    multiple of X8, packed by pack_x8; (None, None) where there is none."""
    x8_off, chunks, at = np.full(-(-n // X8), -1, np.int64), [], 0
    for (kind, first, count), r in zip(spans, rows):
        if kind not in X8_KINDS or first % X8:
            continue
        groups = count // X8
        if groups == 0:
            continue
        packed = (pack_x8_k if kind in K_TYPES else pack_x8)(kind, r[:groups * X8], k)  # [groups, bytes]
        x8_off[first // X8:first // X8 + groups] = at + np.arange(groups, dtype=np.int64) * packed.shape[1]
        chunks.append(packed.reshape(-1))
        at += packed.size
    if not chunks:
        return None, None
    return torch.from_numpy(np.concatenate(chunks)), torch.from_numpy(x8_off)


def pack_x8(kind: str, rows: np.ndarray, k: int) -> np.ndarray:
    """Rows [G·X8, bytes] of one 32-input type -> [G, blocks · X8_KINDS[kind]]: per group and block, the X8 outputs'
    codes interleaved in 4-code groups (lane j = output j: q8_dot.h's dot_x8; Q5_0: their low 4 bits, then a
    vector of the fifth bits, bit t of byte 4j + c that of group t's input c), then their d (fp16), then Q4_1's m."""
    nb, bs = k // 32, BLOCK[kind][1]
    b = rows.reshape(-1, X8, nb, bs)  # [G, X8, blocks, bytes]
    if kind == "Q8_0":
        u = (b[..., 2:34].view(np.int8).astype(np.int16) + 128).astype(np.uint8)  # [G, X8, nb, 32]
    else:
        qs = b[..., {"Q4_1": slice(4, 20), "Q5_0": slice(6, 22)}.get(kind, slice(2, 18))]
        u = np.concatenate([qs & 0x0F, qs >> 4], -1)  # ggml: input j < 16 in byte j's low nibble, j + 16 in its high
    if kind == "Q5_0":  # ggml: input j's fifth bit is bit j of the little-endian qh
        qh = np.ascontiguousarray(b[..., 2:6]).view("<u4")
        u = u | (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)
    u = u.reshape(*u.shape[:3], 8, 4).transpose(0, 2, 3, 1, 4)  # [G, nb, t, X8, 4]: t = the 4-input group
    lo = u & 0x0F
    codes = u if kind == "Q8_0" else lo[:, :, :4] | (lo[:, :, 4:] << 4)
    if kind == "Q5_0":
        fifth = sum((u[:, :, t] >> 4) << t for t in range(8)).astype(np.uint8)  # [G, nb, X8, 4]
        codes = np.concatenate([codes.reshape(*codes.shape[:2], -1), fifth.reshape(*fifth.shape[:2], -1)], -1)
    scales = [b[..., 0:2]] + ([b[..., 2:4]] if kind == "Q4_1" else [])  # fp16 d (m): [G, X8, nb, 2]
    parts = [codes.reshape(*codes.shape[:2], -1)] + [sc.transpose(0, 2, 1, 3).reshape(*sc.shape[:1], nb, -1)
                                                     for sc in scales]
    return np.concatenate(parts, -1).reshape(b.shape[0], -1)


def scale_min_k4(s: np.ndarray) -> tuple:
    """Q4_K's 12 scale bytes [..., 12] -> (sc, m) [..., 8] each, 6 bits (ggml's get_scale_min_k4)."""
    s = s.astype(np.uint8)
    lo, hi = s[..., 0:4], s[..., 4:8]
    sc = np.concatenate([lo & 63, (s[..., 8:12] & 0x0F) | ((lo >> 6) << 4)], -1)
    m = np.concatenate([hi & 63, (s[..., 8:12] >> 4) | ((hi >> 6) << 4)], -1)
    return sc, m


def k_codes(kind: str, b: np.ndarray) -> np.ndarray:
    """Superblocks [..., bytes] -> codes u [..., 256] in input order: Q4_K 0..15, Q6_K 0..63 (w = d·sc·(u − 32))."""
    lead = b.shape[:-1]
    if kind == "Q4_K":  # 4 chunks of 64 inputs: 32 low nibbles, then the same bytes' high ones
        qs = b[..., 16:144].reshape(*lead, 4, 1, 32)
        return np.concatenate([qs & 0x0F, qs >> 4], -2).reshape(*lead, 256)
    ql, qh = b[..., 0:128].reshape(*lead, 2, 1, 64), b[..., 128:192].reshape(*lead, 2, 1, 32)
    lo = np.concatenate([ql[..., :32] & 0x0F, ql[..., 32:] & 0x0F, ql[..., :32] >> 4, ql[..., 32:] >> 4], -2)
    hi = np.concatenate([(qh >> (2 * t)) & 3 for t in range(4)], -2)  # input 128h + 32t + l: bits 2t of qh[h][l]
    return (lo | (hi << 4)).reshape(*lead, 256)


def pack_x8_k(kind: str, rows: np.ndarray, k: int) -> np.ndarray:
    """Rows [G·X8, bytes] of Q4_K / Q6_K -> [G, superblocks · 8 · X8_KINDS[kind]]: per group and superblock, in
    chunks of 32 inputs, the X8 outputs' codes interleaved in 4-code groups as pack_x8 (Q6_K: their low nibbles
    likewise, then their high 2 bits, 4 groups per byte), then the sub-block scales [j][X8] (Q4_K: and its m as pairs
    [j/2][X8][2]), then d [X8] fp16 (Q4_K: and dmin). q8_dot.h's dot_x8_q4k / dot_x8_q6k read them."""
    nsb, bs = k // 256, BLOCK[kind][1]
    b = rows.reshape(-1, X8, nsb, bs)  # [G, X8, superblocks, bytes]
    G = b.shape[0]
    u = k_codes(kind, b).reshape(G, X8, nsb, 8, 8, 4).transpose(0, 2, 3, 4, 1, 5)  # [G, nsb, chunk, t, X8, 4]
    lo = u & 0x0F
    codes = lo[:, :, :, :4] | (lo[:, :, :, 4:] << 4)  # [G, nsb, chunk, 4, X8, 4]

    def per_sb(a):
        return a.reshape(G, nsb, -1)
    if kind == "Q4_K":
        sc, m = scale_min_k4(b[..., 4:16])  # [G, X8, nsb, 8]
        parts = [per_sb(codes), per_sb(sc.transpose(0, 2, 3, 1)),
                 per_sb(m.reshape(G, X8, nsb, 4, 2).transpose(0, 2, 3, 1, 4)),
                 per_sb(b[..., 0:2].transpose(0, 2, 1, 3)), per_sb(b[..., 2:4].transpose(0, 2, 1, 3))]
    else:
        hi = u >> 4  # [G, nsb, chunk, 8, X8, 4], 0..3
        hv = sum(hi[:, :, :, s::4] << (2 * s) for s in range(4)).astype(np.uint8)  # [G, nsb, chunk, 2, X8, 4]
        chunks = np.concatenate([codes.reshape(G, nsb, 8, -1), hv.reshape(G, nsb, 8, -1)], -1)
        parts = [per_sb(chunks), per_sb(b[..., 192:208].transpose(0, 2, 3, 1)), per_sb(b[..., 208:210].transpose(0, 2, 1, 3))]
    return np.concatenate(parts, -1).reshape(G, -1)


def available() -> bool:
    """Whether q8_mm runs here: the library is built, the CPU has AVX2 + FMA and SPECLENS_CPU_ISA allows avx2."""
    return bool(isa.q8_variant())


def is_label(label: str) -> bool:
    """Whether a runtime's codes label names a q8_mm variant."""
    return label in {lab for _, lab in isa.Q8.values()}


def q8_mm(x, c: RawCodes):
    """x [m, k] @ the matrix^T -> fp32 [m, n]; each row the same whatever m is."""
    if x.shape[0] < 1 or x.shape[1] != c.k:
        raise ValueError(f"q8_mm: x [{x.shape[0]}, {x.shape[1]}] needs rows of {c.k} inputs")
    v = c.variant or isa.q8_variant()
    if v not in isa.q8_variants():
        raise RuntimeError(f"q8_mm: no {v or 'AVX2'} kernel here (variants here: {', '.join(isa.q8_variants()) or 'none'})")
    x = x.float().contiguous()
    y = torch.empty(x.shape[0], c.n)
    cpu_layer.lib().q8_mm(isa.Q8[v][0], x.data_ptr(), x.shape[0], c.k, c.n, c.types.data_ptr(), c.off.data_ptr(), c.raw.data_ptr(),
                          c.kinds, cpu_layer.ptr(c.x8), cpu_layer.ptr(c.x8_off), y.data_ptr(), torch.get_num_threads())
    return y


def dequantize_rows(c: RawCodes, rows) -> torch.Tensor:
    """Rows of the matrix the blocks stand for, fp32 [len(rows), k] (gguf-py's dequantizer)."""
    from gguf import GGMLQuantizationType, dequantize
    out = []
    for r in rows:
        kind = GGML_NAMES[int(c.types[r])]
        size = row_bytes(kind, c.k)
        block = c.raw[int(c.off[r]):int(c.off[r]) + size].numpy()
        out.append(dequantize(block, GGMLQuantizationType[kind]).reshape(c.k).astype(np.float32))
    return torch.from_numpy(np.stack(out))


def check_rows(c: RawCodes) -> list:
    """CHECK_ROWS rows of each part, spread over it (first and last included)."""
    return sorted({at + int(i) for _, at, n in c.parts for i in np.linspace(0, n - 1, min(n, CHECK_ROWS))})


def stacked_rows(ws: list, rows: list) -> torch.Tensor:
    """Rows of the matrices `ws` [out_i, k] stacked along the outputs, without stacking them."""
    starts = np.cumsum([0] + [w.shape[0] for w in ws])
    return torch.stack([ws[p][r - starts[p]] for r in rows for p in [int(np.searchsorted(starts, r, "right") - 1)]])


def matches(c: RawCodes, w) -> bool:
    """Whether the blocks stand for w [n, k] (or the list of [n_i, k] matrices it stacks): sampled rows of every part
    dequantize to w's rows, in w's dtype."""
    ws = list(w) if isinstance(w, (list, tuple)) else [w]
    if sum(x.shape[0] for x in ws) != c.n or any(x.shape[1] != c.k for x in ws):
        return False
    rows = check_rows(c)
    return torch.equal(dequantize_rows(c, rows).to(ws[0].dtype), stacked_rows(ws, rows).detach())


# ---------------------------------------------------------------- a model's matrices, read from its GGUF

def unpermute(n: int, heads: int) -> np.ndarray:
    """The GGUF row of each of the model's rows where transformers un-permuted a llama GGUF's q / k rows
    (rope halves interleaved per head by llama.cpp's converter)."""
    return np.arange(n).reshape(heads, n // heads // 2, 2).swapaxes(2, 1).reshape(n)


def row_orders(name: str, n: int, n_heads: int, n_kv: int) -> list:
    """The row orders to try for a tensor: as stored, then un-permuted (attn_q / attn_k only)."""
    heads = {"attn_q": n_heads, "attn_k": n_kv}.get(name)
    return [None] if heads is None or n % (2 * heads) else [None, unpermute(n, heads)]


SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value type -> bytes


class Tensor(NamedTuple):
    kind: str      # ggml type name ("?" for one SpecLens does not know)
    shape: tuple   # GGUF order: (inputs, outputs)
    data: object   # uint8 memmap of its bytes


def tensor_table(path) -> dict:
    """{name: Tensor} from a GGUF's header, its metadata skipped (gguf-py's reader parses every tokenizer string:
    seconds); ValueError for a file that is not a GGUF v2 / v3 or ends early."""
    import mmap
    import struct
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    pos = [0]

    def read(fmt: str):
        n = struct.calcsize("<" + fmt)
        if pos[0] + n > size:
            raise ValueError(f"{path}: the GGUF header ends early")
        out = struct.unpack_from("<" + fmt, buf, pos[0])
        pos[0] += n
        return out[0] if len(out) == 1 else out

    def string() -> bytes:
        return read(f"{read('Q')}s")

    def skip(vtype: int):
        if vtype == 8:
            n = read("Q")  # read first: `pos[0] += read(...)` would add to the position before the read
            pos[0] += n
        elif vtype == 9:
            item, n = read("IQ")
            if item in SCALARS:
                pos[0] += SCALARS[item] * n
            else:
                for _ in range(n):
                    skip(item)
        elif vtype in SCALARS:
            pos[0] += SCALARS[vtype]
        else:
            raise ValueError(f"{path}: unknown GGUF value type {vtype}")

    if read("4s") != b"GGUF" or read("I") not in (2, 3):
        raise ValueError(f"{path} is not a GGUF v2 / v3 file")
    n_tensors, n_kv = read("QQ")
    align = 32
    for _ in range(n_kv):
        key, vtype = string(), read("I")
        if key == b"general.alignment" and vtype == 4:
            align = read("I")
        else:
            skip(vtype)
    infos = []
    for _ in range(n_tensors):
        name, dims = string().decode(), read("I")
        shape = tuple(read("Q") for _ in range(dims))
        infos.append((name, read("I"), shape, read("Q")))
    start = -(-pos[0] // align) * align
    table = {}
    for name, t, shape, offset in infos:
        kind = GGML_NAMES.get(t, "?")
        nbytes = row_bytes(kind, shape[0]) * int(np.prod(shape[1:])) if kind in BLOCK else 0
        if start + offset + nbytes > size:
            raise ValueError(f"{path}: tensor {name} runs past the end of the file")
        data = np.memmap(path, np.uint8, "r", start + offset, (nbytes,)) if nbytes else None
        table[name] = Tensor(kind, shape, data)
    return table


def matrix_candidates(names: list, tensors: dict, n_heads: int, n_kv: int) -> list:
    """Every RawCodes the tensors `names` could stand for (one per combination of row orders), most likely first."""
    import itertools
    parts = [(tensors[t].kind, tensors[t].data, int(tensors[t].shape[1]), int(tensors[t].shape[0])) for t in names]
    orders = [row_orders(t.split(".")[-2], p[2], n_heads, n_kv) for t, p in zip(names, parts)]
    combos = list(itertools.product(*orders))
    combos.sort(key=lambda cs: sum(o is not None for o in cs))
    return [lambda cs=cs: matrix_raw([(*p, o) for p, o in zip(parts, cs)]) for cs in combos]


def model_raw(gguf_path, n_layers: int, n_heads: int, n_kv: int) -> dict:
    """{'head' | 'i.wqkv' ...: [builders of RawCodes, most likely row order first]} for every fused matrix whose
    tensors are all present and of a type q8_mm multiplies; the caller keeps the first that `matches` the model.
    {} for a file that cannot be read as a GGUF (the model then keeps its own products)."""
    try:
        tensors = tensor_table(gguf_path)
    except (OSError, ValueError):
        return {}
    out = {}
    for key, ts in gguf_codes.matrix_tensors(n_layers, tensors).items():
        if all(t in tensors and tensors[t].kind in TYPES and len(tensors[t].shape) == 2 for t in ts):
            out[key] = matrix_candidates(ts, tensors, n_heads, n_kv)
    return out


def first_match(builders: list, w) -> "RawCodes | None":
    """The first RawCodes from `builders` that matches w (None when none does or one cannot be built)."""
    for build in builders:
        try:
            c = build()
        except ValueError:
            return None
        if matches(c, w):
            return slim(c)
    return None


def slim(c: RawCodes) -> RawCodes:
    """c without its raw blocks where every output is interleaved (the products then read x8 alone): a model's int8
    matrices held once, not twice."""
    return c._replace(raw=torch.empty(0, dtype=torch.uint8)) if c.all_interleaved else c


def q8_0_codes(w) -> RawCodes:
    """w [n, k] (k a multiple of 32) as Q8_0 blocks, as llama.cpp quantizes them: per 32 inputs, d = max|w| / 127
    (fp16) and codes round(w / d) in int8. A draft's weights quantized for q8_mm."""
    n, k = w.shape
    g = w.detach().float().reshape(n, k // 32, 32)
    d = g.abs().amax(-1) / 127
    q = (g * torch.where(d > 0, 1 / d, 0)[..., None]).round().to(torch.int8)  # codes from the fp32 d, d kept as fp16
    blocks = np.concatenate([d.half().numpy().view(np.uint8).reshape(n, k // 32, 2), q.numpy().view(np.uint8)], -1)
    return slim(matrix_raw([("Q8_0", blocks.reshape(-1), n, k, None)]))
