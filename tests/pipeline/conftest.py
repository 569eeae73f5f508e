"""The pipeline tests' one SparkSession (real PySpark, local mode), shared by the whole session.

A local session takes 10-30 s to start on two cores, so every pipeline test uses this one. It has
Spark's Kafka source on its classpath (resolved from Maven Central into the project cache on
first use) so the end-to-end test can read the snapshot topic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from groupops.pipeline.session import SessionSettings, build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(
        SessionSettings(
            master="local[2]", app_name="groupops-tests", kafka=True, progress=False, shuffle_partitions=4
        )
    )
    try:
        yield session
    finally:
        session.stop()
