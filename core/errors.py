import os
import sys


class SpecError(Exception):
    """A one-line, user-facing error: the CLI prints it and exits 2, the UI shows it."""


def one_line_errors(call) -> int:
    """A command-line door's exit status for call(): a SpecError is one `error:` line and 2, an interrupt 130, any other
    failure one line and 1 (its traceback only with SPECLENS_DEBUG=1)."""
    try:
        return call() or 0
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("SPECLENS_DEBUG"):
            raise
        print(f"error: internal error ({type(e).__name__}: {e}); rerun with SPECLENS_DEBUG=1 for details",
              file=sys.stderr)
        return 1
