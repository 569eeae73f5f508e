"""The retry rule of spec.consumers.onError (consumer/failures.py) and its settings."""

from __future__ import annotations

import pytest

from groupops.consumer import ConsumerConfigError, RuntimeSettings
from groupops.consumer.failures import ErrorAction, ErrorSettings, call_with_retries
from tests.unit.consumer.pod_env import REQUIRED_POD_ENV


class FailsFirst:
    """Raises on its first `failures` calls, then returns."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self, message: object) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise ValueError(f"bad record {message!r} (call {self.calls})")


def test_a_callback_that_recovers_within_the_retries_succeeds_after_doubling_waits() -> None:
    waits: list[float] = []
    retried: list[int] = []
    callback = FailsFirst(2)
    failure = call_with_retries(
        callback,
        "m",
        ErrorSettings(retries=3, backoff_s=0.5),
        still_valid=lambda: True,
        on_retry=lambda attempt, error: retried.append(attempt),
        sleep=waits.append,
    )
    assert failure is None
    assert callback.calls == 3
    assert waits == [0.5, 1.0]
    assert retried == [1, 2]


def test_a_callback_that_keeps_failing_is_tried_retries_plus_one_times() -> None:
    callback = FailsFirst(10)
    failure = call_with_retries(
        callback, "m", ErrorSettings(retries=2, backoff_s=0.1), still_valid=lambda: True, sleep=lambda s: None
    )
    assert failure is not None
    assert failure.attempts == 3 == callback.calls
    assert not failure.lease_ran_out
    assert "bad record 'm' (call 3)" in failure.describe()


def test_retrying_stops_as_soon_as_the_lease_is_no_longer_valid() -> None:
    callback = FailsFirst(10)
    failure = call_with_retries(
        callback,
        "m",
        ErrorSettings(retries=5, backoff_s=0.1),
        still_valid=lambda: False,
        sleep=lambda s: None,
    )
    assert failure is not None and failure.lease_ran_out
    assert callback.calls == 1


def test_backoff_doubles_up_to_30_seconds() -> None:
    settings = ErrorSettings(retries=8, backoff_s=1.0)
    assert [settings.backoff(r) for r in range(1, 9)] == [1, 2, 4, 8, 16, 30, 30, 30]
    assert settings.total_backoff_s == 121


def test_the_default_backoff_shrinks_to_fit_a_short_poll_interval() -> None:
    settings = RuntimeSettings.from_env({**REQUIRED_POD_ENV, "GROUPOPS_MAX_POLL_INTERVAL_SECONDS": "7"})
    assert settings.on_error.retries == 3
    assert settings.on_error.total_backoff_s == pytest.approx(3.5)
    assert RuntimeSettings.from_env(REQUIRED_POD_ENV).on_error.backoff_s == 1.0


def test_the_pod_environment_sets_the_error_policy() -> None:
    settings = RuntimeSettings.from_env(
        {
            **REQUIRED_POD_ENV,
            "GROUPOPS_ON_ERROR_RETRIES": "1",
            "GROUPOPS_ON_ERROR_BACKOFF_SECONDS": "0.2",
            "GROUPOPS_ON_ERROR_ACTION": "deadLetter",
            "GROUPOPS_DEAD_LETTER_TOPIC": "orders.dlq",
        }
    )
    assert settings.on_error == ErrorSettings(
        retries=1, backoff_s=0.2, action=ErrorAction.DEAD_LETTER, dead_letter_topic="orders.dlq"
    )
    assert RuntimeSettings.from_env(REQUIRED_POD_ENV).on_error.action is ErrorAction.STOP


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"GROUPOPS_ON_ERROR_ACTION": "crash"}, "GROUPOPS_ON_ERROR_ACTION", id="unknown action"),
        pytest.param({"GROUPOPS_ON_ERROR_ACTION": "deadLetter"}, "GROUPOPS_DEAD_LETTER_TOPIC", id="no topic"),
        pytest.param({"GROUPOPS_ON_ERROR_RETRIES": "-1"}, "GROUPOPS_ON_ERROR_RETRIES", id="negative"),
        pytest.param(
            {"GROUPOPS_ON_ERROR_BACKOFF_SECONDS": "99"}, "GROUPOPS_ON_ERROR_BACKOFF_SECONDS", id="long"
        ),
        pytest.param(
            {
                "GROUPOPS_ON_ERROR_RETRIES": "20",
                "GROUPOPS_ON_ERROR_BACKOFF_SECONDS": "1",
                "GROUPOPS_MAX_POLL_INTERVAL_SECONDS": "60",
            },
            "GROUPOPS_ON_ERROR_RETRIES",
            id="retries outlast the poll interval",
        ),
    ],
)
def test_a_bad_error_policy_is_refused_naming_the_variable(change: dict[str, str], field: str) -> None:
    with pytest.raises(ConsumerConfigError) as caught:
        RuntimeSettings.from_env({**REQUIRED_POD_ENV, **change})
    assert caught.value.field == field
