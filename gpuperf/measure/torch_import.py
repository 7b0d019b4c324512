"""`import torch` with Ctrl-C and SIGTERM held until it is done.

torch's C extension imports numpy while it initialises and drops any exception raised there, so
a signal landing in those seconds was lost (the run went on and exited 0) or left numpy half
imported (an AttributeError traceback later). Held, the signal arrives when the import is over.
"""

from __future__ import annotations

import signal
import threading
from types import ModuleType

HELD = {signal.SIGINT, signal.SIGTERM}


def import_torch() -> ModuleType:
    """The torch module (ImportError when it is not installed), imported with HELD blocked."""
    if threading.current_thread() is not threading.main_thread():
        import torch  # signals reach the main thread only; nothing to hold here

        return torch
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        import torch
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a held signal is raised here
    return torch
