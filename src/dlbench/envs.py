"""Reading conda env files, naming the venvs built from them, and the interpreters a user gives instead.

Imported by the harness in every environment, the user's interpreters included: the standard
library only at import (yaml, which only the report env has, where an env file is read).
"""
import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HASH_LENGTH = 12
# How scripts/build_venv.py lays a venv out, part of its folder's name: a venv of another layout is
# not this one. 1: no bytecode; 2: every module's bytecode compiled at install (why: build_venv.py).
VENV_LAYOUT = 2
# The config's env_variant: cpu builds every env from envs/<stack>.yaml; gpu builds each stack
# that has one from envs/gpu/<stack>.yaml (every framework, and onnx; not data, report, pillow).
ENV_VARIANTS = ("cpu", "gpu")


def env_hash(env_file):
    """Content hash of an env file and of the venv layout: a changed file gets a new venv, an
    unchanged one keeps its (until the builder lays venvs out another way)."""
    content = f"venv layout {VENV_LAYOUT}\n".encode() + Path(env_file).read_bytes()
    return hashlib.sha256(content).hexdigest()[:HASH_LENGTH]


def env_file(envs_dir, stack, variant="cpu"):
    """The env file a stack's environment is built from under the variant: the one place that decides."""
    if variant not in ENV_VARIANTS:
        raise ValueError(f"env variant {variant!r} is none of {ENV_VARIANTS}")
    variant_file = Path(envs_dir) / variant / f"{stack}.yaml"
    if variant != "cpu" and variant_file.exists():
        return variant_file
    return Path(envs_dir) / f"{stack}.yaml"


def venv_prefix(configured=None):
    """Where the venvs are built (config venv_prefix, else $DLBENCH_VENV_PREFIX, else ~/.cache/dlbench/venvs):
    shared by checkouts and tests."""
    return Path(configured or os.environ.get("DLBENCH_VENV_PREFIX") or "~/.cache/dlbench/venvs").expanduser().resolve()


def venv_interpreter(prefix, envs_dir, stack, variant="cpu"):
    """The interpreter wrapper of the venv built from the stack's env file, <prefix>/<stack>-<hash>/python:
    named by the file's content, so the cpu variant's venvs are those the workflow always built."""
    return Path(prefix) / f"{stack}-{env_hash(env_file(envs_dir, stack, variant))}" / "python"


def interpreter_error(path):
    """Why `path` (a config interpreters value) cannot run a stack's jobs, or None: it must be an
    executable file. Checked when the workflow is planned, before anything runs."""
    found = Path(path).expanduser()
    if not found.exists():
        hint = "" if os.sep in str(path) else f" (a path, not a command's name: $(command -v {path}) gives its path)"
        return f"{path} does not exist{hint}"
    if not found.is_file():
        return f"{path} is not a file"
    if not os.access(found, os.X_OK):
        return f"{path} is not executable"
    return None


def running_interpreter():
    """What the running interpreter is, for the record: `venv`, one that build_venv.py built from
    an env file (its folder holds that file, env.yaml, and its pip freeze; `env_file_hash` names
    the file's content as the venv's folder does); `conda`, an env Snakemake's --use-conda built
    from the env file (its <env>.env_setup_done beside it); or `user`, the interpreter the user gave
    (config interpreters): not built from an env file, its packages whatever it has."""
    prefix = Path(sys.prefix)
    if (prefix / "env.yaml").is_file() and (prefix / "pip-freeze.txt").is_file():
        kind, built_from = "venv", env_hash(prefix / "env.yaml")
    elif prefix.with_suffix(".env_setup_done").exists():  # snakemake.deployment.conda's flag
        kind, built_from = "conda", None
    else:
        kind, built_from = "user", None
    return {"kind": kind, "executable": sys.executable, "prefix": sys.prefix, "env_file_hash": built_from}


