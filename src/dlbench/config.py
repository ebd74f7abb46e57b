"""Checks of a validated config that the JSON schema cannot express, naming the key.

The schema (schemas/config.schema.yaml) checks types and fills defaults; here the config
meets the list of frameworks (dlbench.frameworks) and each framework's strategies.
"""
from dlbench.frameworks import FRAMEWORKS


class ConfigError(ValueError):
    """A config value the workflow cannot run; the message names the key."""


def check_config(config):
    """Check the frameworks and strategies; fill each workload's strategies and weights for
    every framework (a framework left out takes all of its own strategies, and no weights)."""
    config.setdefault("frameworks", list(FRAMEWORKS))
    for framework in config["frameworks"]:
        if framework not in FRAMEWORKS:
            raise ConfigError(f"config frameworks: unknown framework {framework!r} "
                              f"(known: {', '.join(FRAMEWORKS)})")
    for workload in ("mnist", "chestxray"):
        strategies = config[workload]["strategies"]
        for framework, names in strategies.items():
            if framework not in FRAMEWORKS:
                raise ConfigError(f"config {workload}.strategies: unknown framework {framework!r}")
            unknown = [name for name in names if name not in FRAMEWORKS[framework].strategies]
            if unknown:
                raise ConfigError(f"config {workload}.strategies.{framework}: unknown strategy {unknown[0]!r} "
                                  f"({framework} has {', '.join(FRAMEWORKS[framework].strategies)})")
        config[workload]["strategies"] = {fw: list(strategies.get(fw, FRAMEWORKS[fw].strategies)) for fw in FRAMEWORKS}
        if any(devices > 1 for devices in config[workload]["devices"]):
            for framework in config["frameworks"]:
                if not config[workload]["strategies"][framework]:
                    raise ConfigError(f"config {workload}.strategies.{framework}: empty, but {workload}.devices "
                                      f"asks for more than one device (name a strategy, or leave the key out)")
    measurement = config["measurement"]
    if measurement["min_unit_steps"] > measurement["max_unit_steps"]:
        raise ConfigError(f"config measurement.min_unit_steps: {measurement['min_unit_steps']} is more than "
                          f"measurement.max_unit_steps ({measurement['max_unit_steps']})")
    split = config["chestxray"]["split"]
    if abs(sum(split.values()) - 1) > 1e-9:
        raise ConfigError(f"config chestxray.split: the fractions {split} sum to {sum(split.values()):g}, not 1")
    weights = config["chestxray"]["weights"]
    for framework in weights:
        if framework not in FRAMEWORKS:
            raise ConfigError(f"config chestxray.weights: unknown framework {framework!r}")
    config["chestxray"]["weights"] = {fw: weights.get(fw) for fw in FRAMEWORKS}
    return config


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
