"""The options `groupops` commands share, spelled once, so every command speaks one vocabulary.

Kafka's own tools give the words where they have one (kafka-consumer-groups.sh, and since
KIP-1147 every Kafka tool): `--bootstrap-server`, `--group`, `--topic`, `--command-config FILE`
(a properties file of client settings) and `--command-property KEY=VALUE`; kubectl gives
`--output/-o` and `--namespace/-n`. Spellings from before that (`--bootstrap`, `--config`,
`--format`, ...) stay as aliases of the same option, so scripts, the Makefile and the operator's
own pods keep working; help and docs show the first spelling.

| option                     | also accepted (older spellings)                    | commands            |
|----------------------------|----------------------------------------------------|---------------------|
| --bootstrap-server, -b     | --bootstrap, --bootstrap-servers                   | assign, lag,        |
|                            |                                                    | snapshot, pipeline, |
|                            |                                                    | consume             |
| --group, -g                | --group-id, --groups                               | assign, lag,        |
|                            |                                                    | snapshot, consume   |
| --topic, -t                | --topics                                           | lag, snapshot,      |
|                            |                                                    | reset-offsets,      |
|                            |                                                    | consume             |
| --command-config FILE      | (new)                                              | assign, lag,        |
| --command-property K=V     | --config, --kafka-config, -X, -c                   | snapshot, consume   |
| --output, -o               | --format                                           | assign, lag,        |
|                            |                                                    | snapshot, pipeline, |
|                            |                                                    | reset-offsets       |
| --namespace, -n            |                                                    | consume, operator,  |
|                            |                                                    | reset-offsets       |
| --verbose, -v              |                                                    | consume, operator   |

Errors name an option the way the command line spelled it (`Error: <what> (--config)` when the
user typed `--config`), else by its first spelling: `spelled` looks it up in the arguments the
`groupops` group recorded (`GroupopsGroup`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
import yaml
from typer.core import TyperGroup

from groupops.commands.errors import fail

__all__ = [
    "BOOTSTRAP_SERVER",
    "COMMAND_CONFIG",
    "COMMAND_PROPERTY",
    "GROUP",
    "NAMESPACE",
    "OUTPUT",
    "TOPIC",
    "VERBOSE",
    "DocumentOutput",
    "GroupopsGroup",
    "StreamOutput",
    "bootstrap_server",
    "client_properties",
    "command_config",
    "command_property",
    "group",
    "namespace",
    "output",
    "print_document",
    "read_properties",
    "spelled",
    "topic",
    "verbose",
]

# The spellings of each shared option: the first is the one help and docs show.
BOOTSTRAP_SERVER = ("--bootstrap-server", "-b", "--bootstrap", "--bootstrap-servers")
GROUP = ("--group", "-g", "--group-id", "--groups")
TOPIC = ("--topic", "-t", "--topics")
COMMAND_CONFIG = ("--command-config",)
COMMAND_PROPERTY = ("--command-property", "--config", "--kafka-config", "-X", "-c")
OUTPUT = ("--output", "-o", "--format")
NAMESPACE = ("--namespace", "-n")
VERBOSE = ("--verbose", "-v")


class DocumentOutput(StrEnum):
    """One document out: a table for people, JSON or YAML for machines."""

    table = "table"
    json = "json"
    yaml = "yaml"


class StreamOutput(StrEnum):
    """A line per round out (`groupops snapshot`): JSON Lines for machines."""

    table = "table"
    json = "json"


# -- option factories: use as `Annotated[str, options.bootstrap_server()]` ----------------------


def bootstrap_server(help: str = "Kafka bootstrap servers, host:port[,...].") -> Any:
    return typer.Option(*BOOTSTRAP_SERVER, help=help)


def group(help: str = "Consumer group id.") -> Any:
    return typer.Option(*GROUP, help=help)


def topic(help: str = "Topic (repeatable).") -> Any:
    return typer.Option(*TOPIC, help=help)


def command_config() -> Any:
    return typer.Option(
        *COMMAND_CONFIG,
        help="Properties file of Kafka client settings (security.protocol, sasl.*, ssl.*), as Kafka's tools "
        "take; --command-property wins over it.",
        dir_okay=False,
    )


def command_property() -> Any:
    return typer.Option(
        *COMMAND_PROPERTY, help="One librdkafka property KEY=VALUE (repeatable); wins over --command-config."
    )


def output(help: str = "table for people; json or yaml for machines.") -> Any:
    return typer.Option(*OUTPUT, help=help)


def namespace(help: str) -> Any:
    return typer.Option(*NAMESPACE, help=help)


def verbose() -> Any:
    return typer.Option(*VERBOSE, help="Log at debug level.")


# -- how the command line spelled an option ------------------------------------------------------

_ARGUMENTS: ContextVar[tuple[str, ...]] = ContextVar("groupops_arguments", default=())


class GroupopsGroup(TyperGroup):
    """The `groupops` command group: records the arguments of each invocation, for `spelled`."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        given = kwargs.get("args", args[0] if args else None)
        token = _ARGUMENTS.set(tuple(sys.argv[1:] if given is None else given))
        try:
            return super().main(*args, **kwargs)
        finally:
            _ARGUMENTS.reset(token)


