"""A steady unit that other processes contended is timed again (measurement.max_contended_reruns),
through the real harness: two busy processes take the cores of a PyTorch MNIST run from its start,
so that every steady unit is contended; the run times the first ones again up to the cap, records
them as `contended` (left out of every statistic and of compile_s), counts the units past the cap
and flags them in the units table."""
import dataclasses
import json
import subprocess
import sys

import pytest

from conftest import venv_python
from specs import smoke_spec
from dlbench.specs import spec_to_json
from dlbench.tables import phase_seconds, units_table

pytestmark = pytest.mark.slow

BUSY = "while True: pass"


def test_a_contended_steady_unit_is_timed_again_and_the_one_past_the_cap_is_flagged(smoke_data, tmp_path):
    spec = smoke_spec("mnist", "pytorch")
    # units of a third of a second and more: long enough for the kernel's CPU accounting (10 ms ticks)
    measure = dataclasses.replace(spec.measure, min_unit_seconds=0.3, max_unit_steps=1000, steady_units=2,
                                  max_other_cpus=0.5, max_contended_reruns=2)
    spec = dataclasses.replace(spec, measure=measure)
    out = tmp_path / "record.json"
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        proc = subprocess.run([venv_python("pytorch"), "-m", "dlbench.harness", "--spec", spec_to_json(spec),
                               "--out", str(out)], cwd=smoke_data, capture_output=True, text=True, check=False)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    record = json.loads(out.read_text())
    assert record["status"] == "ok", (record["error"] or "") + proc.stderr[-2000:]
    kinds = [unit["kind"] for unit in record["units"]]
    first_steady = next(i for i, kind in enumerate(kinds) if kind in ("steady", "contended"))
    assert kinds[first_steady:] == ["contended", "contended", "steady", "steady"]
    assert record["plan"]["contended_reruns"] == 2
    # the contended units: other processes' CPU above the limit; left out of the summary
    contended = [unit for unit in record["units"] if unit["kind"] == "contended"]
    assert all(unit["machine"]["other_cpu_s"] / unit["wall_s"] > 0.5 for unit in contended)
    assert record["summary"]["steady_units"] == 2
    assert phase_seconds(record)["contended_s"] == pytest.approx(sum(unit["wall_s"] for unit in contended))
    # past the cap the steady units count, flagged contended in the units table
    units = units_table([record], min_unit_seconds=0.0, max_other_cpus=0.5)
    steady = units[units["kind"] == "steady"]
    assert len(steady) == 2 and steady["contended"].all()
    assert not units[units["kind"] == "contended"]["contended"].any()  # never a statistic's unit
