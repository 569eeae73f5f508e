"""`on_crash`: a loop that raises is reported once; one that returns or is cancelled is not."""

from __future__ import annotations

import asyncio

import pytest

from groupops.controller.supervise import on_crash


async def _ended(how: str) -> list[BaseException]:
    crashes: list[BaseException] = []
    release = asyncio.Event()

    async def loop() -> None:
        if how == "raises":
            raise RuntimeError("a bug in the loop")
        await release.wait()

    task = asyncio.create_task(loop())
    on_crash(task, crashes.append)
    await asyncio.sleep(0)
    if how == "cancelled":
        task.cancel()
    else:
        release.set()
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)  # done callbacks run in the next turn of the loop
    return crashes


def test_a_loop_that_raises_is_reported_with_its_error() -> None:
    crashes = asyncio.run(_ended("raises"))
    assert len(crashes) == 1
    assert isinstance(crashes[0], RuntimeError)
    assert str(crashes[0]) == "a bug in the loop"


@pytest.mark.parametrize("how", ["returns", "cancelled"])
def test_a_loop_that_ends_on_purpose_is_not_reported(how: str) -> None:
    assert asyncio.run(_ended(how)) == []
