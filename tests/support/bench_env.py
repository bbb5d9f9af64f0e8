"""What a benchmark script does first: nothing of the caller's memjobs
configuration leaks into it (the shell's ``MEMJOBS_*`` and model variables
would point it at another stack or a real model), and mem0 sends no telemetry."""

from __future__ import annotations

import os

#: The prefixes of the variables memjobs' settings (and their aliases) read.
PREFIXES = ("MEMJOBS_", "QWEN_AUDIO_", "DASHSCOPE_", "NOVA_AUDIO_")


def isolate() -> None:
    """Drop every memjobs variable from this process's environment; telemetry off."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    for name in list(os.environ):
        if name.startswith(PREFIXES):
            del os.environ[name]
