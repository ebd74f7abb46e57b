"""Build a virtualenv from the pip list of a conda env file.

Used when the workflow runs without --use-conda. The venv lives under a shared prefix in a
folder named by the hash of the env file's content and of the venv layout (dlbench.envs.env_hash),
so checkouts and tests share it and an edited env file gets a new one. The interpreter wrapper
`<venv>/python` is written last: its presence means the venv is complete.

uv installs the packages: it downloads in parallel, and compiles every module's bytecode at install
(`--compile-bytecode`), once: a training process then compiles nothing it imports, even where
PYTHONDONTWRITEBYTECODE keeps Python from writing what it compiled (elsewhere the first run in a
venv would compile for the runs after it, a start-up they do not pay). It takes exactly the sources
pip is configured with on this machine: uv reads no pip.conf, so the venv's pip says its settings (`pip
config list`) and they become uv's options (pip_to_uv); uv's own configuration files and index
variables are left out. uv's cache (~/.cache/uv, UV_CACHE_DIR) keeps each wheel it downloads or
builds from an sdist (pillow-simd, mpi4py, Chainer) by the source's hash: the other venvs take it
from there.
"""
import argparse
import ast
import fcntl
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from dlbench.envs import env_hash, read_env_file, venv_damage

# pip's options, as `pip config list` names them, and uv pip install's: the package sources, and
# what changes which files or builds are taken. Each value may hold several, whitespace-separated.
PIP_TO_UV = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
    "no-binary": "--no-binary",
    "only-binary": "--only-binary",
}
# uv's own spellings of package sources: dropped from its environment, so that pip's are the only ones.
UV_SOURCE_VARIABLES = ("UV_INDEX", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS",
                       "UV_NO_INDEX", "UV_INDEX_STRATEGY", "UV_CONSTRAINT", "UV_CONFIG_FILE")
FALSE = ("0", "false", "no", "off")


def parse_pip_config(text):
    """{option: value} of `pip config list`'s output, as pip applies them to `pip install`: the
    environment's PIP_* (':env:.') over the [install] section over [global]."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        section, dot, option = key.rpartition(".")
        if sep and dot:
            found[(section, option)] = ast.literal_eval(value)
    return {option: value for section in ("global", "install", ":env:")
            for (where, option), value in found.items() if where == section}


def pip_to_uv(config):
    """uv pip install's options and environment variables for pip's settings (parse_pip_config):
    pip's index (uv's default, PyPI, only where pip names none, as pip's own default is PyPI),
    its extra indexes, find-links and constraints, and nothing else."""
    options = []
    for pip_option, uv_option in PIP_TO_UV.items():
        for value in config.get(pip_option, "").split():
            options += [uv_option, value]
    if config.get("no-index", "").lower() not in ("", *FALSE):
        options.append("--no-index")
    # pip's store_false options read "0" as set: PIP_NO_BUILD_ISOLATION=0 is --no-build-isolation.
    if config.get("no-build-isolation", "").lower() in FALSE:
        options.append("--no-build-isolation")
    # pip takes a package's best version over all its indexes and find-links (torch's local +cpu
    # wheel over PyPI's CUDA build of the same release); uv's default takes the first index that has it.
    options += ["--index-strategy", "unsafe-best-match"]
    variables = {}
    if config.get("cert"):
        variables["SSL_CERT_FILE"] = config["cert"]
    if config.get("timeout") or config.get("default-timeout"):
        variables["UV_HTTP_TIMEOUT"] = config.get("timeout") or config.get("default-timeout")
    return options, variables


def uv_binary():
    try:
        from uv import find_uv_bin
    except ImportError:
        raise SystemExit("error: uv installs the venvs' packages, and this interpreter has none: "
                         "pip install -r requirements.txt") from None
    return find_uv_bin()


def base_interpreter(version):
    """An interpreter of the pinned version: the running one, or pythonX.Y on PATH."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found is None:
        raise SystemExit(
            f"error: the env file pins python={version}, but this machine has no python{version} "
            f"on PATH (the driver runs {sys.version.split()[0]}); install it or use --use-conda"
        )
    return found


