"""A step of the fault model: threads of process A sharing one handle and its mirror
(``worker.op_threads``)."""

from __future__ import annotations

import random
import threading
import time

from tests.faultmodel.worker import each


def run(worker, name, prefix, writers, seconds, handoff, seed):
    """``writers`` threads share the handle and its mirror and add items one by one
    (``<prefix>-<thread>-<n>``) for ``seconds``, each read back at once, while one more
    thread reads in a loop. For the step the mirror runs without tracking and with a
    10 ms refresh (so it reloads while they write), and the scheduler is a busy
    machine's: a thread that releases a lock is descheduled (1 ms) with the chance
    ``handoff``, as the waiter it woke takes the CPU. Own adds must read present.
    ``{"items": [...], "answers": per item, "unseen": items read absent}``."""
    chance, real_lock = random.Random(seed).random, threading.Lock

    class HandoffLock:
        def __init__(self):
            self.lock = real_lock()
            self.acquire, self.locked = self.lock.acquire, self.lock.locked

        def release(self):
            self.lock.release()
            if chance() < handoff:
                time.sleep(0.001)

        def __enter__(self):
            return self.lock.acquire()

        def __exit__(self, *exc):
            self.release()

    answers, unseen, done = {}, [], threading.Event()

    def write(n):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            item = f"{prefix}-{n}-{len(answers)}"
            answers[item] = each(f.add, item)
            if not isinstance(answers[item], dict) and each(f.contains, item) is False:
                unseen.append(item)  # its own add, read back at once

    def read():
        while not done.is_set():
            each(f.contains, "threads-probe")

    mirrored = worker.mirrored
    worker.handles.pop(name, None)  # a handle (and mirror) of the step's configuration
    threading.Lock = HandoffLock  # the mirror made for it has them
    try:
        worker.configure([*mirrored, name], MIRROR_TRACKING=False, MIRROR_REFRESH_SECONDS=0.01)
        f = worker.handle(name)
        each(f.contains, "threads-probe")
        threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        reader = threading.Thread(target=read)
        for thread in (reader, *threads):
            thread.start()
        for thread in threads:
            thread.join(120)
        done.set()
        reader.join(120)
    finally:
        threading.Lock = real_lock
        worker.handles.pop(name, None)
        worker.configure(mirrored)
    items = list(answers)
    return {"items": items, "answers": [answers[i] for i in items], "unseen": unseen}
