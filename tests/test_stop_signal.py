"""A Ctrl-C is never lost: Python prints and drops an exception raised while a ``__del__``
runs, so a signal that lands there must still stop the loop that asks ``raise_if_stopping``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, signal, time
    from parbench.launch.lifetime import handle_termination, raise_if_stopping

    class SignalledWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the handler runs here, inside __del__, and its exception is dropped

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal: a background job starts
    handle_termination()                          # with SIGINT ignored, which stays ignored
    SignalledWhileCollected()
    print("went on after the signal", flush=True)
    try:
        raise_if_stopping()
    except KeyboardInterrupt:
        print("stopped at the next check", flush=True)
""")


def test_a_signal_whose_exception_python_dropped_still_stops_the_next_check():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                            timeout=60)
    assert "Exception ignored" in result.stderr and "KeyboardInterrupt" in result.stderr
    assert result.stdout.splitlines() == ["went on after the signal",
                                          "stopped at the next check"]
