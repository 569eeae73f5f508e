"""The consumer runtime: what runs in every consumer pod (`groupops consume`).

Stage: after the controller (which publishes the plan ConfigMap and creates the Leases). Two
deliveries: `plan` (runtime.PlanRuntime: follow the operator's plan with the fenced two-epoch
handoff) and `native` (native.NativeRuntime: Kafka's own group protocol as a static member).

Modules: settings (environment -> RuntimeSettings), kube (the few API calls), lease (take, renew,
report, fence, release), planwatch (watch the plan), runtime, native, processors (the user's
callback by name), ownership (`owns`, `fencing_token`: fencing the callback's own side effects),
metrics (Prometheus), journal (the processing journal for audits), audit (reading journals back),
errors (the exception tree).

    >>> runtime = make_runtime(RuntimeSettings.from_env(), load_processor("mypkg.handlers:handle"))
    >>> runtime.run()   # until runtime.stop(), e.g. from a SIGTERM handler
"""

from __future__ import annotations

from groupops.consumer.errors import (
    ConsumerConfigError,
    ConsumerError,
    KafkaFailure,
    LeaseLostError,
)
from groupops.consumer.native import NativeRuntime
from groupops.consumer.ownership import fencing_token, owns
from groupops.consumer.processors import Processor, load_processor
from groupops.consumer.runtime import PlanRuntime
from groupops.consumer.settings import Delivery, RuntimeSettings

__all__ = [
    "ConsumerConfigError",
    "ConsumerError",
    "Delivery",
    "KafkaFailure",
    "LeaseLostError",
    "NativeRuntime",
    "PlanRuntime",
    "Processor",
    "RuntimeSettings",
    "fencing_token",
    "load_processor",
    "make_runtime",
    "owns",
]


def make_runtime(settings: RuntimeSettings, processor: Processor) -> PlanRuntime | NativeRuntime:
    """The runtime of the settings' delivery."""
    if settings.delivery is Delivery.NATIVE:
        return NativeRuntime(settings, processor)
    return PlanRuntime(settings, processor)
