"""One flag vocabulary across `groupops` commands (groupops.commands.options): every command takes
Kafka's spellings (`--bootstrap-server`, `--group`, `--topic`, `--command-config`,
`--command-property`) and kubectl's (`--output/-o`, `--namespace/-n`); the spellings from before
still parse to the same option; errors name an option as it was typed; `--version` prints the
package version; help never points at a DESIGN.md."""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.main import get_command
from typer.testing import CliRunner

from groupops.cli import app
from groupops.commands import options

GROUP_DOCUMENT = json.dumps(
    {
        "strategy": "range",
        "topics": {"t": 2},
        "members": [{"member_id": "C0", "topics": ["t"]}, {"member_id": "C1", "topics": ["t"]}],
    }
)


def registered_commands() -> list[str]:
    root = get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    return sorted(root.commands)


COMMANDS = registered_commands()


def parse(*args: str) -> Mapping[str, Any]:
    """The parameters a command line parses to, without running the command."""
    root = get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    name, *rest = args
    command = root.commands[name]
    with command.make_context(name, list(rest)) as context:
        return dict(context.params)


# -- the shared spellings and the old ones parse to the same option ------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ["lag", "--bootstrap-server", "k:9092", "--group", "g", "--topic", "t", "--output", "json"],
            {"bootstrap": "k:9092", "group": "g", "topics": ["t"], "output": options.DocumentOutput.json},
            id="lag-kafka-spellings",
        ),
        pytest.param(
            ["lag", "--bootstrap", "k:9092", "-g", "g", "-t", "t", "-o", "yaml"],
            {"bootstrap": "k:9092", "group": "g", "topics": ["t"], "output": options.DocumentOutput.yaml},
            id="lag-old-spellings",
        ),
        pytest.param(
            [
                "lag",
                "-b",
                "k:9092",
                "--group-id",
                "g",
                "--config",
                "a=1",
                "-c",
                "b=2",
                "--command-property",
                "c=3",
            ],
            {"bootstrap": "k:9092", "group": "g", "command_property": ["a=1", "b=2", "c=3"]},
            id="lag-property-aliases",
        ),
        pytest.param(
            [
                "assign",
                "--bootstrap-server",
                "k:9092",
                "--group",
                "g",
                "--command-property",
                "a=1",
                "-o",
                "table",
            ],
            {
                "bootstrap": "k:9092",
                "group_id": "g",
                "command_property": ["a=1"],
                "output_format": options.DocumentOutput.table,
            },
            id="assign-kafka-spellings",
        ),
        pytest.param(
            ["assign", "--bootstrap", "k:9092", "--kafka-config", "a=1", "--format", "table"],
            {
                "bootstrap": "k:9092",
                "command_property": ["a=1"],
                "output_format": options.DocumentOutput.table,
            },
            id="assign-old-spellings",
        ),
        pytest.param(
            ["snapshot", "--bootstrap-server", "k:9092", "--to", "d", "--group", "a", "--group", "b"],
            {"bootstrap": "k:9092", "groups": ["a", "b"]},
            id="snapshot-kafka-spellings",
        ),
        pytest.param(
            [
                "snapshot",
                "-b",
                "k:9092",
                "--to",
                "d",
                "--groups",
                "a",
                "-X",
                "a=1",
                "--config",
                "b=2",
                "-n",
                "3",
            ],
            {"bootstrap": "k:9092", "groups": ["a"], "command_property": ["a=1", "b=2"], "count": 3},
            id="snapshot-old-spellings",
        ),
        pytest.param(
            ["pipeline", "rates", "--bootstrap-server", "k:9092", "-o", "json"],
            {"bootstrap": "k:9092", "output": options.DocumentOutput.json},
            id="pipeline-kafka-spellings",
        ),
        pytest.param(
            ["pipeline", "rates", "--bootstrap", "k:9092", "--output", "yaml"],
            {"bootstrap": "k:9092", "output": options.DocumentOutput.yaml},
            id="pipeline-old-spellings",
        ),
        pytest.param(
            ["consume", "--bootstrap-server", "k:9092", "--group", "g", "--topic", "a", "-n", "ns", "-v"],
            {
                "bootstrap_servers": "k:9092",
                "group_id": "g",
                "topics": ["a"],
                "namespace": "ns",
                "verbose": True,
            },
            id="consume-kafka-spellings",
        ),
        pytest.param(
            [
                "consume",
                "--bootstrap-servers",
                "k:9092",
                "--group-id",
                "g",
                "--topics",
                "a,b",
                "--namespace",
                "ns",
            ],
            {"bootstrap_servers": "k:9092", "group_id": "g", "topics": ["a,b"], "namespace": "ns"},
            id="consume-old-spellings",
        ),
        pytest.param(
            ["operator", "-n", "a", "--namespace", "b", "--verbose"],
            {"namespace": ["a", "b"], "verbose": True},
            id="operator",
        ),
        pytest.param(
            [
                "reset-offsets",
                "p",
                "-n",
                "ns",
                "--to-earliest",
                "--topic",
                "t:0,1",
                "--dry-run",
                "-o",
                "json",
            ],
            {"namespace": "ns", "topics": ["t:0,1"], "execute": False, "output": options.DocumentOutput.json},
            id="reset-offsets-dry-run",
        ),
        pytest.param(
            ["reset-offsets", "p", "--namespace", "ns", "--to-latest", "-t", "t", "--execute"],
            {"namespace": "ns", "topics": ["t"], "execute": True, "output": options.DocumentOutput.table},
            id="reset-offsets-execute",
        ),
    ],
)
def test_every_command_parses_the_shared_and_the_old_spellings(
    args: list[str], expected: Mapping[str, Any]
) -> None:
    params = parse(*args)
    assert {key: params[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("command", "spellings"),
    [
        pytest.param("assign", (options.BOOTSTRAP_SERVER, options.GROUP, options.OUTPUT), id="assign"),
        pytest.param(
            "lag", (options.BOOTSTRAP_SERVER, options.GROUP, options.TOPIC, options.OUTPUT), id="lag"
        ),
        pytest.param(
            "snapshot",
            (options.BOOTSTRAP_SERVER, options.GROUP, options.TOPIC, options.COMMAND_CONFIG),
            id="snapshot",
        ),
        pytest.param("pipeline", (options.BOOTSTRAP_SERVER, options.OUTPUT), id="pipeline"),
        pytest.param(
            "consume",
            (options.BOOTSTRAP_SERVER, options.GROUP, options.TOPIC, options.NAMESPACE, options.VERBOSE),
            id="consume",
        ),
        pytest.param("operator", (options.NAMESPACE, options.VERBOSE), id="operator"),
        pytest.param("reset-offsets", (options.NAMESPACE, options.TOPIC, options.OUTPUT), id="reset-offsets"),
    ],
)
def test_a_shared_option_has_every_spelling_in_every_command(
    command: str, spellings: tuple[tuple[str, ...], ...]
) -> None:
    root = get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    declared = {tuple(p.opts + p.secondary_opts) for p in root.commands[command].params}
    for names in spellings:
        assert any(set(names) <= set(opts) for opts in declared), (command, names)


# -- errors name the option as typed ----------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        pytest.param("--command-property", "(--command-property)", id="current"),
        pytest.param("--config", "(--config)", id="old-long"),
        pytest.param("-X", "(-X)", id="old-short"),
    ],
)
def test_a_bad_property_is_reported_under_the_spelling_given(flag: str, named: str) -> None:
    result = CliRunner().invoke(app, ["lag", "-b", "127.0.0.1:9", "-g", "g", flag, "no-equals-sign"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: expected KEY=VALUE") and result.stderr.count("\n") == 1
    assert result.stderr.rstrip().endswith(named)


def test_an_unreadable_command_config_exits_2_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.properties"
    result = CliRunner().invoke(
        app, ["lag", "-b", "127.0.0.1:9", "-g", "g", "--command-config", str(missing)]
    )
    assert result.exit_code == 2
    assert f"(--command-config {missing})" in result.stderr


# -- --command-config and --command-property reach the Kafka client --------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a=1\nb = 2\n", {"a": "1", "b": "2"}, id="equals"),
        pytest.param("a: 1\nb 2\n", {"a": "1", "b": "2"}, id="colon-and-space"),
        pytest.param("# comment\n! other\n\n  a=1\n", {"a": "1"}, id="comments-and-blank-lines"),
        pytest.param("a=x=y\n", {"a": "x=y"}, id="separator-once"),
        pytest.param(
            "sasl.jaas.config=one \\\n    two\n", {"sasl.jaas.config": "one two"}, id="continued-line"
        ),
        pytest.param("a=\n", {"a": ""}, id="empty-value"),
    ],
)
def test_a_properties_file_is_read_as_kafkas_tools_read_it(
    text: str, expected: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "client.properties"
    path.write_text(text, encoding="utf-8")
    assert options.read_properties(path) == expected


def test_lag_passes_the_file_then_the_properties_over_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n", encoding="utf-8")
    seen: dict[str, Any] = {}

    def capture(settings: Any, group: str, topics: list[str]) -> Any:
        seen.update(config=dict(settings.client_config), group=group, topics=topics)
        raise typer.Exit(0)

    monkeypatch.setattr("groupops.commands.lag.read_group_offsets", capture)
    result = CliRunner().invoke(
        app,
        [
            "lag",
            "--bootstrap-server",
            "127.0.0.1:9",
            "--group",
            "g",
            "--topic",
            "t",
            "--command-config",
            str(path),
            "--command-property",
            "sasl.mechanism=SCRAM-SHA-512",
        ],
    )
    assert result.exit_code == 0, result.output
    assert seen == {
        "config": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
        "group": "g",
        "topics": ["t"],
    }


def test_consume_maps_the_shared_options_onto_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from groupops.consumer import ConsumerConfigError, RuntimeSettings  # noqa: PLC0415

    seen: dict[str, str] = {}

    def capture(env: Mapping[str, str] | None = None) -> RuntimeSettings:
        seen.update(env or {})
        raise ConsumerConfigError("GROUPOPS_POLICY", "captured")

    monkeypatch.setattr(RuntimeSettings, "from_env", staticmethod(capture))
    monkeypatch.setenv("GROUPOPS_KAFKA_PROPERTIES", '{"fetch.max.bytes": "1024", "client.id": "env"}')
    result = CliRunner().invoke(
        app,
        [
            "consume",
            "--bootstrap-server",
            "k:9092",
            "--group",
            "g",
            "--topic",
            "a",
            "--topics",
            "b,c",
            "--command-property",
            "client.id=flag",
        ],
    )
    assert result.exit_code == 2
    assert seen["GROUPOPS_KAFKA_BOOTSTRAP_SERVERS"] == "k:9092"
    assert seen["GROUPOPS_GROUP_ID"] == "g"
    assert seen["GROUPOPS_TOPICS"] == "a,b,c"
    assert json.loads(seen["GROUPOPS_KAFKA_PROPERTIES"]) == {"fetch.max.bytes": "1024", "client.id": "flag"}


# -- output -------------------------------------------------------------------------------------


def test_assign_prints_yaml_and_keeps_format_table_working() -> None:
    as_yaml = CliRunner().invoke(app, ["assign", "-o", "yaml"], input=GROUP_DOCUMENT)
    as_json = CliRunner().invoke(app, ["assign"], input=GROUP_DOCUMENT)
    assert as_yaml.exit_code == 0 and as_json.exit_code == 0
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)
    table = CliRunner().invoke(app, ["assign", "--format", "table"], input=GROUP_DOCUMENT)
    assert table.exit_code == 0 and "strategy range" in table.stdout


