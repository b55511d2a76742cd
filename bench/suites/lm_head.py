"""The draft LM head's kernels: python -m bench lm-head [--quick] [--device cuda|cpu] [--dtype bf16|fp32]

One table over d x V x |I| x n: full-vocabulary torch matmul, torch index_select + matmul, Triton
gathered GEMM, Triton repack (--moved rows) + dense GEMM over the buffer, Triton low-rank head
(rank d/8 over I_t). GB/s counts the bytes an operation must move at least (weights it reads once,
h, logits, indices; the repack's moved rows twice), so GB/s / copy GB/s is the fraction of the memory
roofline, with copy GB/s measured here as a device-to-device copy. Without a GPU only the torch rows
are timed; Triton rows print "n/a (no GPU)".
"""
import argparse

import torch

from bench import harness
from core.kernels import triton as kernels

DS, VOCABS, SUBS, NS = [576, 2048, 4096], [49152, 128256, 262144], [1024, 2048, 3072, 4096], [1, 10]
QUICK = dict(d=[576, 2048], V=[49152, 128256], I=[1024, 3072], n=[1, 10])
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
FULL = "torch matmul (full V)"
COLUMNS = f"{'d':>5} {'V':>7} {'|I|':>5} {'n':>3}  {'method':<30} {'time us':>10} {'GB/s':>8} {'% copy':>7}"


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench lm-head", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"subset: {QUICK}")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--d", type=int, nargs="+", default=None)
    p.add_argument("--V", type=int, nargs="+", default=None)
    p.add_argument("--I", type=int, nargs="+", default=None)
    p.add_argument("--n", type=int, nargs="+", default=None)
    p.add_argument("--moved", type=int, default=32, help="rows the repack copies per step")
    p.add_argument("--reps", type=int, default=None, help="cpu: timed repetitions; cuda: do_bench milliseconds")
    p.add_argument("--threads", type=int, default=None, help="cpu: torch threads (1 is steadiest on a shared machine)")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here")
    args.dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    base = QUICK if args.quick else dict(d=DS, V=VOCABS, I=SUBS, n=NS)
    for name in ("d", "V", "I", "n"):
        setattr(args, name, getattr(args, name) or base[name])
    args.reps = args.reps or (5 if args.device == "cpu" else 100)
    return args


def seconds(fn, device: torch.device, reps: int) -> float:
    """CUDA: the median replay of fn captured in a CUDA graph (the kernels' own time: a Python launch costs
    10-50 us, more than these kernels take on an H200), else, where fn cannot be captured, the median of
    do_bench (L2 flushed between runs, launch included). CPU: the fastest of reps wall-clock runs (the least
    disturbed by other processes on a shared machine)."""
    if device.type == "cuda":
        import triton.testing
        try:
            return triton.testing.do_bench_cudagraph(fn, rep=reps, return_mode="median") / 1e3
        except Exception:  # not capturable (a host sync inside fn): the event timing, launch included
            torch.cuda.synchronize(device)
            return triton.testing.do_bench(fn, warmup=25, rep=reps, return_mode="median") / 1e3
    return harness.best(fn, reps, warmup=1) / 1e3


def copy_gbps(device: torch.device, reps: int) -> float:
    """Device-to-device copy bandwidth: read + write of a buffer far larger than the caches."""
    src = torch.empty(256 << 20 if device.type == "cuda" else 64 << 20, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    return 2 * src.numel() / seconds(lambda: dst.copy_(src), device, reps) / 1e9


def weights(d: int, V: int, dtype, device):
    r = max(1, d // 8)
    rand = lambda *s: (torch.rand(*s, device=device) - 0.5).to(dtype)  # noqa: E731
    return rand(V, d), rand(r, d), rand(V, r)


def methods(h, W, W_down, W_up, idx, moved: int, gpu: bool):
    """[(name, fn | None, bytes it must move)]; fn None = not runnable here."""
    (n, d), k, r, es = h.shape, idx.numel(), W_down.shape[0], h.element_size()
    io = n * d * es + n * k * 4 + k * 8  # h in, fp32 logits out, the index
    buf = torch.empty(k, d, dtype=W.dtype, device=W.device).copy_(W[idx])
    slots, ids = torch.randperm(k, device=W.device)[:moved], idx[torch.randperm(k, device=W.device)[:moved]]
    tri = lambda fn: fn if gpu else None  # noqa: E731
    return [
        (FULL, lambda: h @ W.T, W.numel() * es + n * d * es + n * W.shape[0] * 4),
        ("torch index_select+matmul", lambda: h @ W.index_select(0, idx).T, k * d * es + io),
        ("triton gathered GEMM", tri(lambda: kernels.gathered_gemm(h, W, idx, "triton")), k * d * es + io),
        ("triton repack+dense GEMM", tri(lambda: (kernels.repack_rows(buf, W, slots, ids, "triton"), h @ buf.T)),
         (2 * slots.numel() + k) * d * es + io),
        ("triton low-rank head (r=d/8)", tri(lambda: kernels.lowrank_logits(h, W_down, W_up, idx, "triton")),
         (r * d + k * r) * es + io),
    ]


def row(d, V, k, n, name, t, nbytes, copy) -> str:
    if t is None:
        return f"{d:>5} {V:>7} {k:>5} {n:>3}  {name:<30} {'n/a (no GPU)':>10}"
    gbps = nbytes / t / 1e9
    return f"{d:>5} {V:>7} {k:>5} {n:>3}  {name:<30} {t * 1e6:>10.1f} {gbps:>8.1f} {100 * gbps / copy:>6.1f}%"


def measure(args, device: torch.device, dtype, copy: float, triton_ok: bool):
    """Yield (d, V, |I|, n, method, seconds | None, bytes) over the grid; triton_ok: run the Triton rows."""
    for d in args.d:
        for V in args.V:
            W, W_down, W_up = weights(d, V, dtype, device)
            full_time = {}  # the full-vocabulary matmul does not depend on |I|
            for k in [k for k in args.I if k <= V]:
                idx = torch.randperm(V, device=device)[:k]
                for n in args.n:
                    h = (torch.rand(n, d, device=device) - 0.5).to(dtype)
                    for name, fn, nbytes in methods(h, W, W_down, W_up, idx, min(args.moved, k), triton_ok):
                        t = full_time.get(n) if name == FULL else None
                        if t is None and fn is not None:
                            t = seconds(fn, device, args.reps)
                        if name == FULL:
                            full_time[n] = t
                        yield d, V, k, n, name, t, nbytes
            del W, W_down, W_up


def header(device: torch.device, dtype_name: str, copy: float, moved: int) -> str:
    gpu = device.type == "cuda"
    return (f"device {device} ({torch.cuda.get_device_name(device) if gpu else 'CPU'}), dtype {dtype_name}, "
            f"copy {copy:.1f} GB/s, repack {moved} rows/step, threads {torch.get_num_threads()}")


def main(argv=None):
    args = parse_args(argv)
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    if args.threads:
        torch.set_num_threads(args.threads)
    copy = copy_gbps(device, args.reps)
    print(header(device, args.dtype, copy, args.moved))
    print(COLUMNS)
    for r in measure(args, device, dtype, copy, device.type == "cuda"):
        print(row(*r, copy), flush=True)
    return 0


if __name__ == "__main__":
    main()
