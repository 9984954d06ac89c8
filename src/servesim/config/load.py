"""Reading a config: YAML, ``--set`` overrides, and error messages users can act on."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from servesim import yaml_io
from servesim.config.limits import check_limits
from servesim.config.schema import Config
from servesim.errors import ConfigError, did_you_mean


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _quoted(text: str) -> list[str]:
    """The ``'...'`` items of pydantic's list of expected values or tags."""
    return re.findall(r"'([^']*)'", text or "")


def _unwrap(annotation: Any) -> list[Any]:
    """The alternatives of a field's type, Optional / Annotated / Union flattened."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return [alt for arg in get_args(annotation) for alt in _unwrap(arg)]
    return [annotation]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _tags(model: type[BaseModel]) -> set[str]:
    """Values of the ``Literal`` fields of a model: the tags a discriminated union picks it by."""
    out: set[str] = set()
    for f in model.model_fields.values():
        if get_origin(f.annotation) is Literal:
            out.update(str(a) for a in get_args(f.annotation))
    return out


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The config model (section) that pydantic's location ``loc`` points into, union tags
    followed; None where the location leaves the models (a dict of options, a list)."""
    options: list[Any] = [Config]
    for seg in loc:
        models = [t for t in options if _is_model(t)]
        if len(models) > 1:  # a union: this segment is the tag that picked one
            picked = [m for m in models if str(seg) in _tags(m)]
            if len(picked) == 1:
                options = picked
                continue
            return None
        if not models or seg not in models[0].model_fields:
            return None
        options = _unwrap(models[0].model_fields[seg].annotation)
    models = [t for t in options if _is_model(t)]
    return models[0] if len(models) == 1 else None


def _user_path(loc: tuple, data: Any, names_key: bool = True) -> tuple:
    """``loc`` as the keys the user wrote: pydantic inserts the tag of a discriminated union
    (``deployment.engine.sglang.x``) and validator names, which are no keys of the YAML.
    ``names_key``: the error is about the last segment as a key (missing or unknown), so it
    belongs to the path although the mapping lacks it."""
    out = []
    node = data
    for i, seg in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict):
            if seg in node or (last and names_key):
                out.append(seg)
                node = node.get(seg)
            continue  # a union tag or validator name: not in the user's mapping
        if isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node):
            out.append(seg)
            node = node[seg]
            continue
        if isinstance(node, str) and not last:  # a shorthand (``engine: sglang``): the rest is not there
            break
        out.append(seg)
        node = None
    return tuple(out)


#: pydantic's type errors, said as what the key takes.
_EXPECTED_TYPE = {"int_parsing": "an integer", "int_type": "an integer", "int_from_float": "a whole number",
                  "float_parsing": "a number", "float_type": "a number", "bool_parsing": "true or false",
                  "bool_type": "true or false", "string_type": "a string", "dict_type": "a section (a mapping)",
                  "list_type": "a list", "model_type": "a section (a mapping)"}


