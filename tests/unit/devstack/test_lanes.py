"""`make test`'s lanes (tests/lanes.py): each test in exactly one lane, chosen by its directory and
its `no_time_bound` mark; the runner runs the shared lane niced and the spark lane at idle
priority, and its exit status is a failing lane's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.lanes import LANES

PROJECT = Path(__file__).resolve().parents[3]

TREE = {
    "tests/e2e/test_failover_bound.py": "def test_within_the_lease():\n    pass\n",
    "tests/e2e/test_outcome_only.py": (
        "import pytest\n\npytestmark = pytest.mark.no_time_bound\n\ndef test_eventually():\n    pass\n"
    ),
    "tests/integration/test_lease_expiry.py": "def test_expires():\n    pass\n",
    "tests/unit/test_pure.py": "import os\n\ndef test_pure():\n    assert os.nice(0) >= 10\n",
    "tests/pipeline/test_jobs.py": (
        "import os\n\ndef test_job():\n"
        "    assert os.sched_getscheduler(0) == os.SCHED_IDLE\n    assert {outcome}\n"
    ),
}
EXPECTED = {
    "timed": {"test_failover_bound.py::test_within_the_lease", "test_lease_expiry.py::test_expires"},
    "shared": {"test_outcome_only.py::test_eventually", "test_pure.py::test_pure"},
    "spark": {"test_jobs.py::test_job"},
}


def write_tree(root: Path, *, spark_passes: bool) -> None:
    (root / "conftest.py").write_text('pytest_plugins = ["tests.lanes"]\n')
    for name, text in TREE.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(outcome=spark_passes))


def collected(pytester: pytest.Pytester, *args: str) -> set[str]:
    result = pytester.runpytest_subprocess("--collect-only", "-q", *args)
    return {line.rsplit("/", 1)[-1] for line in result.outlines if "::" in line}


@pytest.fixture
def tree(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # The tree's own tests/ has no __init__.py, so `tests.lanes` resolves to the project's.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")]))
    write_tree(pytester.path, spark_passes=True)
    return pytester


def test_each_test_is_in_exactly_one_lane_by_directory_and_mark(tree: pytest.Pytester) -> None:
    lanes = {lane: collected(tree, f"--lane={lane}") for lane in LANES}
    assert lanes == EXPECTED
    assert collected(tree) == set().union(*EXPECTED.values()), "without --lane every test runs"


def test_an_unknown_lane_is_refused_by_name(tree: pytest.Pytester) -> None:
    result = tree.runpytest_subprocess("--lane=fast")
    assert result.ret != 0
    assert "invalid choice: 'fast'" in result.stderr.str()


def test_the_runner_runs_every_lane_and_fails_with_a_failing_lane(tree: pytest.Pytester) -> None:
    passing = tree.run(sys.executable, "-m", "tests.lanes", "-q")
    assert passing.ret == 0, passing.stdout.str()
    summary = passing.stdout.str()
    for lane in LANES:
        assert (tree.path / "test-output" / "lanes" / f"{lane}.log").is_file()
        assert f"{lane}" in summary
    assert summary.count(" passed") >= 3

    write_tree(tree.path, spark_passes=False)
    failing = tree.run(sys.executable, "-m", "tests.lanes", "-q")
    assert failing.ret == 1, failing.stdout.str()
    assert "spark   FAILED (exit 1)" in failing.stdout.str()
    assert "timed   passed" in failing.stdout.str()
