class SpecError(Exception):
    """A one-line, user-facing error: the CLI prints it and exits 2, the UI shows it."""
