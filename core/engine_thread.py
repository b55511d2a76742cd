"""One thread for every torch / OpenMP computation of a long-lived, many-threaded process (the app).

libgomp keeps a team of worker threads per thread that opens a parallel region, for that thread's lifetime. Once the
teams alive hold more threads than the machine has CPUs, idle workers stop spinning after ~1000 spins and sleep, so
every region wakes them through a futex. On 2 vCPUs a second thread that runs torch (a loader, a calibration, a
run's worker) is enough: measured on a 2-core Xeon (python -m bench engine-thread), an elementwise op of 200k floats took
10 us on the only thread that ran OpenMP and 80 us on a second one, and the app's runs decoded at half the command
line's speed. Submitting all such work here keeps a single team alive.

`call` waits for the result; `submit` returns a Future. Jobs run one at a time, in order, without autograd, in the
caller's contextvars (gradio's progress reaches the job). The thread ends after IDLE_S without a job, and its team
with it (libgomp frees a thread's team when the thread exits), so a process whose main thread also runs torch (the
test suite, a notebook) gets its speed back between jobs; the next job starts a new one. A forked child (ZeroGPU runs
handlers in one) gets its own thread.
"""
import contextvars
import os
import queue
import threading
from concurrent.futures import Future

import torch

NAME = "speclens-engine"
IDLE_S = 2.0


class EngineThread:
    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._pid, self._thread, self._lock = None, None, threading.Lock()

    def submit(self, fn, *args, **kwargs) -> Future:
        """Queue fn(*args, **kwargs) for the engine thread."""
        fut, ctx = Future(), contextvars.copy_context()
        self._jobs.put((fut, ctx, fn, args, kwargs))
        self._ensure_started()
        return fut

    def call(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) on the engine thread, waiting for it (directly when already on it)."""
        if self.on_it():
            return fn(*args, **kwargs)
        return self.submit(fn, *args, **kwargs).result()

    def on_it(self) -> bool:
        return self._thread is threading.current_thread() and self._pid == os.getpid()

    def _ensure_started(self) -> None:
        with self._lock:
            if self._pid == os.getpid() and self._thread is not None and self._thread.is_alive():
                return
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._loop, daemon=True, name=NAME)
            self._thread.start()

    def _next_job(self):
        """The next job, or None where none came for IDLE_S (the thread is then marked gone, under the lock that
        submit's start check takes, so a job queued meanwhile is never stranded)."""
        while True:
            try:
                return self._jobs.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._thread = None
                        return None

    def _loop(self) -> None:
        while (job := self._next_job()) is not None:
            fut, ctx, fn, args, kwargs = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                with torch.no_grad():
                    fut.set_result(ctx.run(fn, *args, **kwargs))
            except BaseException as e:  # the caller re-raises it from Future.result()
                fut.set_exception(e)


ENGINE = EngineThread()
submit, call = ENGINE.submit, ENGINE.call
