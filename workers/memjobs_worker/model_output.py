"""Bad output from the model is bad input too: one bounded way to ask for JSON.

What: one parser of JSON answers (:func:`parse_json_object`, code fences
stripped) and one bounded way of asking the light model
(:class:`~memjobs_worker.model_client.ChatModel`) for JSON (:func:`ask_json`).

Why one module: consolidation and the digest used to treat a malformed answer
in two ways (give up at once / retry for seventeen minutes), and extraction
(mem0) took any answer it could not parse for "no facts", marking the sources
learned with nothing learned and no reason recorded. Now all three do the same:

* a model that is *down* raises :class:`~memjobs_client.errors.ModelUnavailable`
  (transient; Dramatiq retries the job with backoff, as for every job);
* a model that *answers badly* (prose, wrong-shape JSON) is asked again at once,
  at most ``attempts - 1`` more times, with a reminder of the shape; then
  :class:`ModelOutputInvalid` is raised. It is permanent for the message: the
  job records the failure with its reason and ends, it is not retried later.

The session-end jobs use it through :mod:`memjobs_worker.sessions.prompting`,
extraction through :mod:`memjobs_worker.memory.engine.extraction_output`.

Errors added here (the tree is in :mod:`memjobs_client.errors`; this one is
the worker's alone, a producer never meets it)::

    PermanentError
    └── ModelOutputInvalid   the model's reply is not the JSON asked for
                             (reason ``model_output_invalid``)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from memjobs_client.errors import PermanentError

if TYPE_CHECKING:
    from memjobs_worker.model_client import ChatModel  # a type only: the pipeline loads no model client

T = TypeVar("T")

#: Model calls per job step when the answers are malformed: one call and one quick retry.
OUTPUT_ATTEMPTS = 2

_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?|\n?\s*```\s*$")


class ModelOutputInvalid(PermanentError):
    """The model's reply was not the JSON asked for, even when asked again.

    The message names what was wrong, never the reply's text.
    """

    reason = "model_output_invalid"


def parse_json_object(reply: str) -> dict[str, Any]:
    """The JSON object of a reply (a Markdown code fence around it is tolerated).

    Control characters inside strings are accepted (``strict=False``), as mem0
    accepts them: a raw line break in a fact is not worth a failure.

    Raises:
        ModelOutputInvalid: the reply is not JSON, or JSON but not an object.
    """
    text = _FENCE.sub("", reply.strip()) if isinstance(reply, str) else ""
    try:
        data = json.loads(text, strict=False)
    except ValueError:
        raise ModelOutputInvalid("the reply is not JSON") from None
    if not isinstance(data, dict):
        raise ModelOutputInvalid("the reply is JSON but not an object")
    return data


def ask_json(
    model: ChatModel,
    messages: list[dict[str, str]],
    parse: Callable[[str], T],
    *,
    shape: str,
    attempts: int = OUTPUT_ATTEMPTS,
) -> T:
    """Ask ``model`` and return ``parse(reply)``; a malformed reply is asked again at once.

    ``parse`` raises :class:`ModelOutputInvalid` for a reply it cannot use;
    ``shape`` is the JSON shape reminded to the model on the retry.

    Raises:
        ModelUnavailable: the model service failed (from the model client; transient).
        ModelOutputInvalid: ``attempts`` replies in a row could not be used.
    """
    conversation = list(messages)
    problem = ModelOutputInvalid("no attempt made")
    for _ in range(max(1, attempts)):
        reply = model.generate_response(conversation, response_format={"type": "json_object"})
        try:
            return parse(reply)
        except ModelOutputInvalid as exc:
            problem = exc
        # The reply itself is not sent back: it could carry anything. A reminder is enough.
        conversation = [
            *messages,
            {
                "role": "user",
                "content": f"Your last answer could not be used ({problem}). "
                f"Answer again with one JSON object only, exactly in this "
                f"shape: {shape}",
            },
        ]
    raise ModelOutputInvalid(f"{problem} (after {max(1, attempts)} attempts)")