def _describe(e: dict, loc: tuple, data: Any) -> tuple[tuple, str]:
    """(path as written, message) for one pydantic error, in the user's words."""
    kind = e["type"]
    path = _user_path(loc, data, kind in ("missing", "extra_forbidden"))
    got = "" if kind == "missing" else f" (got {_show(e.get('input'))})"
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        hint = did_you_mean(loc[-1], model.model_fields) if model is not None else ""
        allowed = f"; allowed keys here: {', '.join(model.model_fields)}" if model is not None and not hint else ""
        return path, f"unknown key{hint}{allowed}"
    if kind == "missing":
        return path, "required key is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        ctx = e.get("ctx") or {}
        field = str(ctx.get("discriminator", "")).strip("'")
        tag_path = path + (field,) if isinstance(_node(data, path), dict) else path
        tags = _quoted(ctx.get("expected_tags", ""))
        if not tags:  # union_tag_not_found has no list: read it from the schema
            tags = _union_tags(loc)
        what = {"name": "engine", "kind": "workload kind", "model": "perf model", "dist": "distribution",
                "process": "arrival process"}.get(field, field)
        expected = f"expected one of {', '.join(repr(t) for t in tags)}" if tags else ""
        if kind == "union_tag_not_found":
            return tag_path, f"required key is missing: the {what} ({expected})"
        tag = ctx.get("tag")
        return tag_path, f"unknown {what} {tag!r}{did_you_mean(tag, tags)}; {expected}"
    if kind in ("literal_error", "enum"):
        choices = _quoted((e.get("ctx") or {}).get("expected", ""))
        if not choices:
            return path, f"{e['msg']}{got}"
        return path, f"unknown value{did_you_mean(e.get('input'), choices)}; expected one of " \
                     f"{', '.join(repr(c) for c in choices)}{got}"
    if kind in _EXPECTED_TYPE:
        return path, f"expected {_EXPECTED_TYPE[kind]}{got}"
    msg = e["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if msg.startswith("Input should be "):  # pydantic's wording for a bound or a shape
        msg = "must be " + msg[len("Input should be "):]
    return path, f"{msg}{got}"


def _node(data: Any, path: tuple) -> Any:
    for seg in path:
        if isinstance(data, dict):
            data = data.get(seg)
        elif isinstance(data, list) and isinstance(seg, int) and 0 <= seg < len(data):
            data = data[seg]
        else:
            return None
    return data


def _union_tags(loc: tuple) -> list[str]:
    """Tags a discriminated union at ``loc`` accepts (for an error that does not list them)."""
    parent = _model_at(loc[:-1]) if loc else None
    if parent is None or loc[-1] not in parent.model_fields:
        return []
    alts = [t for t in _unwrap(parent.model_fields[loc[-1]].annotation) if _is_model(t)]
    return sorted({tag for m in alts for tag in _tags(m)})


def format_validation_error(err: ValidationError, source: str, data: Any = None,
                            lines: dict[tuple, int] | None = None, overrides: list[str] | None = None) -> str:
    """One line per problem: ``key.path: what is wrong (got VALUE)``, with the path as written
    in the YAML and where it was set: its line, when known, or the ``--set`` that set it."""
    sets = [(tuple(parse_override(o)[0]), o) for o in overrides or []]
    out = [f"invalid config {source}" + (" with --set overrides:" if sets else ":")]
    seen = set()
    for e in err.errors():
        path, msg = _describe(e, tuple(e["loc"]), data if data is not None else {})
        key = ".".join(str(p) for p in path) or "<root>"
        line = _line_of(path, lines, e["type"] in ("missing", "union_tag_not_found"))
        by = next((o for sp, o in reversed(sets) if tuple(str(p) for p in path[:len(sp)]) == sp), None)
        text = f"  {key}: {msg}" + (f" [--set {by}]" if by else f" [line {line}]" if line else "")
        if text not in seen:
            seen.add(text)
            out.append(text)
    return "\n".join(out)


def _line_of(path: tuple, lines: dict[tuple, int] | None, missing: bool) -> int | None:
    """Line of the key at ``path``, or of the section holding it (a missing key)."""
    if not lines:
        return None
    return lines.get(path) or (lines.get(path[:-1]) if missing else None)  # a missing key: its section


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a","b","c"], value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY.PATH=VALUE")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"--set {text!r}: empty key path")
    try:
        value = yaml_io.safe_load(raw) if raw.strip() else None
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
    """The config file's top-level mapping; every problem a :class:`ConfigError` naming the file."""
    return _parse_yaml(_read_text(path), path)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a folder, expected a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _parse_yaml(text: str, path: Path) -> dict:
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

    ``None`` means the bundled default example (servesim/examples/default.yaml).  Errors
    name keys as the YAML writes them (with the line, for a file), suggest the closest
    known key or value, and include the limits of :mod:`servesim.config.limits`.
    """
    if isinstance(source, Config) and not overrides:
        return source
    base_dir: Path | None = None
    text: str | None = None
    if isinstance(source, Config):
        data = source.model_dump(mode="json")
        label = "<object>"
    elif isinstance(source, dict):
        data = copy.deepcopy(source)  # overrides write into nested sections: never the caller's
        label = "<mapping>"
    else:
        path = Path(source) if source is not None else default_example_path()
        text = _read_text(path)
        data = _parse_yaml(text, path)
        label = str(path)
        base_dir = path.parent
    data = apply_overrides(data, list(overrides or []))
    try:
        cfg = Config.model_validate(data)
    except ValidationError as err:
        # a key set by --set is reported with that --set, not a line of the file (format_validation_error)
        lines = yaml_io.key_lines(text) if text is not None else None
        raise ConfigError(format_validation_error(err, label, data, lines, list(overrides or []))) from None
    check_limits(cfg, label)
    if base_dir is not None:
        cfg._base_dir = base_dir
    return cfg


def config_base_dir(cfg: Config) -> Path | None:
    """Folder relative paths in the config are resolved against (the config file's)."""
    return cfg._base_dir


def default_example_path() -> Path:
    return Path(__file__).resolve().parent.parent / "examples" / "default.yaml"
