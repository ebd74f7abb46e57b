"""Write docs/config.md, every config key, from schemas/config.schema.yaml.

    python scripts/config_docs.py           rewrite docs/config.md
    python scripts/config_docs.py --check   exit 1, naming the keys that differ, if it is stale

Every key is a dotted path (`measurement.repeats`; a key of your choosing is `<name>`, as in
`variants.<name>.schedule`), with its type or allowed values, its default and its description,
all read from the schema: the schema is the one place a key is written.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "config.schema.yaml"
OUT = ROOT / "docs" / "config.md"

HEADER = """\
# Configuration keys

Every key of `config.yaml` and of the presets, read from `schemas/config.schema.yaml`:
its type or allowed values, its default and what it means. A key left out takes its default;
an unknown key or a bad value stops the run before any job, naming the key.
`<name>` stands for a key you choose (a framework, a stack, a variant).

This page is generated: do not edit it. After a change to the schema, run
`python scripts/config_docs.py` (`--check` says which keys differ; `tests/test_docs.py` fails
while it is stale).
"""


def resolve(node: dict, root: dict) -> dict:
    """The node with its local `$ref` (#/$defs/...) merged in; the node's own keys win."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"only local references are read: {ref}")
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        merged = dict(target)
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        node = merged
    return node


def fmt(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def bounds(node: dict) -> str:
    parts = []
    for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                      ("exclusiveMaximum", "<")):
        if key in node:
            parts.append(f"{sign} {node[key]}")
    return f" ({', '.join(parts)})" if parts else ""


def type_of(node: dict, root: dict) -> str:
    """What a value may be, in words."""
    node = resolve(node, root)
    if "enum" in node:
        return "one of " + ", ".join(f"`{fmt(v) if v is None else v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    for key in ("anyOf", "oneOf"):
        if key in node:
            return " or ".join(type_of(alt, root) for alt in node[key])
    kind = node.get("type")
    if kind is None:
        if "properties" in node or "additionalProperties" in node:
            kind = "object"
        else:
            return "any"
    kinds = kind if isinstance(kind, list) else [kind]
    words = []
    for k in kinds:
        if k == "array":
            items = node.get("items")
            words.append("list" + (f" of {type_of(items, root)}" if isinstance(items, dict) else ""))
        elif k == "object":
            extra = node.get("additionalProperties")
            if isinstance(extra, dict) and "properties" not in resolve(extra, root):
                words.append(f"mapping of `<name>` to {type_of(extra, root)}")
            else:
                words.append("mapping")
        elif k == "string" and "pattern" in node:
            words.append(f"string matching `{node['pattern']}`")
        else:
            words.append(k)
    return " or ".join(words) + bounds(node)


def describe(node: dict) -> str:
    text = " ".join(str(node.get("description", "")).split())
    return text


def walk(node: dict, root: dict, path: str, rows: list[tuple[str, str, str, str]]) -> None:
    """Append (path, type, default, description) for this node, then for the keys below it."""
    node = resolve(node, root)
    if path:
        default = fmt(node["default"]) if "default" in node else ""
        rows.append((path, type_of(node, root), default, describe(node)))
    prefix = f"{path}." if path else ""
    for key, child in (node.get("properties") or {}).items():
        walk(child, root, prefix + key, rows)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        extra = resolve(extra, root)
        if "properties" in extra or isinstance(extra.get("additionalProperties"), dict):
            walk(extra, root, prefix + "<name>", rows)
    for key in ("anyOf", "oneOf"):
        for alt in node.get(key, []):
            alt = resolve(alt, root)
            if "properties" in alt:
                for sub, child in alt["properties"].items():
                    walk(child, root, prefix + sub, rows)
    items = node.get("items")
    if isinstance(items, dict):
        items = resolve(items, root)
        if "properties" in items:
            for key, child in items["properties"].items():
                walk(child, root, f"{path}[].{key}", rows)


def key_rows(schema: dict) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    walk(schema, schema, "", rows)
    seen: dict[str, tuple] = {}
    for row in rows:
        seen.setdefault(row[0], row)
    return list(seen.values())


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def row_line(row: tuple[str, str, str, str]) -> str:
    path, kind, default, description = row
    shown = f"`{default}`" if default else ""
    return f"| `{path}` | {cell(kind)} | {cell(shown)} | {cell(description)} |"


def head_of(path: str) -> str:
    return re.split(r"[.\[]", path, maxsplit=1)[0]


def render(schema: dict) -> str:
    """Top-level keys with nothing below them in one table, then a table per section."""
    rows = key_rows(schema)
    sections = {head_of(row[0]) for row in rows if row[0] != head_of(row[0])}
    table = ["| key | type | default | description |", "|---|---|---|---|"]
    out = [HEADER, "\n## Top-level keys\n", *table]
    out += [row_line(row) for row in rows if row[0] not in sections and row[0] == head_of(row[0])]
    top = ""
    for row in rows:
        head = head_of(row[0])
        if head not in sections:
            continue
        if head != top:
            top = head
            out += [f"\n## `{head}`\n", *table]
        out.append(row_line(row))
    return "\n".join(out) + "\n"


ROW = re.compile(r"^\| `([^`]+)` \|")


def rows_of(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            found[match.group(1)] = line
    return found


def differences(old: str, new: str) -> list[str]:
    """The keys whose lines differ between two renderings, each with how."""
    before, after = rows_of(old), rows_of(new)
    out = [f"{key}: missing from docs/config.md" for key in after if key not in before]
    out += [f"{key}: in docs/config.md but not in the schema" for key in before if key not in after]
    out += [f"{key}: differs from the schema" for key in after
            if key in before and before[key] != after[key]]
    if not out and old != new:
        out.append("(no key differs; the page's other text does)")
    return out


def load_schema(path: Path = SCHEMA) -> dict:
    return yaml.safe_load(path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming the keys where docs/config.md is stale")
    parser.add_argument("--schema", type=Path, default=SCHEMA)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    text = render(load_schema(args.schema))
    if args.check:
        old = args.out.read_text() if args.out.exists() else ""
        diff = differences(old, text)
        if diff:
            print(f"{args.out} is stale; run python scripts/config_docs.py:", file=sys.stderr)
            for line in diff:
                print(f"  {line}", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}: {len(rows_of(text))} keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
