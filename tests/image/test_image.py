"""The built image (`make image`) runs what a consumer pod runs: its entrypoint as uid 10001, with
the Kafka credentials mounted the way the operator mounts them (controller/render_pods.py: the
auth Secret at AUTH_MOUNT_PATH, one file per property, defaultMode 0440), and consumes real
messages from a real broker that demands those credentials.

How a pod's process and volume look, and how this test makes the same:
- the pod runs as runAsUser 10001, runAsGroup 10001, fsGroup FS_GROUP (the chart's pods use 10001
  for both groups): its process has gid 10001 and the supplementary group FS_GROUP; here
  `buildah run --user 10001:10001` with FS_GROUP = 10001 gives exactly those credentials (buildah
  1.28 cannot add any other supplementary group to the process, so a distinct fsGroup cannot be
  shown here);
- the kubelet writes the Secret's keys behind `..data` links, owned by root with group fsGroup and
  mode 0440 (`secret_volume` below lays them out the same way); without fsGroup they stay
  root:root 0440, which uid 10001 cannot read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from groupops.controller.render_pods import AUTH_MOUNT_PATH
from groupops.devstack import KafkaCluster, KafkaSettings
from tests.e2e.kube_api import KubeApi
from tests.e2e.plan_driver import engine_target
from tests.e2e.runtime_support import ProducedLog, consumer_env, create_namespace, create_topic, produce
from tests.e2e.waiting import wait_for
from tests.image.conftest import ImageConsumer, ImageContainer, Volume
from tests.integration.test_consumer_runtime import LEASE_SECONDS, STARTUP_S, Group

pytestmark = [pytest.mark.image, pytest.mark.integration]

IMAGE_USER = "10001:10001"
FS_GROUP = 10001
SECRET_MODE = 0o440  # render_pods.py: the auth Secret volume's defaultMode
JOURNAL_IN_IMAGE = "/var/lib/groupops/journal"
KUBECONFIG_IN_IMAGE = "/etc/groupops/kubeconfig"
SASL_USER, SASL_PASSWORD = "admin", "admin-secret"
SASL_PROPERTIES = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
"""Not secret: the policy's spec.kafka.properties (GROUPOPS_KAFKA_PROPERTIES). The user name and
password are in the Secret, so the replica reaches the broker only if it reads the mounted files."""


def secret_volume(directory: Path, data: Mapping[str, str], *, gid: int) -> Path:
    """`directory` laid out as the kubelet writes a Secret volume: the values in a timestamped
    directory, `..data` pointing at it, each key a link through `..data`; owned by root, group
    `gid` (the fsGroup; 0 for none), files SECRET_MODE, directories 0755 (with fsGroup also
    setgid, as the kubelet's volume ownership change leaves them)."""
    payload = directory / "..2026_01_01_00_00_00.000000000"
    payload.mkdir(parents=True)
    for key, value in data.items():
        (payload / key).write_text(value, encoding="utf-8")
        os.chown(payload / key, 0, gid)
        (payload / key).chmod(SECRET_MODE)
        (directory / key).symlink_to(Path("..data") / key)
    (directory / "..data").symlink_to(payload.name)
    for path in (directory, payload):
        os.chown(path, 0, gid)
        path.chmod(0o2755 if gid else 0o755)
    return directory


def readable_copy(source: str, target: Path) -> Path:
    """The API server's kubeconfig for the replica (a stand-in for the pod's ServiceAccount token,
    which is not what this test is about): readable by uid 10001."""
    target.write_text(Path(source).read_text(encoding="utf-8"), encoding="utf-8")
    target.chmod(0o444)
    return target


def test_the_image_runs_as_uid_10001_by_default_and_its_entrypoint_answers(
    groupops_image: ImageContainer,
) -> None:
    assert groupops_image.user == IMAGE_USER
    assert groupops_image.entrypoint == ["groupops"]

    who = groupops_image.run(["id", "-u"])  # no --user: the image's own configuration
    assert (who.returncode, who.stdout.strip()) == (0, "10001"), who.stderr

    result = groupops_image.run([*groupops_image.entrypoint, "--help"])
    assert result.returncode == 0, result.stdout + result.stderr
    for command in ("operator", "consume", "assign", "lag"):
        assert command in result.stdout


def test_the_image_has_the_forecast_lag_source_and_its_pinned_pyarrow(groupops_image: ImageContainer) -> None:
    result = groupops_image.run(
        ["python", "-c", "import groupops.lag.forecast, pyarrow; print(pyarrow.__version__)"]
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "26.0.1"  # pyproject.toml: the `forecast` extra's pin


def test_the_image_carries_the_product_only_not_the_dev_stack(groupops_image: ImageContainer) -> None:
    # The answer is the exit code: `buildah run` once returned 0 with the probe's stdout lost (CI,
    # 2026-12-01), and a lost line must not read as a wrong image.
    probe = (
        "import importlib.util as u, sys; "
        "sys.exit((2 if u.find_spec('groupops.devstack') else 0) + (0 if u.find_spec('groupops.cli') else 3))"
    )
    result = groupops_image.run(["python", "-c", probe])
    assert result.returncode != 2, "groupops.devstack is in the image: it is for tests and `make demo` only"
    assert result.returncode != 3, "groupops.cli is missing from the image"
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"


def test_without_fsgroup_the_replica_cannot_read_its_credentials_and_stops_at_start(
    groupops_image: ImageContainer, tmp_path: Path
) -> None:
    """What a pod without securityContext.fsGroup gets: the Secret's files stay root:root 0440."""
    auth = secret_volume(tmp_path / "kafka-auth", {"sasl.password": SASL_PASSWORD}, gid=0)
    result = groupops_image.run(
        [*groupops_image.entrypoint, "consume"],
        user=IMAGE_USER,
        env={
            "GROUPOPS_POLICY": "orders",
            "GROUPOPS_IDENTITY": "processor-0",
            "GROUPOPS_GROUP_ID": "processor",
            "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "GROUPOPS_KAFKA_AUTH_DIR": AUTH_MOUNT_PATH,
        },
        volumes=[Volume(auth, AUTH_MOUNT_PATH)],
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output  # a configuration error, named, not a crash
    assert "Permission denied" in output and f"{AUTH_MOUNT_PATH}/sasl.password" in output, output
    assert "fsGroup" in output and "Traceback" not in output, output


def test_a_replica_in_the_image_reads_the_mounted_credentials_and_consumes_every_message(
    groupops_image: ImageContainer,
    kafka_cluster_factory: Callable[[KafkaSettings], KafkaCluster],
    kube_config: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    # A broker whose SASL listener takes only the Secret's user (a super user: no ACLs needed).
    cluster = kafka_cluster_factory(KafkaSettings(sasl_users={SASL_USER: SASL_PASSWORD}))
    assert cluster.sasl_bootstrap is not None
    topic, partitions = unique_name("orders"), 3
    create_topic(cluster.bootstrap, topic, partitions)  # the test's own clients use PLAINTEXT

    api = KubeApi(kube_config)
    namespace = unique_name("image")
    create_namespace(api, namespace)
    g = Group(
        api=api,
        bootstrap=cluster.sasl_bootstrap,
        namespace=namespace,
        topic=topic,
        partitions=partitions,
        group_id=unique_name("processor"),
        workdir=tmp_path,
        kubeconfig=kube_config,
    )
    try:
        identity = g.identity(0)
        g.start_driver([identity], engine_target("range", {topic: partitions}))
        credentials = {"sasl.username": SASL_USER, "sasl.password": SASL_PASSWORD}
        auth = secret_volume(tmp_path / "kafka-auth", credentials, gid=FS_GROUP)
        g.journal_dir.mkdir()
        os.chown(g.journal_dir, 10001, 10001)
        kubeconfig = readable_copy(kube_config, tmp_path / "kubeconfig")
        replica = ImageConsumer(
            identity=identity,
            env=consumer_env(
                policy=g.policy,
                identity=identity,
                namespace=namespace,
                group_id=g.group_id,
                bootstrap=cluster.sasl_bootstrap,
                kubeconfig=KUBECONFIG_IN_IMAGE,
                record_dir=Path(JOURNAL_IN_IMAGE),
                lease_seconds=LEASE_SECONDS,
                extra={
                    "GROUPOPS_KAFKA_AUTH_DIR": AUTH_MOUNT_PATH,
                    "GROUPOPS_KAFKA_PROPERTIES": json.dumps(SASL_PROPERTIES),
                },
            ),
            log_path=tmp_path / f"{identity}.log",
            container=groupops_image,
            user=IMAGE_USER,
            volumes=[
                Volume(auth, AUTH_MOUNT_PATH),
                Volume(kubeconfig, KUBECONFIG_IN_IMAGE),
                Volume(g.journal_dir, JOURNAL_IN_IMAGE, writable=True),
            ],
        )
        g.consumers[identity] = replica
        replica.start()
        wait_for(
            "the replica in the image acknowledging its plan",
            lambda: g.all_acked_current([identity]),
            STARTUP_S,
            explain=g.diagnostics,
        )

        produced = ProducedLog()
        produce(cluster.bootstrap, topic, 300, partitions, log=produced)
        report = g.wait_processed(produced.acked, timeout=120.0)
        assert report.unique == len(produced.acked) == 300
        assert report.per_identity == {identity: report.processed}
        assert replica.alive(), replica.log_tail()
    finally:
        g.close()
        api.close()
