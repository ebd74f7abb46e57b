"""Checks of a validated config that the JSON schema cannot express, naming the key.

The schema (schemas/config.schema.yaml) checks types and fills defaults; here the config
meets the lists of frameworks and workloads (dlbench.frameworks, dlbench.workloads), each
framework's strategies, and each workload's own checks (its definition.py).
"""
from dlbench.frameworks import FRAMEWORKS


class ConfigError(ValueError):
    """A config value the workflow cannot run; the message names the key."""


def check_renamed(config):
    """Stop on a key that was renamed so that one word has one meaning (a workload definition's
    RENAMED: {old key in its section: new key}), naming both, before the schema would call the
    old one merely unknown."""
    from dlbench.workloads import RENAMED, WORKLOADS, definition

    for old, new in RENAMED.items():
        if old in (config.get("workloads") or []):
            raise ConfigError(f"config workloads: workload {old!r} renamed to {new!r}")
    for workload in WORKLOADS:
        for old, new in getattr(definition(workload), "RENAMED", {}).items():
            section = config.get(workload)
            for parent in old.split(".")[:-1]:
                section = section.get(parent) if isinstance(section, dict) else None
            if isinstance(section, dict) and old.split(".")[-1] in section:
                raise ConfigError(f"config {workload}.{old}: renamed to {workload}.{new}")


def check_config(config):
    """Check the frameworks and workloads against their lists (dlbench.frameworks,
    dlbench.workloads), the measurement, and each workload's section (its definition's check,
    which may fill values: a framework's strategies, its weights)."""
    from dlbench.workloads import WORKLOADS, definition

    config.setdefault("frameworks", list(FRAMEWORKS))
    for framework in config["frameworks"]:
        if framework not in FRAMEWORKS:
            raise ConfigError(f"config frameworks: unknown framework {framework!r} "
                              f"(known: {', '.join(FRAMEWORKS)})")
    config.setdefault("workloads", list(WORKLOADS))
    for workload in config["workloads"]:
        if workload not in WORKLOADS:
            raise ConfigError(f"config workloads: unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")
    measurement = config["measurement"]
    if measurement["min_unit_steps"] > measurement["max_unit_steps"]:
        raise ConfigError(f"config measurement.min_unit_steps: {measurement['min_unit_steps']} is more than "
                          f"measurement.max_unit_steps ({measurement['max_unit_steps']})")
    for workload in WORKLOADS:
        definition(workload).check(config)
    return config


def check_strategies(config, section):
    """A section's strategies: known frameworks and strategies; filled for every framework (one
    left out takes all of its own; one given none runs on one device only)."""
    strategies = config[section]["strategies"]
    for framework, names in strategies.items():
        if framework not in FRAMEWORKS:
            raise ConfigError(f"config {section}.strategies: unknown framework {framework!r}")
        unknown = [name for name in names if name not in FRAMEWORKS[framework].strategies]
        if unknown:
            raise ConfigError(f"config {section}.strategies.{framework}: unknown strategy {unknown[0]!r} "
                              f"({framework} has {', '.join(FRAMEWORKS[framework].strategies)})")
    config[section]["strategies"] = {fw: list(strategies.get(fw, FRAMEWORKS[fw].strategies)) for fw in FRAMEWORKS}


def check_batch(key, batch, devices, samples, what):
    """A batch (per device, on `devices` devices) that the data it divides can fill."""
    if batch * devices > samples:
        on = f" on {devices} devices" if devices > 1 else ""
        raise ConfigError(f"config {key}: a batch of {batch}{on} is more than the {samples} {what}")


def check_modes(config, section):
    """A section's execution modes: known frameworks and modes; a framework left out runs in its
    default mode only (the first of its modes in src/dlbench/frameworks/__init__.py)."""
    modes = config[section]["modes"]
    for framework, names in modes.items():
        if framework not in FRAMEWORKS:
            raise ConfigError(f"config {section}.modes: unknown framework {framework!r}")
        known = [name for name, _ in FRAMEWORKS[framework].modes]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ConfigError(f"config {section}.modes.{framework}: unknown mode {unknown[0]!r} "
                              f"({framework} has {', '.join(known)})")
        if not names:
            raise ConfigError(f"config {section}.modes.{framework}: empty (name a mode, or leave the key out "
                              f"for {FRAMEWORKS[framework].default_mode})")
    config[section]["modes"] = {fw: list(modes.get(fw, [FRAMEWORKS[fw].default_mode])) for fw in FRAMEWORKS}


def load_config(*paths):
    """Config files merged as Snakemake merges --configfile (later keys win, recursively),
    validated against the schema (which fills the defaults) and checked. For code that
    runs outside the workflow (benchmarks, tests); it needs the driver's snakemake."""
    from pathlib import Path

    import yaml
    from snakemake.utils import validate

    def merge(base, other):
        for key, value in other.items():
            base[key] = merge(base.get(key, {}), value) if isinstance(value, dict) else value
        return base

    config = {}
    for path in paths:
        merge(config, yaml.safe_load(Path(path).read_text()) or {})
    check_renamed(config)
    validate(config, str(Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"))
    return check_config(config)


def check_yaml(path):
    """Raise ConfigError naming the file and line where a config file is not valid YAML."""
    import yaml

    try:
        with open(path) as f:
            yaml.safe_load(f)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(f"{path}: not valid YAML: {where}{getattr(err, 'problem', None) or err}") from None


def main():
    """python -m dlbench.config FILE...: check config files as the workflow would read them
    (config.yaml, then each FILE, as --configfile FILE...), naming the file, line or key."""
    import sys
    from pathlib import Path

    files = [Path(__file__).resolve().parents[2] / "config.yaml", *sys.argv[1:]]
    try:
        for path in files:
            check_yaml(path)
        load_config(*files)
    except ConfigError as err:
        raise SystemExit(f"error: {err}")
    except Exception as err:  # the schema's ValidationError names the key
        raise SystemExit(f"error: {err}")
    print(f"ok: {', '.join(map(str, files))}")


if __name__ == "__main__":
    main()
