import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dlbench.envs import env_hash, read_env_file, venv_damage
from conftest import REPO, SCRIPTS, venv_python

sys.path.insert(0, str(SCRIPTS))
from build_venv import parse_pip_config, pip_to_uv  # noqa: E402

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


def test_uv_is_given_the_sources_pip_is_configured_with():
    """uv reads no pip.conf: the builder hands it pip's index, extra indexes, find-links and
    constraints (the environment's PIP_* over [install] over [global]), and the env file's
    PIP_NO_BUILD_ISOLATION=0 (pip's spelling of --no-build-isolation)."""
    config = parse_pip_config(
        "global.index-url='https://mirror.example/simple'\n"
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/more/simple'\n"
        "global.find-links='/opt/wheels'\n"
        "install.constraint='/etc/pip/constraints.txt'\n"
        "global.cert='/etc/ssl/certs/ca.crt'\n"
        ":env:.index-url='https://proxy.example/simple'\n"
        ":env:.no-build-isolation='0'\n"
        ":env:.default-timeout='180'\n")
    options, variables = pip_to_uv(config)
    pairs = list(zip(options, options[1:]))
    assert ("--index-url", "https://proxy.example/simple") in pairs  # PIP_INDEX_URL over pip.conf
    assert "https://mirror.example/simple" not in options
    assert ("--extra-index-url", "file:///opt/pypi/simple") in pairs and ("--extra-index-url", "file:///opt/more/simple") in pairs
    assert ("--find-links", "/opt/wheels") in pairs and ("--constraint", "/etc/pip/constraints.txt") in pairs
    assert "--no-build-isolation" in options and ("--index-strategy", "unsafe-best-match") in pairs
    assert variables == {"SSL_CERT_FILE": "/etc/ssl/certs/ca.crt", "UV_HTTP_TIMEOUT": "180"}
    # pip with no index of its own uses PyPI: so does uv, by its default
    options, _ = pip_to_uv(parse_pip_config("global.find-links='/opt/wheels'\n"))
    assert "--index-url" not in options and "--extra-index-url" not in options and "--no-build-isolation" not in options


def probe_index(root, flavour):
    """A PEP 503 index under root holding dlbench-probe 1.0, whose module says flavour."""
    wheel = root / "files" / "dlbench_probe-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    files = {"dlbench_probe.py": f"FLAVOUR = {flavour!r}\n",
             "dlbench_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: dlbench-probe\nVersion: 1.0\n",
             "dlbench_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(text.encode())}\n" for name, text in files.items())
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in {**files, "dlbench_probe-1.0.dist-info/RECORD": record + "dlbench_probe-1.0.dist-info/RECORD,,\n"}.items():
            archive.writestr(name, text)
    page = root / "simple" / "dlbench-probe" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="../../files/{wheel.name}">{wheel.name}</a>\n')
    return (root / "simple").as_uri()


def build_probe_venv(tmp_path, flavour, **variables):
    """A venv of dlbench-probe 1.0 (whose module says flavour), built by build_venv.py from a local
    index that pip's configuration names, with `variables` in its environment: (venv, what it said)."""
    pip_conf = tmp_path / f"pip-{flavour}.conf"
    if not pip_conf.exists():
        pip_conf.write_text(f"[global]\nindex-url = {probe_index(tmp_path / f'index-{flavour}', flavour)}\n")
    env = write(tmp_path, "dependencies:\n  - python=3.11\n  - pip\n  - pip:\n      - dlbench-probe==1.0\n")
    venv = tmp_path / "venvs" / f"probe-{env_hash(env)}"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "build_venv.py"), str(env), str(venv)], check=True,
                          capture_output=True, text=True,
                          env={**os.environ, "PIP_CONFIG_FILE": str(pip_conf), "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
                               **variables})
    return venv, proc.stdout


def flavour(venv):
    return subprocess.run([str(venv / "python"), "-c", "import dlbench_probe; print(dlbench_probe.FLAVOUR)"],
                          capture_output=True, text=True).stdout.strip()


def test_the_venv_takes_its_packages_from_pips_index_and_no_other(tmp_path):
    """A venv built under a pip configuration whose index is the only one with the package gets
    it from there; uv's own index variable, naming a second source, is not followed."""
    venv, _ = build_probe_venv(tmp_path, "pip", UV_EXTRA_INDEX_URL=probe_index(tmp_path / "other-index", "other"))
    assert flavour(venv) == "pip"
    assert "dlbench-probe==1.0" in (venv / "pip-freeze.txt").read_text()


def test_the_venv_s_modules_are_compiled_at_install_so_no_process_compiles_them(tmp_path):
    """Every installed module has its bytecode beside it, and an import reads it rather than
    compiling the source, also where Python may write none (PYTHONDONTWRITEBYTECODE, as on the test
    machines, where each process compiled every module it imported)."""
    venv, _ = build_probe_venv(tmp_path, "compiled")
    [module] = venv.glob("lib/python*/site-packages/dlbench_probe.py")
    # python -v says where each module's code object came from: its bytecode file, or its source
    imported = subprocess.run([str(venv / "python"), "-v", "-c", "import dlbench_probe"], capture_output=True,
                              text=True, check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}).stderr
    [said] = [line for line in imported.splitlines() if line.startswith("# code object from") and "dlbench_probe" in line]
    cached = Path(said.split("from", 1)[1].strip().strip("'"))
    assert cached.suffix == ".pyc" and cached.parent == module.parent / "__pycache__", said


def test_a_venv_of_another_layout_is_another_venv(tmp_path, monkeypatch):
    """The folder's hash covers how the builder lays a venv out (dlbench.envs.VENV_LAYOUT): a venv
    built before the modules were compiled at install is not taken for one that has them."""
    import dlbench.envs

    path = write(tmp_path, "dependencies:\n  - python=3.11\n  - pip:\n      - numpy==2.4.6\n")
    now = env_hash(path)
    monkeypatch.setattr(dlbench.envs, "VENV_LAYOUT", dlbench.envs.VENV_LAYOUT - 1)
    assert env_hash(path) != now


@pytest.mark.slow  # builds a venv, twice
def test_a_damaged_venv_is_named_and_built_again_and_a_whole_one_is_kept(tmp_path):
    venv, _ = build_probe_venv(tmp_path, "first")
    assert venv_damage(venv) is None and flavour(venv) == "first"
    # Snakemake removes the wrapper to build again (its params changed): the whole venv keeps its
    # packages (the second index, which would give another flavour, is not asked)
    (venv / "python").unlink()
    _, said = build_probe_venv(tmp_path, "second")
    assert "kept them" in said and flavour(venv) == "first"
    [module] = venv.glob("lib/python*/site-packages/dlbench_probe.py")
    module.write_text("")  # cut short
    assert venv_damage(venv) == f"dlbench-probe==1.0: dlbench_probe.py has 0 bytes, not the {len('FLAVOUR = ' + repr('first')) + 1} it was installed with"
    module.unlink()
    assert venv_damage(venv) == "dlbench-probe==1.0: dlbench_probe.py is missing"
    (venv / "python").unlink()
    _, said = build_probe_venv(tmp_path, "second")
    assert "kept them" not in said and venv_damage(venv) is None and flavour(venv) == "second"
    for info in venv.glob("lib/python*/site-packages/dlbench_probe-1.0.dist-info"):
        shutil.rmtree(info)
    assert venv_damage(venv) == "dlbench-probe==1.0 is no longer installed"
    (venv / "bin" / "python").unlink()
    assert venv_damage(venv).startswith(f"its interpreter {venv / 'bin' / 'python'} is gone")
