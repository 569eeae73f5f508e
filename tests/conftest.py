"""Test-wide set-up: the shared fixture plugins under tests/fixtures/."""

pytest_plugins: list[str] = ["tests.fixtures.stack"]
