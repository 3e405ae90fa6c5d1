# The regroup service image used by the Helm chart (helm/regroup).
#   docker build -t ghcr.io/regroup/regroup:0.1.0 .
#
# It runs exactly the versions the tests ran with: requirements/runtime.txt pins the
# whole runtime set (server/accept.py relies on grpcio internals, so a newer grpcio
# resolved from a >= range is untested), and regroup and regroup-client are then
# installed from their wheels with --no-deps, so pip resolves nothing by itself.
# It has no embedded Postgres (pgserver, the extra regroup[embedded]): it serves the
# DATABASE_URL it is given, and without one exits 1 saying so (server/embedded.py).
# tests/deploy/test_image.py checks this file and the pins.

# Builds the two wheels with the pinned build backend; only the wheels reach the image.
FROM python:3.11-slim AS wheels
WORKDIR /src
COPY requirements/build.txt requirements/
RUN pip install --no-cache-dir -r requirements/build.txt
COPY pyproject.toml ./
COPY clients/python/ clients/python/
COPY reconciler/ reconciler/
COPY server/ server/
# The SQL ships inside the regroup wheel (regroup.server.migrations).
COPY migrations/ migrations/
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation -w /wheels ./clients/python .

FROM python:3.11-slim
# /metrics on every interface, for Prometheus; the web view, which has no authentication and
# would be served on that port too, only when REGROUP_WEB_VIEW=on asks for it (docs/web-view.md).
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    REGROUP_LISTEN=0.0.0.0:50051 \
    REGROUP_METRICS_LISTEN=0.0.0.0:9464 \
    REGROUP_WEB_VIEW=off

# Its own layer: it changes only when the pins do, not with every source change.
COPY requirements/runtime.txt /tmp/runtime.txt
RUN pip install --no-cache-dir -r /tmp/runtime.txt \
 && rm /tmp/runtime.txt
COPY --from=wheels /wheels /tmp/wheels
# pip check fails the build if runtime.txt misses something regroup declares it needs.
RUN pip install --no-cache-dir --no-deps /tmp/wheels/*.whl \
 && pip check \
 && rm -rf /tmp/wheels \
 && useradd --uid 10001 --no-create-home regroup

USER 10001
EXPOSE 50051 9464
ENTRYPOINT ["python", "-m", "regroup.server"]
CMD ["serve"]
