"""Reading a config: YAML, ``--set`` overrides, and error messages users can act on."""

from __future__ import annotations

import copy

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from servesim import yaml_io
from servesim.config.schema import Config
from servesim.errors import ConfigError


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def format_validation_error(err: ValidationError, source: str) -> str:
    """One line per problem: ``key.path: what is wrong (got VALUE)``."""
    lines = [f"invalid config {source}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        got = "" if e["type"] == "missing" else f" (got {_show(e.get('input'))})"
        lines.append(f"  {loc or '<root>'}: {msg}{got}")
    return "\n".join(lines)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a","b","c"], value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY.PATH=VALUE")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"--set {text!r}: empty key path")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: value is not valid YAML ({exc})") from None
    return path, value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set each ``KEY.PATH=VALUE`` into the raw config mapping, creating sections as needed."""
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for i, part in enumerate(path[:-1]):
            nxt = node.get(part)
            if nxt is None or isinstance(nxt, str) and part == "engine":
                nxt = {"name": nxt} if isinstance(nxt, str) else {}
                node[part] = nxt
            elif not isinstance(nxt, dict):
                where = ".".join(path[: i + 1])
                raise ConfigError(f"--set {text!r}: {where} is a value ({_show(nxt)}), not a section")
            node = nxt
        node[path[-1]] = value
    return data


def read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = yaml_io.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level, got {type(data).__name__}")
    return data


def load_config(source: str | Path | dict | Config | None = None, overrides: list[str] | None = None) -> Config:
    """Validate a config from a YAML path, a mapping, or the built-in default example.

    ``None`` means the bundled default example (servesim/examples/default.yaml).
    """
    if isinstance(source, Config) and not overrides:
        return source
    base_dir: Path | None = None
    if isinstance(source, Config):
        data = source.model_dump(mode="json")
        label = "<object>"
    elif isinstance(source, dict):
        data = copy.deepcopy(source)  # overrides write into nested sections: never the caller's
        label = "<mapping>"
    else:
        path = Path(source) if source is not None else default_example_path()
        data = read_yaml(path)
        label = str(path)
        base_dir = path.parent
    data = apply_overrides(data, list(overrides or []))
    try:
        cfg = Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, label)) from None
    if base_dir is not None:
        cfg._base_dir = base_dir
    return cfg


def config_base_dir(cfg: Config) -> Path | None:
    """Folder relative paths in the config are resolved against (the config file's)."""
    return cfg._base_dir


def default_example_path() -> Path:
    return Path(__file__).resolve().parent.parent / "examples" / "default.yaml"
