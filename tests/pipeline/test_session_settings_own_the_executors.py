"""The executors' Python and what they are shipped are session settings (`ExecutorSettings`): the
session starts with them (nothing is changed on a running context), the CLI's `--executor-python`,
`--py-files` and `--archives` become them, and settings that cannot work are refused naming the
setting or the option. That the cluster's executors really run that Python and import the shipped
wheel is test_cluster_runs_the_shipped_package.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from groupops.cli import app
from groupops.pipeline import session
from groupops.pipeline.session import ExecutorSettings, SessionSettings, SessionSettingsError

pytestmark = pytest.mark.pipeline


def test_by_default_executors_run_the_drivers_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", "/somewhere/else/python")
    assert ExecutorSettings().resolved_python() == sys.executable
    assert ExecutorSettings().spark_config() == {}
    assert SessionSettings().executors == ExecutorSettings()


def test_under_spark_submit_the_default_is_spark_submits_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "41234")
    monkeypatch.setenv("PYSPARK_PYTHON", "./env/bin/python")  # spark.pyspark.python, as spark-submit sets it
    assert ExecutorSettings().resolved_python() == "./env/bin/python"
    assert ExecutorSettings(python="/usr/bin/python3").resolved_python() == "/usr/bin/python3"


def test_archives_become_the_property_spark_ships_them_by() -> None:
    settings = ExecutorSettings(
        python="./env/bin/python",
        py_files=("/dist/groupops-0.1.0.zip", "/dist/extra.py"),
        archives=("/dist/env.tar.gz#env", "/dist/data.zip"),
    )
    # py-files are added to the started context (addPyFile), not passed as a property.
    assert settings.spark_config() == {"spark.archives": "/dist/env.tar.gz#env,/dist/data.zip"}


@pytest.mark.parametrize(
    ("fields", "setting", "message"),
    [
        pytest.param({"python": " "}, "executors.python", "empty path", id="blank-python"),
        pytest.param(
            {"py_files": ("/dist/groupops-0.1.0-py3-none-any.whl",)},
            "executors.py_files",
            "ship a wheel under a .zip name",
            id="wheel-suffix",
        ),
        pytest.param({"archives": ("#env",)}, "executors.archives", "no archive before '#'", id="no-archive"),
    ],
)
def test_settings_that_cannot_work_are_refused_naming_the_setting(
    fields: dict[str, object], setting: str, message: str
) -> None:
    with pytest.raises(SessionSettingsError) as caught:
        ExecutorSettings(**fields)  # type: ignore[arg-type]
    assert caught.value.setting == setting
    assert message in str(caught.value)


def test_the_running_session_started_with_its_executor_python(spark: SparkSession) -> None:
    assert spark.sparkContext.pythonExec == sys.executable


def test_a_running_session_is_not_silently_reused_with_another_python(spark: SparkSession) -> None:
    other = SessionSettings(master="local[2]", executors=ExecutorSettings(python="/opt/other/bin/python"))
    with pytest.raises(SessionSettingsError, match="already running with executors on") as caught:
        session.build_session(other)
    assert caught.value.setting == "executors.python"
    assert spark.sparkContext.pythonExec == sys.executable


def test_the_cli_options_become_the_sessions_executor_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[SessionSettings] = []

    def record(settings: SessionSettings) -> SparkSession:
        seen.append(settings)
        raise SessionSettingsError("stopped before Spark", "executors.python")

    monkeypatch.setattr(session, "build_session", record)
    wheel = tmp_path / "groupops-0.1.0.zip"
    archive = tmp_path / "env.tar.gz"
    wheel.write_bytes(b"PK")
    archive.write_bytes(b"")
    result = CliRunner().invoke(
        app,
        [
            "pipeline",
            "plan",
            "--input",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--master",
            "spark://127.0.0.1:7077",
            "--py-files",
            str(wheel),
            "--archives",
            f"{archive}#env",
            "--executor-python",
            "./env/bin/python",
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: stopped before Spark (--executor-python)"
    (settings,) = seen
    assert settings.master == "spark://127.0.0.1:7077"
    assert settings.executors == ExecutorSettings(
        python="./env/bin/python", py_files=(str(wheel),), archives=(f"{archive}#env",)
    )


def test_a_wheel_named_whl_exits_2_naming_the_option(tmp_path: Path) -> None:
    wheel = tmp_path / "groupops-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    result = CliRunner().invoke(app, ["pipeline", "plan", "--input", str(tmp_path), "--py-files", str(wheel)])
    assert result.exit_code == 2
    assert "ship a wheel under a .zip name" in result.stderr
    assert result.stderr.rstrip().endswith("(--py-files)")
