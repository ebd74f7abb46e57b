"""Checks of a validated config that the JSON schema cannot express, naming the key.

The schema (schemas/config.schema.yaml) checks types and fills defaults; here the config
meets the lists of frameworks, workloads and studies (dlbench.frameworks, dlbench.workloads,
dlbench.studies) and each workload's and study's own checks (its definition.py, which checks its sweep's dimensions with
dlbench.sweep's check_strategies, check_modes and check_batch).
"""
import os
import sys
from pathlib import Path

from dlbench.clock import planted_slowdown
from dlbench.definitions import definition
from dlbench.envs import interpreter_error
from dlbench.errors import ConfigError
from dlbench.frameworks import FRAMEWORKS
from dlbench.studies import RENAMED, STUDIES
from dlbench.workloads import WORKLOADS


def studies_as_workloads(config, warn=None):
    """A config from before the studies had their own key lists them under workloads: take them as
    studies, for this release. The config's studies are then the ones its workloads list (what that
    list meant: a study it leaves out did not run), and a warning, printed once (the studies are
    gone from workloads after it), names the key `studies`."""
    listed = [name for name in config.get("workloads") or [] if name in STUDIES]
    if not listed:
        return config
    config["workloads"] = [name for name in config["workloads"] if name not in STUDIES]
    config["studies"] = listed
    print(f"warning: config workloads: {', '.join(listed)} {'is a study' if len(listed) == 1 else 'are studies'}, "
          f"taken as studies: [{', '.join(listed)}] (the studies that run) for this release; list them under the "
          f"key studies, not workloads", file=warn or sys.stderr)
    return config


# Renamed so that one word has one meaning; an old config keeps working for this release, with a
# warning naming the new key or value: {old top-level key: new key}.
RENAMED_KEYS = {"device": "device_kind"}


def take_renamed(config, warn=None):
    """Read a renamed key (RENAMED_KEYS) or value (a definition's RENAMED_VALUES: {key in its section:
    {old value: new value}}) under its new name, printing one warning each that names the new one."""
    for old, new in RENAMED_KEYS.items():
        if old in config:  # only a user's file sets it (config.yaml sets the new key): it wins
            config[new] = config.pop(old)
            print(f"warning: config {old}: renamed to {new} (taken as {new}: {config[new]} for this release)",
                  file=warn or sys.stderr)
    for name in (*WORKLOADS, *STUDIES):
        section = config.get(name)
        for key, values in getattr(definition(name), "RENAMED_VALUES", {}).items():
            listed = section.get(key) if isinstance(section, dict) else None
            renamed = [v for v in listed if v in values] if isinstance(listed, list) else []
            if renamed:
                section[key] = [values.get(v, v) for v in listed]
                print(f"warning: config {name}.{key}: {', '.join(renamed)} renamed to "
                      f"{', '.join(values[v] for v in renamed)} (taken so for this release)", file=warn or sys.stderr)


def check_renamed(config):
    """Stop on a key that was renamed so that one word has one meaning (a study renamed, dlbench.studies'
    RENAMED; a workload or study definition's RENAMED: {old key in its section: new key}), naming both,
    before the schema would call the old one merely unknown. Take the studies a config lists under
    workloads as studies, and a renamed key or value under its new name, each with a warning
    (studies_as_workloads, take_renamed)."""
    for old, new in RENAMED.items():
        for key in ("workloads", "studies"):
            if old in (config.get(key) or []):
                raise ConfigError(f"config {key}: study {old!r} renamed to {new!r}")
    studies_as_workloads(config)
    take_renamed(config)
    for workload in (*WORKLOADS, *STUDIES):
        for old, new in getattr(definition(workload), "RENAMED", {}).items():
            section = config.get(workload)
            for parent in old.split(".")[:-1]:
                section = section.get(parent) if isinstance(section, dict) else None
            if isinstance(section, dict) and old.split(".")[-1] in section:
                raise ConfigError(f"config {workload}.{old}: renamed to {workload}.{new}")


