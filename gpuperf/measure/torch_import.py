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
    """The torch module, imported with HELD blocked; EnvironmentUnavailable (exit 3) when it is
    not installed."""
    from gpuperf.errors import EnvironmentUnavailable

    held = threading.current_thread() is threading.main_thread()  # signals reach it only
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD) if held else None
    try:
        import torch
    except ImportError:
        raise EnvironmentUnavailable(
            "measuring needs torch: pip install 'gpuperf[measure]'"
        ) from None
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a held signal is raised here
    return torch
