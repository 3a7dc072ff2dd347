# The ETT% service image: API, dashboard, migrations and the alert evaluator (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md LICENSE alembic.ini ./
COPY backend ./backend
COPY ingest ./ingest
COPY dashboard ./dashboard
COPY trainer_agent ./trainer_agent
RUN pip install . \
    && useradd --create-home --uid 10001 ett

USER ett
ENV ETT_HOME=/home/ett/.ett
EXPOSE 8050
CMD ["ett", "serve", "--host", "0.0.0.0", "--port", "8050"]
