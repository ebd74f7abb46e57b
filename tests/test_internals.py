"""A framework's private API is used in one module per framework, <module>/internals.py, which
names the version it was written for (the env files' pin) and stops on another."""
import ast
import re
from pathlib import Path

import pytest

from dlbench.frameworks import UnknownVersion, check_written_for

REPO = Path(__file__).resolve().parents[1]
FRAMEWORKS_DIR = REPO / "src" / "dlbench" / "frameworks"
PRIVATE = re.compile(r"\b(keras\.src|jax\._src|grain\._src|tensorflow\.python|torch\._C|torch\.utils\._\w+)\b|\._(children|kwargs|worker_pool|"
                     r"collect_params_with_prefix|del_thread_pool)\b")


def written_for(path):
    """The WRITTEN_FOR assignment of an internals module: {package: version}."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "WRITTEN_FOR":
            value = ast.literal_eval(node.value)
            return value if isinstance(value, dict) else {path.parent.name: value}
    raise AssertionError(f"{path}: no WRITTEN_FOR")


def pins():
    """{package: version} pinned in any env file."""
    found = {}
    for env in (REPO / "envs").glob("*.yaml"):
        for package, version in re.findall(r"^\s*-\s*([\w-]+)==([\w.]+)", env.read_text(), flags=re.M):
            found.setdefault(package.lower(), set()).add(version)
    return found


def test_private_api_is_used_only_in_the_internals_modules():
    code = [*(REPO / "src").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py"), *(REPO / "scripts").rglob("*.py")]
    users = {str(p.relative_to(REPO)) for p in code
             if p.name != "internals.py" and any(PRIVATE.search(line.split("#")[0]) for line in p.read_text().splitlines()
                                                  if not line.lstrip().startswith(("#", '"', "'")))}
    assert users == set()
    assert {p.parent.name for p in FRAMEWORKS_DIR.glob("*/internals.py")} == {"jax", "keras", "mxnet", "pytorch", "tensorflow"}


@pytest.mark.parametrize("module", ["jax", "keras", "mxnet", "pytorch", "tensorflow"])
def test_each_internals_module_was_written_for_the_pinned_version(module):
    pinned = pins()
    written = written_for(FRAMEWORKS_DIR / module / "internals.py")
    assert written, f"{module}/internals.py names no version"
    for package, version in written.items():
        assert pinned[package] == {version}, (module, package)


def test_another_version_stops_with_the_file_and_what_to_check():
    check_written_for("internals.py", "keras", "3.15.1", "3.15.1")
    with pytest.raises(UnknownVersion, match=r"x/internals.py: uses keras 3.15.1's private API .* has keras 3.16.0"):
        check_written_for("x/internals.py", "keras", "3.16.0", "3.15.1")
