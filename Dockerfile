# The regroup service image used by the Helm chart (helm/regroup).
#   docker build -t ghcr.io/regroup/regroup:0.1.0 .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    REGROUP_LISTEN=0.0.0.0:50051 REGROUP_MIGRATIONS_DIR=/app/migrations

WORKDIR /app
COPY requirements/ requirements/
COPY pyproject.toml ./
COPY clients/python/ clients/python/
COPY reconciler/ reconciler/
COPY server/ server/
COPY migrations/ migrations/
RUN pip install --no-cache-dir ./clients/python . \
 && useradd --uid 10001 --no-create-home regroup

USER 10001
EXPOSE 50051
ENTRYPOINT ["python", "-m", "regroup.server"]
CMD ["serve"]
