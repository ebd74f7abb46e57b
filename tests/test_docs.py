"""The documentation cannot drift: docs/config.md is what scripts/config_docs.py writes from the
schema, it names every key, every relative link of README.md and docs/ leads to a file, and the
README stays a README (at most 250 lines)."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "config.schema.yaml"
CONFIG_MD = ROOT / "docs" / "config.md"
SCRIPT = ROOT / "scripts" / "config_docs.py"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def config_docs():
    spec = importlib.util.spec_from_file_location("config_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def schema_paths(node, root, path=""):
    """Every key path of the schema, found here without the script: properties, and `<name>`
    for a mapping whose values have keys of their own."""
    while "$ref" in node:
        target = root
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if path:
        yield path
    prefix = f"{path}." if path else ""
    for key, child in (node.get("properties") or {}).items():
        yield from schema_paths(child, root, prefix + key)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and "properties" in extra:
        yield from schema_paths(extra, root, prefix + "<name>")


def test_config_md_is_what_the_script_writes():
    module = config_docs()
    expected = module.render(module.load_schema())
    assert CONFIG_MD.read_text() == expected, "docs/config.md is stale: run python scripts/config_docs.py"
    check = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_check_names_the_keys_that_differ(tmp_path):
    schema = yaml.safe_load(SCHEMA.read_text())
    schema["properties"]["measurement"]["properties"]["repeats"]["default"] = 99
    schema["properties"]["a_new_key"] = {"type": "boolean", "default": False, "description": "new"}
    changed = tmp_path / "schema.yaml"
    changed.write_text(yaml.safe_dump(schema))
    check = subprocess.run([sys.executable, str(SCRIPT), "--check", "--schema", str(changed),
                            "--out", str(CONFIG_MD)], capture_output=True, text=True)
    assert check.returncode == 1
    assert "a_new_key: missing from docs/config.md" in check.stderr
    assert "measurement.repeats: differs from the schema" in check.stderr
    assert "measurement.steady_units" not in check.stderr


def test_every_schema_key_is_in_config_md():
    schema = yaml.safe_load(SCHEMA.read_text())
    text = CONFIG_MD.read_text()
    paths = list(schema_paths(schema, schema))
    assert "measurement.repeats" in paths and "variants.<name>.schedule" in paths
    missing = [p for p in paths if f"| `{p}` |" not in text]
    assert not missing, missing


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_every_relative_link_leads_to_a_file():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            file = target.split("#", 1)[0]
            if not (page.parent / file).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_readme_is_at_most_250_lines():
    lines = len(ROOT.joinpath("README.md").read_text().splitlines())
    assert lines <= 250, f"README.md has {lines} lines; move the detail into docs/"
