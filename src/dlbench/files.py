"""Files: writing prepared data so that a failure loses nothing (build beside, then swap in),
and their checksums."""
import hashlib
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def workflow_path(path):
    """A file or folder of the workflow as jobs' inputs name it: relative to the working directory, so
    that they do not change when the clone moves (a moved clone, results and all, plans nothing).
    Captions and conda: files stay absolute: Snakemake reads relative ones from the rule file's folder."""
    return Path(os.path.relpath(path))


def log_tail(path, size=64 * 1024):
    """The last `size` bytes of a log as text; '' for a missing or unreadable one."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - size))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def staged(target, whole_folder=False):
    """A fresh folder beside `target` to write into. When the block succeeds, its files
    replace those of the same names in `target` (whole_folder: it replaces `target`
    itself); when it fails, it is removed and `target` keeps what it had."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if whole_folder:
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
        return
    target.mkdir(exist_ok=True)
    for path in tmp.iterdir():
        os.replace(path, target / path.name)
    tmp.rmdir()
