"""The one way the benchmarks time things: warm-up calls outside the timings, contenders interleaved round by round
(a shared machine's drift then lands on every contender alike), and the least, median or mean of each one's
samples, with ratios between them. Times are milliseconds.

    t = interleave({"a": fa, "b": fb}, rounds=7, warmup=1)    # fa fb | fa fb fa fb ... (7 rounds)
    t.min("a"), t.median("a"), t.ratio("a", "b")               # ratio: a's time over b's (the least of each)

`clock(fn)` times one call; `best(fn, reps)` is interleave with a single contender. The machine may be shared: the
least is the best estimate of the uncontended cost, and ratios within one run are what to read.
"""
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Hashable

CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time, "process": time.process_time}


def clock(fn: Callable, timer: Callable = time.perf_counter) -> tuple:
    """(ms, fn's result) of one call."""
    t0 = timer()
    out = fn()
    return (timer() - t0) * 1e3, out


def ratio(a: float | None, b: float | None, digits: int = 3):
    """a / b rounded, or "" where either is missing or b is 0 (a table's blank cell)."""
    return round(a / b, digits) if a is not None and b else ""


class Timings:
    """Samples (ms) and results per contender key, in the order the keys were first timed."""

    def __init__(self):
        self.samples, self.outputs = defaultdict(list), defaultdict(list)

    def add(self, key: Hashable, ms: float, out=None) -> None:
        self.samples[key].append(ms)
        self.outputs[key].append(out)

    def keys(self) -> list:
        return list(self.samples)

    def min(self, key) -> float:
        return min(self.samples[key])

    def median(self, key) -> float:
        return statistics.median(self.samples[key])

    def mean(self, key) -> float:
        return statistics.fmean(self.samples[key])

    def ratio(self, a, b, stat: str = "min", digits: int = 3):
        """a's statistic over b's (stat: min | median | mean)."""
        return ratio(getattr(self, stat)(a), getattr(self, stat)(b), digits)


def interleave(contenders: dict, rounds: int, warmup: int = 1, timer: Callable = time.perf_counter,
               before: Callable | None = None, after: Callable | None = None, into: Timings | None = None) -> Timings:
    """Call every contender `warmup` times (untimed), then `rounds` rounds of one timed call each, in the dict's order.
    before(key) / after(key) run untimed around each timed call (a cache sweep, dropping a pass's pending rows);
    `into` adds the samples to an existing Timings."""
    t = into if into is not None else Timings()
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
    for _ in range(rounds):
        for key, fn in contenders.items():
            if before:
                before(key)
            ms, out = clock(fn, timer)
            t.add(key, ms, out)
            if after:
                after(key)
    return t


def best(fn: Callable, reps: int, warmup: int = 1, timer: Callable = time.perf_counter, **hooks) -> float:
    """The least ms of `reps` timed calls of fn, after `warmup` untimed ones."""
    return interleave({0: fn}, reps, warmup, timer, **hooks).min(0)
