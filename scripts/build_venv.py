"""Build a virtualenv from the pip list of a conda env file.

Used when the workflow runs without --use-conda. The venv lives under a shared prefix in a
folder named by the env file's content hash, so checkouts and tests share it and an edited
env file gets a new one. The interpreter wrapper `<venv>/python` is written last: its
presence means the venv is complete.
"""
import argparse
import fcntl
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from dlbench.envs import env_hash, read_env_file


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
        subprocess.run([base_interpreter(env.python), "-m", "venv", "--clear", str(venv)], check=True)
        (venv / "requirements.txt").write_text("\n".join(env.pip) + "\n")
        shutil.copyfile(env_file, venv / "env.yaml")
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        # The venv stands for the conda env: ${CONDA_PREFIX} in a variable names its folder (the
        # GPU MXNet env's LD_LIBRARY_PATH, to the CUDA libraries pip puts in it).
        variables = {name: value.replace("${CONDA_PREFIX}", str(venv)) for name, value in env.variables.items()}
        install_env = {**os.environ, **variables}
        if env.build_first:  # conda's own packages, installed before the pip list as conda does
            subprocess.run(pip + ["install", *env.build_first], check=True, env=install_env)
        subprocess.run(pip + ["install", "-r", str(venv / "requirements.txt")], check=True, env=install_env)
        freeze = subprocess.run(pip + ["freeze"], check=True, capture_output=True, text=True).stdout
        (venv / "pip-freeze.txt").write_text(freeze)
        # The env file's variables are set whenever the venv runs, as conda's activation sets
        # them (KERAS_BACKEND chooses Keras' backend).
        exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in variables.items())
        tmp = venv / "python.tmp"
        tmp.write_text(f'#!/bin/sh\n{exports}exec "{venv / "bin" / "python"}" "$@"\n')
        tmp.chmod(0o755)
        tmp.rename(wrapper)
    print(f"built {venv}")


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
