# groupops: the operator (`groupops operator`, the default) and the consumer runtime
# (`groupops consume`, what consumer pods run) in one image.
#   docker build -t groupops:0.1.0 .
#   kind load docker-image groupops:0.1.0      # or: minikube image load / k3d image import
# Multi-stage: the build stage resolves and installs the pinned dependencies into a virtualenv;
# the runtime stage copies only that virtualenv onto the same slim base, runs as a non-root user
# and needs no writable root filesystem.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/groupops
WORKDIR /src
# Dependencies first (pinned in pyproject.toml), so source edits do not reinstall them.
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN /opt/groupops/bin/pip install --no-compile "pip==26.3" \
 && /opt/groupops/bin/pip install --no-compile . \
 && /opt/groupops/bin/python -m compileall -q /opt/groupops/lib

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="groupops" \
      org.opencontainers.image.description="Kafka consumer-group operator and plan-following consumer" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 groupops \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin groupops
COPY --from=build /opt/groupops /opt/groupops
ENV PATH=/opt/groupops/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["groupops"]
CMD ["operator", "--host=0.0.0.0"]
