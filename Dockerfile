# One image for every memjobs service (workers, sweeper, the CLI). Build from
# the repository root: docker build -t memjobs .
FROM python:3.11-slim
RUN useradd --system --create-home --uid 10001 memjobs \
 && install -d -o memjobs -g memjobs -m 0700 /var/lib/memjobs
WORKDIR /app
COPY pyproject.toml README.md ./
COPY producers ./producers
COPY workers ./workers
RUN pip install --no-cache-dir .
USER memjobs
# The data directory: mem0's history, Markdown memory, logs, run/ (owner-only).
ENV MEMJOBS_DATA_DIR=/var/lib/memjobs
VOLUME ["/var/lib/memjobs"]
# `memjobs worker` runs `python -m memjobs_worker` (Dramatiq with memjobs' logging).
CMD ["memjobs", "worker"]
