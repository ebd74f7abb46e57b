"""Typed run specs read and written: everything one run uses, built once from the validated config.

A spec is a frozen dataclass per run set (dlbench.sweep.RunSet: a subclass of dlbench.spec_types.Run,
in the workload's definition.py). The workflow builds it and hands it
to the run as JSON (a plain `params:` value, so that Snakemake reruns a run whose spec
changed); the trainer reads it back with `spec_from_dict`, which finds its type by the run set
it names (dlbench.definitions) and fails on a missing or unknown key, naming it. The whole spec
is stored in the run's record.
"""
import dataclasses
import json
import types
import typing

from dlbench.definitions import run_set, run_sets


class SpecError(ValueError):
    """A spec that cannot be built or read; the message names the key."""


def _convert(kind, value, where):
    """value (from JSON) as `kind`, a dataclass, a tuple, an optional or a plain type."""
    if dataclasses.is_dataclass(kind):
        return _from_dict(kind, value, where)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        (kind,) = [a for a in args if a is not type(None)]
        return _convert(kind, value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"{where}: expected a list, got {value!r}")
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SpecError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value


def _from_dict(cls, data, where):
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    missing = sorted(set(fields) - set(data))
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(unknown)} for a {cls.__name__}")
    if missing:
        raise SpecError(f"{where}: missing key(s) {', '.join(missing)} for a {cls.__name__}")
    hints = typing.get_type_hints(cls)
    return cls(**{name: _convert(hints[name], data[name], f"{where}.{name}") for name in fields})


def spec_from_dict(data):
    """The typed spec of a dict (a record's spec, or JSON from the workflow)."""
    found = run_set(data.get("run_set")) if isinstance(data, dict) else None
    if found is None:
        raise SpecError(f"spec: run_set must be one of {', '.join(run_sets())}, got "
                        f"{data.get('run_set') if isinstance(data, dict) else data!r}")
    return _from_dict(found.spec_type, data, "spec")


def spec_to_dict(spec):
    return dataclasses.asdict(spec)


def spec_to_json(spec):
    """Canonical JSON: the same spec is the same text, so Snakemake sees only real changes."""
    return json.dumps(spec_to_dict(spec), sort_keys=True, separators=(",", ":"))
