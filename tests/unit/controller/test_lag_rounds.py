"""Questions to one Kafka cluster asked within a round's window go out as one call: each asker
gets the answer to its own keys, a key asked twice is asked once, an error reaches only the
askers of its key, and the call waits as long as its most patient asker. An asker that joins an
open round waits for it to be sent (its opener holds the window), so every asker runs in a
thread of its own here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import pytest

from groupops.controller.lagfleet import Rounds
from groupops.lag import LagError, LagSourceUnavailable


class FakeCluster:
    """`send` for a Rounds: records every call and answers each key with `answer <key>`, or with
    the exception given for it."""

    def __init__(self, failing: Mapping[str, BaseException] | None = None) -> None:
        self.calls: list[tuple[list[str], float]] = []
        self.failing = dict(failing or {})

    def send(self, keys: list[str], timeout_s: float) -> dict[str, Future[Any]]:
        self.calls.append((list(keys), timeout_s))
        answers: dict[str, Future[Any]] = {}
        for key in keys:
            future: Future[Any] = Future()
            if key in self.failing:
                future.set_exception(self.failing[key])
            else:
                future.set_result(f"answer {key}")
            answers[key] = future
        return answers


class HeldWindow:
    """A `sleep` for the round's opener that holds it until the test lets the round go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()

    def __call__(self, _seconds: float) -> None:
        self.entered.set()
        assert self.go.wait(10), "the test never closed the round"


def open_round_in_thread(
    rounds: Rounds[str], keys: Sequence[str], window: HeldWindow, timeout_s: float = 5.0
) -> tuple[threading.Thread, dict[str, Future[Any]]]:
    """The first asker, in its own thread, held in the round's window."""
    asked: dict[str, Future[Any]] = {}
    thread = threading.Thread(target=lambda: asked.update(rounds.ask(keys, timeout_s)))
    thread.start()
    assert window.entered.wait(10)
    return thread, asked


def ask_in_thread(
    rounds: Rounds[str], keys: Sequence[str], timeout_s: float = 5.0
) -> tuple[threading.Thread, dict[str, Future[Any]]]:
    """An asker that joins the open round: it returns once the round is sent."""
    asked: dict[str, Future[Any]] = {}
    thread = threading.Thread(target=lambda: asked.update(rounds.ask(keys, timeout_s)))
    thread.start()
    return thread, asked


def joined(rounds: Rounds[str], keys: Sequence[str]) -> None:
    """Wait until every one of `keys` is asked in the open round (its askers joined it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with rounds._lock:
            opened = rounds._open
            if opened is not None and all(key in opened.keys for key in keys):
                return
        time.sleep(0.005)
    raise AssertionError(f"{keys} never joined the open round")


def answers(futures: Mapping[str, Future[Any]]) -> dict[str, Any]:
    return {key: future.result(timeout=5) for key, future in futures.items()}


def test_questions_asked_within_the_window_are_one_call_and_each_asker_gets_its_own_answers() -> None:
    cluster, window = FakeCluster(), HeldWindow()
    rounds = Rounds[str](cluster.send, window_s=0.05, sleep=window)
    opener, first = open_round_in_thread(rounds, ["t-0", "t-1"], window)
    asker_2, second = ask_in_thread(rounds, ["t-1", "t-2"])
    asker_3, third = ask_in_thread(rounds, ["t-3"])
    joined(rounds, ["t-2", "t-3"])
    assert cluster.calls == [], "nothing is sent while the window is open"
    assert second == third == {}, "an asker that joined waits for the round to be sent"

    window.go.set()
    for thread in (opener, asker_2, asker_3):
        thread.join(10)

    assert [keys for keys, _ in cluster.calls] == [["t-0", "t-1", "t-2", "t-3"]]
    assert answers(first) == {"t-0": "answer t-0", "t-1": "answer t-1"}
    assert answers(second) == {"t-1": "answer t-1", "t-2": "answer t-2"}
    assert answers(third) == {"t-3": "answer t-3"}
    assert first["t-1"] is second["t-1"], "one key asked twice in a round shares one answer"


def test_a_question_after_the_round_was_sent_goes_in_the_next_round() -> None:
    cluster = FakeCluster()
    rounds = Rounds[str](cluster.send, window_s=0.0)
    assert answers(rounds.ask(["a"], 5.0)) == {"a": "answer a"}
    assert answers(rounds.ask(["a", "b"], 5.0)) == {"a": "answer a", "b": "answer b"}
    assert [keys for keys, _ in cluster.calls] == [["a"], ["a", "b"]]


def test_an_error_for_one_key_fails_only_the_askers_of_that_key() -> None:
    cluster, window = FakeCluster(failing={"gone-0": KeyError("gone-0")}), HeldWindow()
    rounds = Rounds[str](cluster.send, window_s=0.05, sleep=window)
    opener, healthy = open_round_in_thread(rounds, ["kept-0"], window)
    asker, doomed = ask_in_thread(rounds, ["kept-0", "gone-0"])
    joined(rounds, ["gone-0"])
    window.go.set()
    opener.join(10)
    asker.join(10)

    assert answers(healthy) == {"kept-0": "answer kept-0"}
    assert doomed["kept-0"].result(timeout=5) == "answer kept-0"
    with pytest.raises(KeyError, match="gone-0"):
        doomed["gone-0"].result(timeout=5)


def test_a_call_that_fails_as_a_whole_fails_every_question_of_its_round() -> None:
    def closed_client(_keys: list[str], _timeout_s: float) -> Mapping[str, Future[Any]]:
        raise LagSourceUnavailable("the Kafka client for k:9092 was closed")

    window = HeldWindow()
    rounds = Rounds[str](closed_client, window_s=0.05, sleep=window)
    opener, first = open_round_in_thread(rounds, ["a"], window)
    asker, second = ask_in_thread(rounds, ["b"])
    joined(rounds, ["b"])
    window.go.set()
    opener.join(10)
    asker.join(10)
    for future in (first["a"], second["b"]):
        with pytest.raises(LagSourceUnavailable, match="was closed"):
            future.result(timeout=5)


def test_the_call_waits_as_long_as_the_most_patient_asker_from_when_it_is_sent() -> None:
    now = [100.0]
    cluster, window = FakeCluster(), HeldWindow()
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    rounds = Rounds[str](cluster.send, window_s=0.05, sleep=window, clock=clock)
    opener, _ = open_round_in_thread(rounds, ["a"], window, timeout_s=2.0)
    asker, _ = ask_in_thread(rounds, ["b"], 6.0)  # joins at 100.0: answers are wanted by 106.0
    joined(rounds, ["b"])
    now[0] = 100.5  # the window (held by the test) ends half a second later
    window.go.set()
    opener.join(10)
    asker.join(10)
    ((_, timeout_s),) = cluster.calls
    assert timeout_s == pytest.approx(5.5)


def test_a_call_that_leaves_a_key_out_fails_that_question_only() -> None:
    def forgetful(keys: list[str], _timeout_s: float) -> dict[str, Future[Any]]:
        return {key: FakeCluster().send([key], 1.0)[key] for key in keys if key != "lost"}

    rounds = Rounds[str](forgetful, window_s=0.0)
    asked = rounds.ask(["kept", "lost"], 5.0)
    assert asked["kept"].result(timeout=5) == "answer kept"
    with pytest.raises(LagError, match="left out 'lost'"):
        asked["lost"].result(timeout=5)