def check_config(config, envs=None, use_conda=False):
    """Check the frameworks, workloads and studies against their lists (dlbench.frameworks,
    dlbench.workloads, dlbench.studies), the measurement, and each workload's and study's section
    (its definition's check, which may fill values: a framework's strategies, its weights); with
    `envs` (the folder of env files), the interpreters and variants' env files the config names."""
    config.setdefault("frameworks", list(FRAMEWORKS))
    for framework in config["frameworks"]:
        if framework not in FRAMEWORKS:
            raise ConfigError(f"config frameworks: unknown framework {framework!r} "
                              f"(known: {', '.join(FRAMEWORKS)})")
    config.setdefault("workloads", list(WORKLOADS))
    for workload in config["workloads"]:
        if workload not in WORKLOADS:
            raise ConfigError(f"config workloads: unknown workload {workload!r} (known: {', '.join(WORKLOADS)}; "
                              f"studies: {', '.join(STUDIES)})")
    config.setdefault("studies", list(STUDIES))
    for study in config["studies"]:
        if study not in STUDIES:
            raise ConfigError(f"config studies: unknown study {study!r} (known: {', '.join(STUDIES)})")
    for name, variant in config.get("variants", {}).items():
        if name in FRAMEWORKS:
            raise ConfigError(f"config variants.{name}: a framework's name; name the variant apart (e.g. {name}-b)")
        if variant["framework"] not in config["frameworks"]:
            raise ConfigError(f"config variants.{name}.framework: {variant['framework']!r} is not one of the configured "
                              f"frameworks ({', '.join(config['frameworks'])}): a variant runs beside its framework")
        if variant.get("schedule") == "duet" and variant.get("threads"):
            raise ConfigError(f"config variants.{name}.threads: a duet's two sides run on half of the job's cores "
                              f"each, with half of its threads; leave threads out, or use schedule: sequential")
        try:
            planted_slowdown(f"{key}={value}" for key, value in variant.get("environment", {}).items())
        except ValueError as error:
            raise ConfigError(f"config variants.{name}.environment: {error}") from None
    for folder in config.get("estimate_from", []):
        if not Path(folder).is_dir():
            raise ConfigError(f"config estimate_from: {folder} is no folder (name the results folder of an earlier run)")
    measurement = config["measurement"]
    if measurement["min_unit_steps"] > measurement["max_unit_steps"]:
        raise ConfigError(f"config measurement.min_unit_steps: {measurement['min_unit_steps']} is more than "
                          f"measurement.max_unit_steps ({measurement['max_unit_steps']})")
    for name in (*WORKLOADS, *STUDIES):
        definition(name).check(config)
    if envs is not None:
        check_environments(config, Path(envs), use_conda)
    return config


def check_environments(config, envs, use_conda):
    """The interpreters a config names (a stack's jobs run in the user's own, as given: a relative path
    stays relative, so that a moved clone plans nothing again) and its variants' env files."""
    known = ", ".join(sorted(p.stem for p in envs.glob("*.yaml")))
    for stack, path in config["interpreters"].items():
        if not (envs / f"{stack}.yaml").is_file():
            raise ConfigError(f"config interpreters.{stack}: no stack of that name (an env file's name: {known})")
        if why := interpreter_error(os.path.expanduser(path)):
            raise ConfigError(f"config interpreters.{stack}: {why}: name an existing Python interpreter for the "
                              f"{stack} stack's jobs, or leave {stack} out to build its environment")
    for name, variant in config["variants"].items():
        if variant["env"] and not (envs / f"{variant['env']}.yaml").is_file():
            raise ConfigError(f"config variants.{name}.env: no env file {envs / variant['env']}.yaml (copy "
                              f"envs/{variant['framework']}.yaml to it and change a pin)")
        if variant["schedule"] == "duet" and variant["env"] and use_conda:
            raise ConfigError(f"config variants.{name}: a duet of two env files runs both sides in one job, which "
                              f"--use-conda gives one env; run it with the venvs (without --use-conda) or schedule: "
                              f"sequential")


def load_config(*paths):
    """Config files merged as Snakemake merges --configfile (later keys win, recursively),
    validated against the schema (which fills the defaults) and checked. For code that
    runs outside the workflow (benchmarks, tests); it needs the driver's snakemake."""
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
