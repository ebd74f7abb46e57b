"""Get raw data into results/raw: a file from a path or URL, or a data-carrying PyPI wheel.

Every file is checked against its sha256 when one is given (always for URLs); a mismatch
stops with both hashes and leaves no file behind. Files are written beside their target and
renamed to it once checked: the target is complete or absent.
"""
import argparse
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from dlbench.files import file_sha256



def check_sha256(path, expected, origin):
    if expected:
        actual = file_sha256(path)
        if actual != expected.lower():
            raise SystemExit(f"error: {origin}: sha256 is {actual}, the config expects {expected}")


def fetch_file(source, out, sha256):
    """Copy a local file or download a URL to `out`, checking its sha256."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    if "://" in source and not sha256:
        raise SystemExit(f"error: {source}: a URL needs a sha256 in the config")
    if "://" not in source and not Path(source).is_file():
        raise SystemExit(f"error: {source}: no such file")
    try:
        if "://" in source:
            with urllib.request.urlopen(source, timeout=60) as response, open(tmp, "wb") as f:
                shutil.copyfileobj(response, f)
        else:
            shutil.copyfile(source, tmp)
        check_sha256(tmp, sha256, source)
    except BaseException:  # a wrong checksum, a full disk, a stop: no part left behind
        tmp.unlink(missing_ok=True)
        raise
    tmp.rename(out)


def fetch_wheel(requirement, out, sha256):
    """Download one wheel with pip (which honours the machine's pip configuration), no deps,
    into a folder beside `out`: the wheel that is checked is the file renamed to `out` (a move
    from another file system is a copy, which a full disk cuts short after the check)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=out.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--dest", tmp, requirement], check=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"error: pip download {requirement} gave {len(wheels)} wheels")
        check_sha256(wheels[0], sha256, f"{requirement} ({wheels[0].name})")
        wheels[0].rename(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="kind", required=True)
    file_parser = sub.add_parser("file", help="a path or a URL")
    file_parser.add_argument("source")
    wheel_parser = sub.add_parser("wheel", help="a PyPI package, as name==version")
    wheel_parser.add_argument("requirement")
    for p in (file_parser, wheel_parser):
        p.add_argument("--out", required=True)
        p.add_argument("--sha256", default=None)
    args = parser.parse_args()
    if args.kind == "file":
        fetch_file(args.source, args.out, args.sha256)
    else:
        fetch_wheel(args.requirement, args.out, args.sha256)


if __name__ == "__main__":
    main()
