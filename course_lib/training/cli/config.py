"""A run's configuration: the task's defaults, a JSON or TOML file, then the command line; checked once.

Every mistake a user can fix (a syntax error in the file, an unknown key, a value of the wrong type or out of
range, two keys that exclude each other, a missing data file) raises a :class:`ConfigError` whose message
is one line naming where it comes from: the file and its line, or the key. ``course-train`` prints it
without a traceback and exits with code 2.

``quick=True`` (``course-train --quick``, or ``COURSE_SMOKE=1`` as in the notebooks) starts from the task's
quick configuration (:attr:`course_lib.training.cli.tasks.Task.quick`: a tiny model and a few dozen steps) instead
of the notebook's; the file and the command line still override it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: TOML needs the tomli package there
    tomllib = None

from course_lib.training.cli.tasks import TASKS

__all__ = ["ConfigError", "load_config", "read_config_file", "quick_requested"]

# Keys whose value must be one of a few words (the type check alone would accept any string).
CHOICES = {"amp": ("auto", "off"), "architecture": ("transformer", "gru", "gru_additive"),
           "activation": ("relu", "gelu", "gelu_tanh"), "positions": ("sinusoidal", "learned"),
           "rope_layout": ("half", "interleaved")}


class ConfigError(ValueError):
    """A configuration, data or resume error the user can fix: one line, exit code 2 from ``course-train``."""


def quick_requested(flag: bool = False) -> bool:
    """True with ``--quick`` or when the environment says ``COURSE_SMOKE=1`` (as for the notebooks)."""
    return flag or os.environ.get("COURSE_SMOKE", "") == "1"


def read_config_file(path: str | os.PathLike) -> dict:
    """The keys of a ``.json`` or ``.toml`` file; a ConfigError naming the file (and the line) otherwise."""
    name = os.fspath(path)
    if not name.endswith((".json", ".toml")):
        raise ConfigError(f"--config {name}: the file must end in .json or .toml")
    try:
        text = Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"--config {name}: cannot read it ({error})") from None
    if name.endswith(".toml"):
        if tomllib is None:
            raise ConfigError(f"--config {name}: reading TOML needs Python 3.11 or newer; use a .json file")
        try:
            updates = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:  # its message ends with "(at line L, column C)"
            raise ConfigError(f"{name}: invalid TOML: {error}") from None
    else:
        try:
            updates = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{name}:{error.lineno}: invalid JSON: {error.msg} (column {error.colno})") from None
    if not isinstance(updates, dict):
        raise ConfigError(f"{name}: expected a table of configuration keys, got a {type(updates).__name__}")
    return updates


def _coerce(key: str, value: object, default: object, origin: str) -> object:
    """``value`` as the type of ``default`` (strings from ``--set`` converted); a ConfigError if it is not one."""
    if isinstance(default, bool) and isinstance(value, str):
        value = {"true": True, "false": False, "1": True, "0": False}.get(value.lower(), value)
    elif isinstance(default, (int, float)) and not isinstance(default, bool) and isinstance(value, str):
        try:
            value = type(default)(value)
        except ValueError:
            pass
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if type(value) is not type(default):
        raise ConfigError(f"{origin}: {key} must be a {type(default).__name__} (like the default {default!r}), "
                          f"got {value!r}")
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(f"{origin}: {key} must be one of {', '.join(map(repr, CHOICES[key]))}, got {value!r}")
    return value


def _check_ranges(config: dict) -> None:
    """The run's own keys: counts that must be positive, a fallback checkpoint kept."""
    for key in ("steps", "batch_size", "checkpoint_every", "accumulate"):
        if config[key] < 1:
            raise ConfigError(f"{key} must be >= 1, got {config[key]}")
    if config["keep_checkpoints"] < 2:
        raise ConfigError(f"keep_checkpoints must be >= 2 (a fallback for a damaged one), got "
                          f"{config['keep_checkpoints']}")


def load_config(task: str, path: str | os.PathLike | None = None, overrides: dict | None = None,
                quick: bool = False) -> dict:
    """The task's defaults (its quick ones with ``quick``), updated from a JSON or TOML file, then ``overrides``.

    Unknown keys, values of the wrong type or out of range, and keys that exclude each other raise a
    :class:`ConfigError` naming the key and where it was set (a typo never goes unseen).
    """
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; choose one of {sorted(TASKS)}")
    spec = TASKS[task]
    config = {**spec.defaults, **(spec.quick if quick else {})}
    sources = [(os.fspath(path), read_config_file(path))] if path else []
    sources.append(("command line", dict(overrides or {})))
    for origin, updates in sources:
        for key, value in updates.items():
            if key not in config:
                raise ConfigError(f"{origin}: unknown configuration key {key!r} for {task}; known keys: "
                                  f"{', '.join(sorted(config))}")
            config[key] = _coerce(key, value, spec.defaults[key], origin)
    _check_ranges(config)
    if spec.validate is not None:
        try:
            spec.validate(config)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    return config
