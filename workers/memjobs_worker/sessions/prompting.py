"""One way for session-end jobs to talk to the light model.

What: one transcript renderer (:func:`render_transcript`, secrets redacted),
and — from :mod:`memjobs_worker.model_output`, which extraction shares — the
JSON parser (:func:`parse_json_object`) and the bounded way of asking
(:func:`ask_json`, raising :class:`ModelOutputInvalid` after one quick retry).
The model itself is :class:`memjobs_worker.model_client.ChatModel`.

Why one module: consolidation and the digest used to carry two protocols, two
renderers and two ways of stripping fences. The generic half moved to
:mod:`memjobs_worker.model_output` when extraction needed it too; its names
stay importable from here.
"""

from __future__ import annotations

from collections.abc import Sequence

from memjobs_client.contracts import Turn
from memjobs_client.sensitive import redact_secrets
from memjobs_worker.model_output import (
    OUTPUT_ATTEMPTS,
    ModelOutputInvalid,
    ask_json,
    parse_json_object,
)

__all__ = ["OUTPUT_ATTEMPTS", "ModelOutputInvalid", "ask_json", "parse_json_object", "render_transcript"]


def render_transcript(turns: Sequence[Turn]) -> str:
    """The transcript as a model sees it: ``role: text`` lines, secrets redacted."""
    return "\n".join(f"{t.role}: {redact_secrets(t.text)}" for t in turns)