# -- version, completion, help --------------------------------------------------------------------


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"groupops {version('groupops')}"


def test_shell_completion_is_offered() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert "--install-completion" in result.stdout and "--show-completion" in result.stdout


@pytest.mark.parametrize("command", [*COMMANDS, None])
def test_help_points_at_docs_design_md_never_at_a_design_md(command: str | None) -> None:
    result = CliRunner().invoke(app, [command, "--help"] if command else ["--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "DESIGN.md" not in result.stdout


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--heartbeat-interval", "2"], "needs heartbeats"),
        (["--heartbeat-port", "7946", "--heartbeat-interval", "2"], "less than 2 s"),
        (
            ["--heartbeat-port", "7946", "--lease-duration", "12", "--heartbeat-interval", "0.5"],
            "at least 1 s",
        ),
    ],
)
def test_the_operator_refuses_a_heartbeat_interval_its_leases_cannot_carry(
    flags: list[str], named: str
) -> None:
    result = CliRunner().invoke(app, ["operator", "--host", "127.0.0.1", *flags])
    assert result.exit_code == 2, result.output
    assert named in result.output and "--heartbeat-interval" in result.output


def test_the_operator_refuses_a_negative_fallback_write_budget() -> None:
    result = CliRunner().invoke(
        app,
        ["operator", "--host", "127.0.0.1", "--heartbeat-port", "7946", "--fallback-writes-per-second", "-1"],
    )
    assert result.exit_code == 2, result.output
    assert "--fallback-writes-per-second" in result.output
