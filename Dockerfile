# One image for every memjobs service (workers, sweeper, the CLI). Build from
# the repository root: docker build -t memjobs .
FROM python:3.11-slim
RUN useradd --system --create-home --uid 10001 memjobs \
 && install -d -o memjobs -g memjobs -m 0700 /var/lib/memjobs
WORKDIR /app
COPY pyproject.toml README.md ./
COPY producers ./producers
COPY workers ./workers
# The model's engine built for this image (memjobs_worker/embedding/engine.py:
# about half the CPU a text of the wheel's); the compiler is removed again,
# OpenMP's runtime (libgomp1) stays. Should the build fail, the wheel's engine runs.
RUN pip install --no-cache-dir . \
 && apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev libgomp1 \
 && (python -m memjobs_worker.embedding.engine || true) \
 && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
USER memjobs
# The data directory: mem0's history, Markdown memory, logs, run/ (owner-only).
ENV MEMJOBS_DATA_DIR=/var/lib/memjobs
VOLUME ["/var/lib/memjobs"]
# `memjobs worker` runs `python -m memjobs_worker` (Dramatiq with memjobs' logging).
CMD ["memjobs", "worker"]
