"""Test-wide set-up: the shared fixture plugins under tests/fixtures/, the lanes of `make test`
(tests/lanes.py), and hypothesis without its per-example deadline."""

from hypothesis import HealthCheck, settings

pytest_plugins: list[str] = ["tests.fixtures.stack", "tests.lanes", "pytester"]

# How fast an example runs is a benchmark's question (benchmarks/), not a test's: a deadline or a
# too-slow health check only measures how busy the machine is, and `make test` runs unit tests
# niced beside the e2e tests (tests/lanes.py).
settings.register_profile("groupops", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("groupops")
