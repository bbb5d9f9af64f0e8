"""Fixtures of the log tests: the root logger put back as it was, and memjobs'
JSON Lines logging captured in a string."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from memjobs_worker.logs import NOISY_LOGGERS, configure_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    noisy = {n: logging.getLogger(n).level for n in NOISY_LOGGERS}
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)
    for n, lvl in noisy.items():
        logging.getLogger(n).setLevel(lvl)


@pytest.fixture
def stream(restore_logging: None) -> io.StringIO:
    s = io.StringIO()
    configure_logging(level="DEBUG", stream=s)
    return s
