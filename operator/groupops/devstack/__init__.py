"""The local stack for tests and the demo: Apache Kafka brokers (KRaft) and a Kubernetes API
server with etcd, all real, built or fetched by `make stack` into the project cache, started on
free 127.0.0.1 ports by this package. `python -m groupops.devstack up|down` runs them for a
developer; tests/fixtures/stack.py runs them for pytest.

No node agent runs on that stack: `kubelet.Kubelet` plays the kubelet for the operator's pods
(each a local `groupops consume`), for the e2e tests and for `demo` (`make demo`, the main job
end to end: demo.py, with demo_stack.py and demo_examples.py).
"""

from groupops.devstack.errors import DevstackError, NotBuiltError, StartError, StateError
from groupops.devstack.kafka import KafkaCluster, KafkaSettings, rack_settings

__all__ = [
    "DevstackError",
    "KafkaCluster",
    "KafkaSettings",
    "NotBuiltError",
    "StartError",
    "StateError",
    "rack_settings",
]
