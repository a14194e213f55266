"""How the request thread and the watcher's workers share the interpreter (§7a).

Layer adapter: imports neither pyfuse3 nor trio (it needs neither). `Turns.tune` sets the
process's settings once, before serving (mount.py); `Turns.settled` runs on the trio
thread after each project's load (watch.py).
"""

from __future__ import annotations

import gc
import sys

# The GIL's switch interval while a worker runs a long Python loop (§7a). A thread that
# wants the GIL waits this long before CPython makes the holder hand it over; the request
# thread wants it at every wake-up, several times per request, and a warm `cat` is about
# five requests. Measured with tests/bench/responsive.py (a warm cat while a 10,000-file
# project is listed for the first time): with the default 5 ms the worst cat took 55 ms
# (p99 50); with 1 ms 26 ms (p99 13); with 0.5 ms 25-60 (p99 10-20); with 0.2 ms 14-15 ms
# (p99 6-8), the
# build some 25 % slower while it serves twice the cats. A build that instead sleeps 50 µs
# every 16 files, at 5 ms, gave 20-40 ms (p99 7-15) and would put thread yields into the
# rules layer. Set once for the process (`Turns.tune`): with no thread waiting for the GIL
# the interval costs nothing (it only bounds how long a waiter waits).
# Measured again with issue 24's code, three runs each: 0.2 ms, worst 9-19 ms (p99 6-7);
# the default 5 ms, worst 22-28 ms (p99 15-16).
HEAVY_SWITCH_S = 0.0002


class Turns:
    """How the request thread and the watcher's workers share the interpreter: set once for
    the whole process when the mount starts (`tune`), never toggled per load, so every
    request meets the same interpreter.

    - The GIL's switch interval is `HEAVY_SWITCH_S` (see there): with no thread waiting for
      the GIL it costs nothing; with a worker in a long loop it bounds the request thread's
      wait.
    - The collector keeps its thresholds. After a project's load, `settled` freezes what
      is alive (gc.freeze): the project just built, long-lived and acyclic, leaves the
      collector's sight, so later full collections walk only what came after it (one
      walks every tracked object with the GIL held, 20-50 ms once a 10,000-file project
      is in memory). Without it the worst warm `cat` during a 10,000-file first listing
      took 60-69 ms (two runs), with it 9-19 ms. The cost: a reference cycle alive at that
      moment is never collected; that happens once per project loaded. Full collections
      made rarer instead (a higher threshold) let cyclic garbage pile up: the soak's RSS
      grew from 30 to 70 MiB in a minute.
    """

    def __init__(self, switch_s: float = HEAVY_SWITCH_S) -> None:
        self.switch_s = switch_s
        self.freezes = 0

    def tune(self) -> None:
        """The process's settings, once, before serving (mount.py)."""
        sys.setswitchinterval(self.switch_s)

    def settled(self) -> None:
        """A project was loaded: keep it out of every later full collection (O(1))."""
        gc.freeze()
        self.freezes += 1
