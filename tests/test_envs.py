import os
import subprocess

import pytest

from dlbench.envs import env_hash, read_env_file
from conftest import REPO, venv_python

ENV_FILES = sorted((REPO / "envs").glob("*.yaml"))


def write(tmp_path, text):
    path = tmp_path / "env.yaml"
    path.write_text(text)
    return path


def test_every_env_file_pins_python_and_every_package():
    assert {p.stem for p in ENV_FILES} >= {"pytorch", "tensorflow", "mxnet", "data", "report"}
    for path in ENV_FILES:
        assert read_env_file(path).python == "3.11", path


def test_known_pins_of_these_machines():
    pins = {p.stem: read_env_file(p).pip for p in ENV_FILES}
    assert "torch==2.13.0" in pins["pytorch"]
    assert "tensorflow==2.21.0" in pins["tensorflow"]
    assert {"mxnet==1.9.1", "numpy==1.23.5"} <= set(pins["mxnet"])
    assert {"chainer==7.8.1", "numpy==1.23.5"} <= set(pins["chainer"])


def test_hash_follows_the_content(tmp_path):
    path = write(tmp_path, "dependencies:\n  - python=3.11\n  - pip:\n      - numpy==2.4.6\n")
    before = env_hash(path)
    assert env_hash(path) == before
    path.write_text(path.read_text().replace("2.4.6", "2.4.5"))
    assert env_hash(path) != before


@pytest.mark.parametrize(
    "text, message",
    [
        ("dependencies:\n  - pip:\n      - numpy==2.4.6\n", "must pin python"),
        ("dependencies:\n  - python=3.11\n  - pip:\n      - numpy\n", "pinned with '=='"),
        ("dependencies:\n  - python=3.11\n", "'pip:' list"),
        ("name: x\n", "no 'dependencies' list"),
        ("variables: [CC]\ndependencies:\n  - python=3.11\n  - pip:\n      - numpy==2.4.6\n", "'variables' must be"),
        ("dependencies: [python=3.11\n", "not valid YAML"),
        ("dependencies:\n  - python=3.11\n  - setuptools\n  - pip:\n      - numpy==2.4.6\n", "'setuptools' must be pinned"),
    ],
)
def test_bad_env_files_are_named_with_the_reason(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=message) as err:
        read_env_file(path)
    assert str(path) in str(err.value)


def test_variables_come_back_as_strings(tmp_path):
    path = write(tmp_path, "variables:\n  CC: cc -mavx2\n  N: 2\ndependencies:\n  - python=3.11\n"
                           "  - pip:\n      - numpy==2.4.6\n")
    assert read_env_file(path).variables == {"CC": "cc -mavx2", "N": "2"}


def test_conda_packages_are_installed_first_and_pip_options_pass_through(tmp_path):
    """Conda installs its own packages before the pip list: the venv builder does too, so a
    package built without build isolation (Chainer) finds setuptools and wheel."""
    path = write(tmp_path, "dependencies:\n  - python=3.11\n  - pip\n  - setuptools=69.5.1\n  - wheel==0.43.0\n"
                           "  - pip:\n      - --no-binary mpi4py\n      - mpi4py==4.1.1\n")
    env = read_env_file(path)
    assert env.build_first == ["setuptools==69.5.1", "wheel==0.43.0"]
    assert env.pip == ["--no-binary mpi4py", "mpi4py==4.1.1"]


KERAS_ENGINES = {"keras-tensorflow": ("tensorflow", "tensorflow"), "keras-jax": ("jax", "jax"),
                 "keras-torch": ("torch", "pytorch")}


def test_keras_envs_share_the_pins_of_their_engines():
    """Keras 3 on each backend: keras==3.15.1, the engine pinned as in the engine's own env,
    the backend named by KERAS_BACKEND."""
    pins = {p.stem: read_env_file(p).pip for p in ENV_FILES}
    for name, (backend, engine_env) in KERAS_ENGINES.items():
        assert "keras==3.15.1" in pins[name]
        engine_pins = [pin for pin in pins[engine_env] if pin.startswith(f"{backend}==") or pin.startswith("jaxlib==")]
        assert engine_pins and set(engine_pins) <= set(pins[name]), name
        assert read_env_file(REPO / "envs" / f"{name}.yaml").variables["KERAS_BACKEND"] == backend


@pytest.mark.slow
@pytest.mark.parametrize("name", KERAS_ENGINES)
def test_the_env_chooses_keras_backend(name):
    """The venv's interpreter sets the env file's variables, as conda's activation does: no code
    chooses Keras' backend."""
    out = subprocess.run([venv_python(name), "-c", "import keras; print(keras.backend.backend())"],
                         capture_output=True, text=True, check=True, env={k: v for k, v in os.environ.items()
                                                                           if k != "KERAS_BACKEND"})
    assert out.stdout.split()[-1] == KERAS_ENGINES[name][0]
