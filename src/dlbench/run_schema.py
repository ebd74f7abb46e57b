"""What makes a file a run record: it reads as JSON and is valid against schemas/run.schema.json.
A file that is not (cut short by a full disk, hand-edited, another schema's JSON) is no record:
the workflow runs its run again (rules/common.smk: run_attempt) and names it at the end of the
invocation; the tables list it as invalid. Imported by the driver and the report environment,
not by the frameworks' environments (they have no jsonschema)."""
import functools
import json
from pathlib import Path

import jsonschema

RUN_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "run.schema.json"


@functools.cache
def _validator():
    return jsonschema.Draft202012Validator(json.loads(RUN_SCHEMA.read_text()))


def record_error(path):
    """Why the file at `path` is not a run record (naming the file and, for an invalid one, where),
    None if it is one or there is no file."""
    try:
        record = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"{path}: cannot be read as JSON ({err})"
    error = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"{path}: invalid run record at {where}: {error.message}"
