"""The environment the operator gives every consumer pod, the part each settings test starts from."""

from __future__ import annotations

REQUIRED_POD_ENV = {
    "GROUPOPS_POLICY": "orders",
    "GROUPOPS_IDENTITY": "orders-processor-0",
    "GROUPOPS_NAMESPACE": "shop",
    "GROUPOPS_GROUP_ID": "orders-processor",
    "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS": "kafka:9092",
}
