FROM python:3.11-slim
RUN useradd --create-home memjobs
WORKDIR /app
COPY pyproject.toml README.md ./
COPY producers ./producers
COPY workers ./workers
RUN pip install --no-cache-dir .
USER memjobs
ENV MEMJOBS_DATA_DIR=/home/memjobs/.memjobs
CMD ["memjobs", "worker"]