def build(env_file, venv):
    env = read_env_file(env_file)
    wrapper = venv / "python"
    venv.mkdir(parents=True, exist_ok=True)
    # Another checkout or a test may build the same venv at the same time.
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if wrapper.exists():
            print(f"{venv} was built meanwhile by another process")
            return
        # The variables as the venv sees them: ${CONDA_PREFIX} in a variable names its folder (the
        # GPU MXNet env's LD_LIBRARY_PATH, to the CUDA libraries pip puts in it).
        variables = {name: value.replace("${CONDA_PREFIX}", str(venv)) for name, value in env.variables.items()}
        # Snakemake removes the wrapper before it builds again (the rule's params changed, as when the
        # clone moved): a venv installed whole from this very env file keeps its packages.
        installed = venv / "env.yaml"
        if installed.exists() and installed.read_bytes() == Path(env_file).read_bytes() and venv_damage(venv) is None:
            write_wrapper(venv, variables)
            print(f"{venv}: its packages were installed whole from {env_file}; kept them")
            return
        python = str(venv / "bin" / "python")
        pip = [python, "-m", "pip"]
        uv_bin = uv_binary()
        # The venv has pip (scripts/fetch.py downloads with it), the one its Python bundles, as
        # `python -m venv` would install it; uv installs it from the bundled wheels, in a second
        # rather than ensurepip's compiling minute on a busy machine.
        subprocess.run([base_interpreter(env.python), "-m", "venv", "--clear", "--without-pip", str(venv)], check=True)
        bundled = subprocess.run([python, "-c", "import ensurepip, pathlib; print(pathlib.Path(ensurepip.__file__).parent)"],
                                 capture_output=True, text=True).stdout.strip()
        wheels = sorted(str(path) for path in Path(bundled or "/nonexistent").glob("_bundled/*.whl"))
        if any(Path(wheel).name.startswith("pip-") for wheel in wheels):
            subprocess.run([uv_bin, "pip", "install", "--no-config", "--offline", "--no-deps", "--python", python, *wheels],
                           check=True)
        else:  # a Python whose ensurepip finds its wheels elsewhere (Debian's python3-venv)
            subprocess.run([python, "-m", "ensurepip", "--default-pip"], check=True)
        (venv / "requirements.txt").write_text("\n".join(env.pip) + "\n")
        shutil.copyfile(env_file, venv / "env.yaml")
        install_env = {**os.environ, **variables}
        # The env file's PIP_* variables (Chainer's PIP_NO_BUILD_ISOLATION) are pip's settings too.
        config = subprocess.run(pip + ["config", "list"], check=True, capture_output=True, text=True,
                                env=install_env).stdout
        options, uv_variables = pip_to_uv(parse_pip_config(config))
        uv_env = {name: value for name, value in {**install_env, **uv_variables}.items()
                  if name not in UV_SOURCE_VARIABLES}
        uv = [uv_bin, "pip", "install", "--no-config", "--compile-bytecode", "--python", python, *options]
        print("installer:", shlex.join(uv), flush=True)
        if env.build_first:  # conda's own packages, installed before the pip list as conda does
            subprocess.run(uv + env.build_first, check=True, env=uv_env)
        subprocess.run(uv + ["-r", str(venv / "requirements.txt")], check=True, env=uv_env)
        freeze = subprocess.run(pip + ["freeze"], check=True, capture_output=True, text=True).stdout
        (venv / "pip-freeze.txt").write_text(freeze)
        write_wrapper(venv, variables)
    print(f"built {venv}")


def write_wrapper(venv, variables):
    """<venv>/python, written last: the env file's variables are set whenever the venv runs, as
    conda's activation sets them (KERAS_BACKEND chooses Keras' backend)."""
    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in variables.items())
    tmp = venv / "python.tmp"
    tmp.write_text(f'#!/bin/sh\n{exports}exec "{venv / "bin" / "python"}" "$@"\n')
    tmp.chmod(0o755)
    tmp.rename(venv / "python")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("env_file", type=Path)
    parser.add_argument("venv", type=Path, help="the venv folder, named <stack>-<hash>")
    args = parser.parse_args()
    expected = env_hash(args.env_file)
    if not args.venv.name.endswith(expected):
        raise SystemExit(
            f"error: {args.env_file} changed since the workflow was planned (its hash is now "
            f"{expected}, the venv asked for is {args.venv.name}); run the workflow again"
        )
    build(args.env_file, args.venv.resolve())


if __name__ == "__main__":
    main()