def spelled(spellings: Sequence[str]) -> str:
    """The spelling of an option as this invocation typed it (`--config`, `--format`, ...), else
    its first spelling: what an error message names, so the user recognises it."""
    for argument in _ARGUMENTS.get():
        if argument == "--":
            break
        for spelling in spellings:
            if argument == spelling or argument.startswith(f"{spelling}="):
                return spelling
            if len(spelling) == 2 and not argument.startswith("--") and argument.startswith(spelling):
                return spelling  # a short option with its value attached: -Xkey=value
    return spellings[0]


# -- Kafka client properties: --command-config FILE and --command-property KEY=VALUE -------------


def client_properties(config_file: Path | None, pairs: Iterable[str]) -> dict[str, str]:
    """The librdkafka properties of `--command-config` overridden by `--command-property`, as in
    Kafka's tools; bad input exits 2 naming the option as typed."""
    properties = {} if config_file is None else read_properties(config_file)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            fail(f"expected KEY=VALUE, got {pair!r} ({spelled(COMMAND_PROPERTY)})")
        properties[key.strip()] = value
    return properties


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file (what Kafka's `--command-config` reads): `key=value`, `key: value`
    or `key value` lines, `#` and `!` comments, a trailing backslash continuing a line. Unicode
    escapes are not decoded (librdkafka property values do not need them)."""
    where = f"{spelled(COMMAND_CONFIG)} {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        fail(f"cannot read the properties file: {e.strerror} ({where})")
    except UnicodeDecodeError:
        fail(f"the properties file is not UTF-8 text ({where})")
    properties: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split_property(line)
        if not key:
            fail(f"line {number}: expected key=value, got {line!r} ({where})")
        properties[key] = value
    return properties


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    pending, first = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if not pending:
            first = number
        backslashes = len(line) - len(line.rstrip("\\"))
        if backslashes % 2 == 1:
            pending += line[:-1]
            continue
        yield first, (pending + line).strip()
        pending = ""
    if pending:
        yield first, pending.strip()


def _split_property(line: str) -> tuple[str, str]:
    for index, char in enumerate(line):
        if char in "=:" or char.isspace():
            key, rest = line[:index], line[index:].lstrip()
            if not char.isspace() or rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip()  # the separator itself
            return key.strip(), rest
    return line.strip(), ""


# -- documents for machines -----------------------------------------------------------------------


def print_document(document: Mapping[str, Any], fmt: DocumentOutput) -> None:
    """One document on stdout as compact JSON (one line) or YAML (block style, keys in order)."""
    if fmt is DocumentOutput.yaml:
        sys.stdout.write(yaml.safe_dump(_plain(document), sort_keys=False, allow_unicode=True))
    else:
        json.dump(document, sys.stdout, default=str, separators=(",", ":"))
        sys.stdout.write("\n")
    sys.stdout.flush()


def _plain(value: Any) -> Any:
    """Tuples, enums and other scalars as YAML's safe dumper takes them (what json's default=str does)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
