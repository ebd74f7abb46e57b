import hashlib
import subprocess
import sys

import pytest

from conftest import SCRIPTS


def fetch(*args):
    return subprocess.run([sys.executable, str(SCRIPTS / "fetch.py"), *args], capture_output=True, text=True)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    path.write_bytes(b"some raw bytes")
    return path, hashlib.sha256(b"some raw bytes").hexdigest()


def test_a_path_with_the_right_sha256_is_copied(source, tmp_path):
    path, digest = source
    out = tmp_path / "raw" / "out.gz"
    assert fetch("file", str(path), "--sha256", digest, "--out", str(out)).returncode == 0
    assert out.read_bytes() == b"some raw bytes"


def test_a_url_is_downloaded_and_checked(source, tmp_path):
    path, digest = source
    out = tmp_path / "out.gz"
    assert fetch("file", path.as_uri(), "--sha256", digest, "--out", str(out)).returncode == 0
    assert out.exists()


def test_a_wrong_sha256_stops_and_leaves_nothing(source, tmp_path):
    path, _ = source
    out = tmp_path / "out.gz"
    proc = fetch("file", path.as_uri(), "--sha256", "0" * 64, "--out", str(out))
    assert proc.returncode != 0
    assert "sha256 is" in proc.stderr and path.name in proc.stderr
    assert not out.exists() and not list(tmp_path.glob("*.part"))


def test_a_url_without_sha256_is_refused(source, tmp_path):
    path, _ = source
    proc = fetch("file", path.as_uri(), "--out", str(tmp_path / "out.gz"))
    assert proc.returncode != 0 and "needs a sha256" in proc.stderr


def test_a_missing_path_is_named(tmp_path):
    proc = fetch("file", str(tmp_path / "nowhere.gz"), "--out", str(tmp_path / "out.gz"))
    assert proc.returncode != 0 and "nowhere.gz: no such file" in proc.stderr
