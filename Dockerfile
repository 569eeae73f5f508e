# groupops: the operator (`groupops operator`, the default) and the consumer runtime
# (`groupops consume`, what consumer pods run) in one image, with the `forecast` lag source's
# pyarrow.
#
# Build:
#   make image                  # here: buildah, no Docker engine, no registry image (docs/image.md)
#   docker build -t groupops:0.1.0 .
#   kind load docker-image groupops:0.1.0      # or: minikube image load / k3d image import
# `make image` builds on a Debian bookworm base made by mmdebstrap (PYTHON_IMAGE=that local image,
# python3 at /usr/bin); elsewhere PYTHON_IMAGE defaults to the official slim image (python3 at
# /usr/local/bin). Both have python3 3.11, `python3 -m venv`, groupadd and useradd, which is all
# this file asks of the base. `make image` keeps buildah's storage in ~/.cache/groupops/containers
# (the base's rootfs in ~/.cache/groupops/image-base-*): measured with `time` on 2 shared cores, a
# cold build (base and every dependency) took 1 min 42 s to 1 min 55 s, a rebuild after a source
# edit 42 s to 76 s, an unchanged tree 0.1 s (docs/image.md).
#
# Layers: the build stage installs the pinned dependencies (listed from pyproject.toml by the
# `requirements` stage) before it copies the source, so a source edit reruns only its last steps,
# and a pyproject.toml edit that leaves the list alone keeps the installed dependencies. The runtime
# stage has no RUN step (the account comes from the `account` stage), sets all its configuration
# first and copies the virtualenv last: the only step of it that a source edit reruns.
#
# User and volumes: the image runs as uid 10001, gid 10001 (`groupops`), and needs no writable
# root filesystem. The Kafka credentials arrive as a Secret volume at /etc/groupops/kafka-auth,
# one file per property, owned by root with group = the pod's fsGroup and mode 0440 (render_pods.py
# sets defaultMode 0440). A consumer pod must set `securityContext.fsGroup` (10001, as the chart's
# pods do): without it the files stay root:root 0440, uid 10001 cannot read them, and `groupops
# consume` stops at start with "Permission denied". tests/image/test_image.py checks both cases.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# The dependency list, read from pyproject.toml (the runtime's, the `forecast` extra's and the
# build backend's pins) in a stage of its own: an edit elsewhere in pyproject.toml reruns this
# step only, and the install below stays cached while the list is the same.
FROM ${PYTHON_IMAGE} AS requirements
COPY pyproject.toml /src/
RUN python3 -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb")); \
print("\n".join(p["project"]["dependencies"] + p["project"]["optional-dependencies"]["forecast"] \
+ p["build-system"]["requires"]))' > /src/requirements.txt

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/groupops \
 && /opt/groupops/bin/pip install --quiet --no-compile "pip==26.3"
# Dependencies first, so a source edit does not reinstall them. `make image` mounts the project's
# pip cache at /root/.cache/pip; elsewhere pip's cache stays in this stage, which the image leaves out.
COPY --from=requirements /src/requirements.txt /src/
RUN /opt/groupops/bin/pip install --quiet --no-compile -r /src/requirements.txt \
 && /opt/groupops/bin/python -m compileall -q /opt/groupops/lib
# Then the source: groupops itself, onto the dependencies already in place.
COPY pyproject.toml README.md /src/
COPY operator /src/operator
RUN /opt/groupops/bin/pip install --quiet --no-compile --no-deps --no-build-isolation "/src[forecast]" \
 && /opt/groupops/bin/pip uninstall --quiet --yes setuptools \
 && /opt/groupops/bin/python -m compileall -q /opt/groupops/lib/python3*/site-packages/groupops \
 && /opt/groupops/bin/pip check

# The account, made in a stage of its own: the runtime stage then has no RUN step at all, so
# nothing a builder mounts for RUN (make image's pip cache, CA bundle) can leave a trace in it.
FROM ${PYTHON_IMAGE} AS account
RUN groupadd --system --gid 10001 groupops \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin groupops

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="groupops" \
      org.opencontainers.image.description="Kafka consumer-group operator and plan-following consumer" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=account /etc/passwd /etc/group /etc/shadow /etc/gshadow /etc/
ENV PATH=/opt/groupops/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["groupops"]
CMD ["operator", "--host=0.0.0.0"]
# Last, so every step above stays cached when only the source changed.
COPY --from=build /opt/groupops /opt/groupops
