"""Print the API's OpenAPI document: ``python -m memjobs_worker.http.openapi > docs/openapi.json``.

The document does not depend on settings or on a running stack (nothing is
connected until a request needs it), so the committed copy can be compared
with the generated one by a test.
"""

from __future__ import annotations

import json
from typing import Any

from memjobs_worker.endpoints import Endpoints
from memjobs_worker.http.app import create_app
from memjobs_worker.settings import Settings

#: Placeholders: building the app connects to nothing.
_NOWHERE = Endpoints("redis://127.0.0.1:1/0", "postgresql://nobody@127.0.0.1:1/none")


def document() -> dict[str, Any]:
    """The OpenAPI document every instance serves at ``/openapi.json``."""
    app = create_app(Settings(), _NOWHERE)
    try:
        return app.openapi()
    finally:
        app.state.ctx.close()


def render() -> str:
    """The committed form: sorted keys, two-space indent, a final newline."""
    return json.dumps(document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(render(), end="")
