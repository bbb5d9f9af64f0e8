"""The HTTP API: memjobs as the server a gateway in any language points at.

:func:`~memjobs_worker.http.app.create_app` builds the ASGI app;
:mod:`~memjobs_worker.http.serve` runs it under uvicorn (``memjobs api``, and
beside the workers in ``memjobs up``).
"""

from memjobs_worker.http.app import create_app

__all__ = ["create_app"]
