"""The progress watchdog's own Kafka client and its sample (both deliveries).

Who calls it: `consumer.replica.Replica`, from the watchdog's thread (consumer/progress.py judges
the samples). The client is separate from the runtime's consumer: confluent-kafka lets one thread
at a time into a Consumer, so a commit that never returns would block the watchdog with it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from groupops.consumer.progress import Sample
from groupops.consumer.settings import RuntimeSettings
from groupops.model import TopicPartition

__all__ = ["BrokerProbe", "kafka_partitions", "probe_config", "sample_progress"]

log = logging.getLogger(__name__)


def kafka_partitions(
    partitions: Iterable[TopicPartition], offsets: dict[TopicPartition, int] | None = None
) -> list[Any]:
    if offsets is None:
        return [KafkaPartition(tp.topic, tp.partition) for tp in sorted(partitions)]
    return [KafkaPartition(tp.topic, tp.partition, offsets[tp]) for tp in sorted(partitions)]


def probe_config(settings: RuntimeSettings) -> dict[str, Any]:
    """librdkafka configuration of the progress watchdog's own client. It cannot share the
    runtime's consumer: confluent-kafka lets one thread at a time into a Consumer (a call from
    another thread waits until the current one returns), so a commit that never returns would
    block the watchdog with it, and back-to-back polls can starve it. This client never
    subscribes nor is assigned: it only asks for watermarks and the group's committed offsets."""
    return {
        **settings.kafka.properties,
        "bootstrap.servers": settings.kafka.bootstrap_servers,
        "group.id": settings.kafka.group_id,
        "client.id": f"{settings.identity}-progress",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }


class BrokerProbe:
    """The watchdog's Kafka client (`probe_config`), used from the watchdog's thread only."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self._client: Any = Consumer(probe_config(settings))
        self._auto_offset_reset = settings.kafka.auto_offset_reset

    def sample(
        self, owned: frozenset[TopicPartition], processed: Mapping[TopicPartition, int], timeout_s: float
    ) -> Sample:
        return sample_progress(
            self._client, owned, processed, auto_offset_reset=self._auto_offset_reset, timeout_s=timeout_s
        )

    def close(self) -> None:
        self._client.close()


def sample_progress(
    client: Any,
    owned: frozenset[TopicPartition],
    processed: Mapping[TopicPartition, int],
    *,
    auto_offset_reset: str,
    timeout_s: float,
) -> Sample:
    """The progress watchdog's sample (both deliveries) through `client`, the watchdog's own;
    each broker call waits at most `timeout_s`.

    positions: processed progress, else the committed offset, else where auto.offset.reset starts
    (earliest: the low watermark; latest: the end, so no lag). high_watermarks: one ListOffsets
    round trip per partition (`cached=False`, a real one), in partition order, stopping at the
    first partition that lags (one is enough for the rule) or at the first failure."""
    if not owned:
        return Sample(owned=owned)
    positions = {tp: processed[tp] for tp in owned if tp in processed}
    high_watermarks: dict[TopicPartition, int] = {}
    answered = False
    try:
        unknown = owned - positions.keys()
        if unknown:
            for partition in client.committed(kafka_partitions(unknown), timeout=timeout_s):
                if partition.error is None and partition.offset >= 0:
                    positions[TopicPartition(partition.topic, partition.partition)] = partition.offset
            answered = True
        for tp in sorted(owned):
            watermarks = client.get_watermark_offsets(
                KafkaPartition(tp.topic, tp.partition), timeout=timeout_s, cached=False
            )
            if watermarks is None:
                break
            answered = True
            low, high = watermarks
            high_watermarks[tp] = high
            if tp not in positions and auto_offset_reset == "earliest" and low >= 0:
                positions[tp] = low
            if tp in positions and positions[tp] < high:
                break
    except KafkaException as e:
        # An error the broker sent (not a librdkafka timeout or transport error) is an answer.
        error = e.args[0] if e.args else None
        answered = answered or (isinstance(error, KafkaError) and error.code() >= 0)
        log.debug("progress sample incomplete: %s", e)
    return Sample(owned=owned, positions=positions, high_watermarks=high_watermarks, answered=answered)
