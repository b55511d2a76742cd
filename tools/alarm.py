"""A step's time box for the device check: StepTimeout raised in the main thread after a number of seconds."""
import signal


class StepTimeout(Exception):
    pass


class alarm:
    """Raise StepTimeout in the main thread after `seconds` (SIGALRM; a no-op where there is none)."""

    def __init__(self, seconds: float):
        self.seconds = max(seconds, 1.0)

    def __enter__(self):
        self.ok = hasattr(signal, "setitimer")
        if self.ok:
            self.old = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        if self.ok:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
        return False

    @staticmethod
    def _fire(signum, frame):
        raise StepTimeout()
