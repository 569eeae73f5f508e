"""The built container image (`make image`, mk/image.mk) as the image tests use it: buildah with the
project's cached vfs storage, one working container from the image per session, and `groupops
consume` run in it as a consumer pod's container would be.

Session fixture:
    groupops_image   an ImageContainer: a working container from the built image, removed at the end

The fixture builds the image first (`make image`, which does nothing when it is up to date), so
`make test` need not wait for the build before its lanes start (mk/image.mk). Skipped only when
buildah cannot run on this machine (not installed, or it cannot start a process with chroot
isolation); a build that fails fails the tests, with its output's tail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from groupops.devstack.paths import cache_dir
from tests.e2e.runtime_support import ConsumerProcess

__all__ = ["ImageConsumer", "ImageContainer", "Volume"]

PROJECT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1800.0
"""A cold build (the base and every dependency) took about 2 minutes alone; niced beside the other
lanes it takes longer."""


class Volume(NamedTuple):
    """A bind mount: `host` at `inside`, read-only unless `writable`."""

    host: Path
    inside: str
    writable: bool = False


def image_name() -> str:
    """The image `make image` builds: $GROUPOPS_IMAGE (mk/image.mk exports it), else its default."""
    return os.environ.get("GROUPOPS_IMAGE") or f"localhost/groupops:{version('groupops')}"


def buildah_command() -> list[str]:
    """buildah on the storage tools/image/common.sh keeps in the project cache."""
    containers = Path(os.environ.get("GROUPOPS_CONTAINERS") or cache_dir() / "containers")
    return [
        "buildah",
        "--root",
        str(containers / "storage"),
        "--runroot",
        str(containers / "run"),
        "--storage-driver",
        "vfs",
    ]


def _buildah(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*buildah_command(), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass(frozen=True)
class ImageContainer:
    """A working container of the built image. `run_argv` is `buildah run` with chroot isolation
    (the host's network: the test's broker and API server listen on 127.0.0.1)."""

    image: str
    name: str
    config: Mapping[str, Any] = field(repr=False)

    @property
    def user(self) -> str:
        return str(self.config.get("User") or "")

    @property
    def entrypoint(self) -> list[str]:
        return [str(part) for part in self.config.get("Entrypoint") or []]

    def run_argv(
        self,
        command: Sequence[str],
        *,
        user: str | None = None,
        env: Mapping[str, str] | None = None,
        volumes: Sequence[Volume] = (),
    ) -> list[str]:
        """`buildah run` of `command`; as the image's own user unless `user` is given."""
        argv = [*buildah_command(), "run", "--isolation", "chroot"]
        if user is not None:
            argv += ["--user", user]
        for key, value in sorted((env or {}).items()):
            argv += ["--env", f"{key}={value}"]
        for volume in volumes:
            argv += ["--volume", f"{volume.host}:{volume.inside}" + ("" if volume.writable else ":ro")]
        return [*argv, self.name, "--", *command]

    def run(
        self,
        command: Sequence[str],
        *,
        user: str | None = None,
        env: Mapping[str, str] | None = None,
        volumes: Sequence[Volume] = (),
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.run_argv(command, user=user, env=env, volumes=volumes),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@dataclass
class ImageConsumer(ConsumerProcess):
    """`groupops consume` through the image's entrypoint in `container`, as the kubelet would run
    the consumer container: ConsumerProcess's stop and log handling, only `start` differs. `env`
    is the container's environment (nothing of this process's own is passed in); `buildah run`
    ends the replica when it is itself stopped."""

    container: ImageContainer | None = None
    user: str | None = None
    volumes: Sequence[Volume] = ()

    def start(self) -> None:
        assert self.container is not None
        assert not self.alive(), f"{self.identity} is already running"
        self.starts += 1
        argv = self.container.run_argv(
            [*self.container.entrypoint, "consume"], user=self.user, env=self.env, volumes=self.volumes
        )
        with self.log_path.open("ab") as log:
            log.write(f"\n==== start {self.starts} in {self.container.image}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )


def build_image() -> None:
    """`make image` in the project: the image these tests run, from the tree they test."""
    built = subprocess.run(
        ["make", "--no-print-directory", "-C", str(PROJECT), "image"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if built.returncode != 0:
        output = (built.stdout + built.stderr).strip()[-3000:]
        pytest.fail(f"`make image` failed (exit {built.returncode}):\n{output}")


@pytest.fixture(scope="session")
def groupops_image() -> Iterator[ImageContainer]:
    image = image_name()
    if shutil.which("buildah") is None:
        pytest.skip("buildah is not installed, so no image can run here (`make image` installs it)")
    info = _buildah("info")
    if info.returncode != 0:
        pytest.skip(f"buildah cannot run on this machine: {info.stderr.strip()[-500:]}")
    build_image()
    inspected = _buildah("inspect", "--type", "image", image)
    if inspected.returncode != 0:
        pytest.fail(f"`make image` did not leave {image}: {inspected.stderr.strip()}")
    config = json.loads(inspected.stdout)["OCIv1"]["config"]
    name = f"groupops-image-test-{uuid.uuid4().hex[:8]}"
    created = _buildah("from", "--quiet", "--pull=never", "--name", name, image, timeout=600)
    if created.returncode != 0:
        pytest.fail(f"buildah from {image} failed: {created.stderr.strip()}")
    container = ImageContainer(image=image, name=name, config=config)
    try:
        probe = container.run(["/bin/sh", "-c", "true"])
        if probe.returncode != 0:
            reason = probe.stderr.strip()[-500:]
            pytest.skip(f"buildah cannot run a process with chroot isolation here: {reason}")
        yield container
    finally:
        _buildah("rm", name)