@dataclass(frozen=True)
class EnvFile:
    python: str          # the pinned X.Y
    pip: list            # the pip list's lines: pinned packages, and pip options ("--no-binary mpi4py")
    variables: dict      # conda's activation variables, also set while the packages install
    build_first: list    # conda's own packages (setuptools, wheel, cython) as pip pins: installed
                         # before the pip list, as conda installs them, for packages built from
                         # source without build isolation (Chainer's sdist imports pkg_resources)


def read_env_file(env_file):
    """The EnvFile of a conda env file.

    `variables` (conda's activation variables) are also set while the venv's packages are
    installed, so that a package built from source sees them (pillow-simd's compiler flags,
    PIP_NO_BUILD_ISOLATION).
    """
    import yaml

    path = Path(env_file)
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {err}") from err
    deps = (spec or {}).get("dependencies")
    if not isinstance(deps, list):
        raise ValueError(f"{path}: no 'dependencies' list")
    python, pip, build_first = None, None, []
    for dep in deps:
        if isinstance(dep, str):
            match = re.fullmatch(r"python\s*==?\s*(\d+\.\d+)(\.\*|\.\d+)?", dep.strip())
            package = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*==?\s*([0-9][^\s=]*)", dep.strip())
            if match:
                python = match.group(1)
            elif package:
                build_first.append(f"{package.group(1)}=={package.group(2)}")
            elif dep.strip() != "pip":
                raise ValueError(f"{path}: conda dependency {dep!r} must be pinned, as 'name=X.Y'")
        elif isinstance(dep, dict) and "pip" in dep:
            pip = [str(line) for line in dep["pip"]]
    if python is None:
        raise ValueError(f"{path}: dependencies must pin python, as 'python=3.X'")
    if not pip:
        raise ValueError(f"{path}: dependencies need a 'pip:' list of pinned packages")
    unpinned = [line for line in pip if "==" not in line and not line.startswith("-")]
    if unpinned:
        raise ValueError(f"{path}: pip packages must be pinned with '==': {unpinned}")
    variables = spec.get("variables") or {}
    if not isinstance(variables, dict):
        raise ValueError(f"{path}: 'variables' must be a mapping of names to values")
    return EnvFile(python, pip, {str(k): str(v) for k, v in variables.items()}, build_first)


def _normalised(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def venv_damage(venv):
    """What is missing or cut from a venv that build_venv.py finished, or None if nothing is: its
    interpreter, and every file of every package it installed (pip-freeze.txt, at their versions)
    as the package's RECORD lists it, with its size. Reads file sizes only: a fraction of a second
    for the largest venv, where importing its frameworks would take seconds."""
    venv = Path(venv)
    if not (venv / "bin" / "python").exists():
        return f"its interpreter {venv / 'bin' / 'python'} is gone (or the Python it links to)"
    try:
        frozen = (venv / "pip-freeze.txt").read_text().splitlines()
    except OSError as err:
        return f"its list of packages cannot be read ({err})"
    folders = list(venv.glob("lib/python*/site-packages"))
    if len(folders) != 1:
        return f"it has {len(folders)} lib/pythonX.Y/site-packages folders, not one"
    [site_packages] = folders
    installed = {}
    for info in site_packages.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        installed[(_normalised(name), version)] = info
    for line in frozen:
        name, pinned, version = line.partition("==")
        if not pinned:
            continue  # an editable or a direct reference: nothing to compare
        info = installed.get((_normalised(name), version.strip()))
        if info is None:
            return f"{name}=={version} is no longer installed"
        try:
            listed = (info / "RECORD").read_text().splitlines()
        except OSError as err:
            return f"{name}=={version}: its file list cannot be read ({err})"
        for entry in listed:
            path, _, size = entry.rsplit(",", 2) if entry.count(",") >= 2 else (entry, "", "")
            if not path or path.endswith(".pyc"):
                continue  # bytecode: compiled from the sources, not what was installed
            try:
                on_disk = (site_packages / path).stat().st_size
            except OSError:
                return f"{name}=={version}: {path} is missing"
            if size and int(size) != on_disk:
                return f"{name}=={version}: {path} has {on_disk} bytes, not the {size} it was installed with"
    return None
