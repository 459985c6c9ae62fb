"""Settings declared once: a dataclass field made by `option` (or `option_group`) says how a
command line takes it, and the click options are generated from the fields (`click_options`),
so a setting's name, type, default, range, help and ``ADAPTER_*`` variable live in one place
(``adapter/settings.py``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

import click

ENV_PREFIX = "ADAPTER_"

T = TypeVar("T")
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True)
class Option:
    """How a command line takes one setting, beyond its name and default: ``type`` when the
    default's type is not enough (a range, choices, a file)."""

    help: str | None
    type: click.ParamType | None = None
    metavar: str | None = None
    # Every command that reaches Redis takes it too (adapter/cli/options.py `redis_target`)
    shared: bool = False


def option(
    default: Any,
    help: str | None,
    type: click.ParamType | None = None,
    metavar: str | None = None,
    *,
    shared: bool = False,
) -> Any:
    """A dataclass field taken as ``--<field>`` (a bool as ``--<field>/--no-<field>``) or
    ``ADAPTER_<FIELD>``."""
    return field(default=default, metadata={"option": Option(help, type, metavar, shared)})


def option_group(default: Any, prefix: str, **options: Option) -> Any:
    """A dataclass field holding a group of settings (a frozen dataclass that ``mapping``
    takes whole); its field ``f`` is taken as ``--<prefix>-<f>`` or ``ADAPTER_<PREFIX>_<F>``.
    Its fields not in ``options`` are not on the command line."""
    return field(default=default, metadata={"group": (prefix, options)})


@dataclass(frozen=True)
class DeclaredOption:
    """One command-line option, as `declared_options` lists them."""

    name: str  # the parameter click passes: "port", "kafka_group_min_session_timeout_ms"
    default: Any
    option: Option
    field: str  # the field it sets: of the settings, or of the group `group` names
    group: str | None = None  # the settings' field holding its group; None: their own

    @property
    def envvar(self) -> str:
        return ENV_PREFIX + self.name.upper()

    def click_option(self) -> Decorator:
        flag = "--" + self.name.replace("_", "-")
        if isinstance(self.default, bool):
            flag = f"{flag}/--no-{flag[2:]}"
        return click.option(
            flag,
            default=self.default,
            type=self.option.type,
            metavar=self.option.metavar,
            # A shared option names its variable, or click would name it after the command
            # (ADAPTER_TOPIC_CREATE_REDIS_PASSWORD); the others get the same name from serve's
            # auto_envvar_prefix, and keep click's error messages without "(env var: ...)".
            envvar=self.envvar if self.option.shared else None,
            show_envvar=True,
            help=self.option.help,
        )


def declared_options(settings: type) -> list[DeclaredOption]:
    """The options of dataclass ``settings``, in its field order."""
    declared: list[DeclaredOption] = []
    for setting in fields(settings):
        if "option" in setting.metadata:
            option = setting.metadata["option"]
            declared.append(DeclaredOption(setting.name, setting.default, option, setting.name))
        elif "group" in setting.metadata:
            prefix, options = setting.metadata["group"]
            for name, option in options.items():
                default = getattr(setting.default, name)
                declared.append(
                    DeclaredOption(f"{prefix}_{name}", default, option, name, setting.name)
                )
    return declared


def click_options(declared: list[DeclaredOption]) -> Decorator:
    """A decorator adding ``declared``'s options to a click command, in that order."""

    def add_options(command: Callable[..., Any]) -> Callable[..., Any]:
        for one in reversed(declared):
            command = one.click_option()(command)
        return command

    return add_options


def from_options(settings: type[T], values: Mapping[str, Any]) -> T:
    """The ``settings`` that the command line's ``values`` (by `DeclaredOption` name) give;
    a group's fields not on the command line keep their defaults."""
    own: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    for declared in declared_options(settings):
        values_of = own if declared.group is None else groups.setdefault(declared.group, {})
        values_of[declared.field] = values[declared.name]
    defaults = settings()
    for group, group_values in groups.items():
        own[group] = replace(getattr(defaults, group), **group_values)
    return settings(**own)
