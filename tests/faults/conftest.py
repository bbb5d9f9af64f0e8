"""The fault tests' shared fixture: the in-process worker's job records."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.support.joblog import JobLog


@pytest.fixture
def job_log() -> Iterator[JobLog]:
    handler = JobLog()
    logger = logging.getLogger("memjobs.jobs")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)
