"""q8_mm's tuning: options that a benchmark sets in-process (never the product's environment). None changes a float:
prefetch and stream move only when blocks are fetched, interleave only how a matrix's blocks are laid out at load.

    tuning()          the options in force
    set_tuning(**kw)  replace some (checked: SpecError naming the option); applied at once to every loaded library and
                      by cpu_layer.load to each one loaded later; returns the options before, to put back
    tuned(**kw)       set_tuning for the length of a with-block
"""
import contextlib
import dataclasses
import weakref

from core.errors import SpecError


@dataclasses.dataclass(frozen=True)
class Q8Tuning:
    prefetch: int = -1       # bytes past each output group's blocks fetched in one burst before its dot products
    #                          (-1: the kernel's default, none; 0: none)
    stream: int = -1         # bytes ahead of the blocks in use that the dot products prefetch as they go (-1: the
    #                          variant's default, 16384 on AVX-512 and AMX, 2048 on the others; 0: none)
    interleave: bool = True  # whole groups of 8 outputs interleaved per block at load (gguf_q8.pack_x8); False keeps
    #                          every output on its own blocks (matrices loaded before a change keep their layout)

    def __post_init__(self):
        for name in ("prefetch", "stream"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise SpecError(f"Q8Tuning.{name}={value!r}: use -1 (the default) or a number of bytes (0: none)")
        if not isinstance(self.interleave, bool):
            raise SpecError(f"Q8Tuning.interleave={self.interleave!r}: use True or False")


_current = Q8Tuning()
_libraries = weakref.WeakSet()  # the loaded libraries (cpu_layer.load): prefetch and stream live in each


def tuning() -> Q8Tuning:
    return _current


def set_tuning(**options) -> Q8Tuning:
    """Replace the options named (SpecError for an unknown one or a bad value); returns those in force before."""
    global _current
    unknown = set(options) - {f.name for f in dataclasses.fields(Q8Tuning)}
    if unknown:
        raise SpecError(f"Q8Tuning has no {', '.join(sorted(unknown))}: its options are prefetch, stream, interleave")
    before, _current = _current, dataclasses.replace(_current, **options)
    for so in list(_libraries):
        apply(so)
    return before


@contextlib.contextmanager
def tuned(**options):
    """The options named, for the length of the block; those before are put back after it."""
    before = set_tuning(**options)
    try:
        yield _current
    finally:
        set_tuning(**dataclasses.asdict(before))


def apply(so) -> None:
    """Hand the options in force to a loaded library (one of an older revision may lack the setters)."""
    if hasattr(so, "q8_set_prefetch"):
        so.q8_set_prefetch(_current.prefetch)
    if hasattr(so, "q8_set_stream"):
        so.q8_set_stream(_current.stream)


def attach(so) -> None:
    """Apply the options to a library that was just loaded, and to it again whenever they change."""
    _libraries.add(so)
    apply(so)
