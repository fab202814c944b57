"""Option values passed without Typer's coercion are what it would have made of them.

The CLI skips Typer's pydantic-based coercion where the result is plain
(``cli._plain_value``), so that a delivery filter or a learn-on-move pipe
answered by a daemon never imports pydantic. These tests run Typer's own
coercion on the same values for every parameter of every command.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import pytest
import typer

from spamfilter import cli
from spamfilter.cli import COMMAND_MODULES, app


def every_parameter() -> list[tuple[str, Any]]:
    group = typer.main.get_command(app)
    out = [("", p) for p in group.params]
    for name in COMMAND_MODULES:
        command = group.get_command(None, name)  # type: ignore[arg-type]
        for sub in getattr(command, "commands", {}).values():
            out += [(f"{name} {sub.name}", p) for p in sub.params]
        out += [(name, p) for p in command.params]
    return out


def samples(param: Any) -> list[Any]:
    annotation = param.type_descriptor.annotation
    values: list[Any] = [None, "text", "-", ("a", "b"), (), param.default, 0, 1, 0.5, True, False]
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        values += [m.value for m in annotation] + [str(m.value).upper() for m in annotation] + list(annotation)
    return values


def test_every_plain_value_is_what_typer_would_make_of_it() -> None:
    checked: set[tuple[str, str]] = set()
    ctx = typer.Context(typer.main.get_command(app))
    for where, param in every_parameter():
        for value in samples(param):
            try:
                plain, mine = cli._plain_value(param, value)
            except typer.BadParameter:
                # refused here as Typer refuses it (with plainer words)
                with pytest.raises(typer.BadParameter):
                    param.get_runtime_param().coerce(value, param=param, ctx=ctx)
                continue
            if not plain:
                continue
            theirs = param.get_runtime_param().coerce(value, param=param, ctx=ctx)
            assert (type(mine), mine) == (type(theirs), theirs), (where, param.name, value)
            checked.add((where, str(param.name)))
    # What a daemon-answered `filter --connect` and `mark --connect` pass, among others.
    assert {("", "db"), ("", "config_file"), ("", "user"), ("filter", "connect"), ("mark", "connect"), ("mark", "label"), ("mark", "sources")} <= checked
    assert len(checked) > 100


@pytest.mark.parametrize(("command", "name"), [("classify", "fmt"), ("train", "margin"), ("top-words", "n"), ("top-words", "min_count")])
def test_a_default_that_is_not_text_is_passed_as_it_is(command: str, name: str) -> None:
    # An Enum member, a float, an int: what every run of these commands
    # passes when the option is not given.
    param = next(p for where, p in every_parameter() if where == command and p.name == name)
    assert type(param.default) is not str
    assert cli._plain_value(param, param.default) == (True, param.default)


@pytest.mark.parametrize("value", ["3", "x", 3])
def test_values_that_need_typer_are_left_to_it(value: Any) -> None:
    jobs = next(p for where, p in every_parameter() if where == "classify" and p.name == "jobs")
    assert cli._plain_value(jobs, value) == (False, None)
