"""The plan (dlbench.plan), made without Snakemake: the default and every preset plan within the
limits, in the same order and with the same resources the rules ask for; the estimate of what an
invocation costs (dlbench.estimate), from records of this machine only. The slow tests dry-run every
preset, and every `snakemake` command the README and docs/ show, through Snakemake."""
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_workflow, snakemake
from dlbench import estimate as estimates
from dlbench.config import load_config
from dlbench.errors import ConfigError
from dlbench.plan import MAX_PLANNED_RUNS, Plan

PRESETS = sorted(path.name for path in (REPO / "presets").glob("*.yaml"))


def plan_of(*presets, cores=2, **overrides):
    paths = [REPO / "config.yaml", *(REPO / "presets" / p for p in presets)]
    config = load_config(*paths)
    for key, value in overrides.items():
        config[key] = value
    return Plan(config, cores=cores, envs=REPO / "envs")


@pytest.mark.parametrize("preset", [None, *PRESETS])
def test_the_default_and_every_preset_plan_within_the_limits(preset):
    plan = plan_of(*([preset] if preset else []))
    counts = plan.counts()
    first, most = sum(a for a, _ in counts.values()), sum(b for _, b in counts.values())
    assert 0 < first <= most <= MAX_PLANNED_RUNS, counts
    # every configured workload and study that runs anything has runs of its own
    for name in [*plan.workloads, *plan.studies]:
        if name != "findings":  # the findings read the others' tables
            assert any(count[0] for set_name, count in counts.items() if plan.run_sets[set_name][0] == name), (name, counts)
    # one record per run, each a target or a later round's
    targets = plan.targets()
    assert len(targets) == len(set(targets)) and set(plan.runs) >= {t for t in targets if t.startswith("results/runs/")}


def test_a_preset_too_large_to_plan_names_the_settings_that_multiply_it():
    config = load_config(REPO / "config.yaml")
    config["measurement"]["max_repeats"] = 1000
    config["mnist"]["batches"] = list(range(1, 41))
    with pytest.raises(ConfigError, match=r"runs planned, more than 20,000 \(the most: mnist, .*measurement.max_repeats 1000"):
        Plan(config, cores=2, envs=REPO / "envs")


def test_the_readme_s_preset_table_says_what_each_preset_plans():
    """The README's preset table gives each preset's runs, first round and at most, as the plan counts them."""
    readme = (REPO / "README.md").read_text()
    rows = dict(re.findall(r"^\| `presets/([a-z-]+\.yaml)` \|([^\n]*)$", readme, re.M))
    assert sorted(rows) == PRESETS
    for preset, row in rows.items():
        counts = plan_of(preset).counts()
        first, most = sum(a for a, _ in counts.values()), sum(b for _, b in counts.values())
        assert f"{first:,} runs" in row and (first == most or f"at most {most:,}" in row), (preset, row, first, most)


def test_the_plan_imports_no_snakemake():
    code = ("import sys; import dlbench.plan, dlbench.estimate; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'snakemake'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip() == "[]"


def test_every_repeat_1_runs_before_any_repeat_2_and_the_order_turns_each_repeat():
    plan = plan_of()
    runs = [run for run in plan.runs.values() if run.run_set == "mnist"]
    by_repeat = {}
    for run in runs:
        by_repeat.setdefault(run.spec.repeat, []).append(run.priority)
    assert len(by_repeat) == plan.max_repeats > 1
    for repeat in range(1, plan.max_repeats):
        assert min(by_repeat[repeat]) > max(by_repeat[repeat + 1])
    first = {repeat: max((r for r in runs if r.spec.repeat == repeat), key=lambda r: r.priority).turn for repeat in (1, 2)}
    assert first[1] != first[2]  # another framework goes first in the next repeat


def test_a_run_asks_a_scheduler_for_its_point_s_resources():
    plan = plan_of("gpu.yaml", cores=8)
    run = next(r for r in plan.runs.values() if r.run_set == "mnist" and r.spec.devices == 4)
    assert plan.gpus(run) == 4 and plan.threads == 8
    assert plan.minutes(run) == math.ceil(run.spec.timeout_s / 60 + plan.config["cluster"]["runtime_margin_minutes"])
    assert plan.memory_mb(run) == plan.config["cluster"]["memory_mb_by_workload"].get("mnist", plan.config["cluster"]["memory_mb"])
    assert plan_of().gpus(next(iter(plan_of().runs.values()))) == 0   # device_kind auto asks for none


def test_a_bad_interpreter_or_variant_env_stops_the_plan_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"config interpreters.pytorch: .*does not exist"):
        plan_of(interpreters={"pytorch": str(tmp_path / "none" / "python")})
    variants = {"pytorch-next": {"framework": "pytorch", "env": "pytorch-next", "schedule": "sequential"}}
    config = load_config(REPO / "config.yaml")
    config["variants"] = {name: {**next(iter(load_config(REPO / "config.yaml", REPO / "presets" / "ab.yaml")["variants"].values())), **v}
                          for name, v in variants.items()}
    with pytest.raises(ConfigError, match=r"config variants.pytorch-next.env: no env file .*pytorch-next.yaml"):
        Plan(config, cores=2, envs=REPO / "envs")


# ---- the estimate ------------------------------------------------------------------------------

MACHINE = estimates.machine_key("Test CPU 9000", [])


def write_record(results, key, wall, cpu="Test CPU 9000", startup=2.0, compile_s=1.0):
    path = results / "runs" / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"environment": {"cpu_model": cpu, "gpus": []}, "wall_s": wall,
                                "startup": {"interpreter_s": startup / 2, "framework_s": startup / 2},
                                "summary": {"compile_s": compile_s}}))


def train(key):
    return estimates.Job("train", (f"results/runs/{key}",))


def test_the_estimate_times_each_run_by_its_own_record_or_its_point_s_other_repeats(tmp_path):
    results = tmp_path / "results"
    write_record(results, "mnist/pytorch/p~1_repeat~1.json", 30.0)
    write_record(results, "mnist/pytorch/p~1_repeat~2.json", 20.0)
    write_record(results, "mnist/jax/p~1_repeat~1.json", 99.0, cpu="Another CPU")   # not this machine's
    bench = results / "benchmarks" / "aggregate" / "mnist.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text("s\th:m:s\n4.5\t0:00:04\n")
    history = estimates.load_history([results], MACHINE)
    assert set(history.runs) == {"runs/mnist/pytorch/p~1_repeat~1.json", "runs/mnist/pytorch/p~1_repeat~2.json"}
    jobs = [train("mnist/pytorch/p~1_repeat~1.json"), train("mnist/pytorch/p~1_repeat~3.json"),
            train("mnist/jax/p~1_repeat~1.json"),
            estimates.Job("aggregate", ("results/tables/mnist-runs.csv",), "results/benchmarks/aggregate/mnist.tsv")]
    found = estimates.estimate(jobs, history, min_repeats=3, budget_minutes=0, rounds=False)
    # repeat 1 by its record, repeat 3 by the median of its point's (25 s), jax by nothing: not counted
    assert (found.measured, found.analogous, found.unknown) == (1, 1, 1)
    assert found.seconds == pytest.approx(30 + 25 + 4.5) and found.startup == pytest.approx(4.0)
    assert found.runs_per_set == {"mnist": 3} and found.others == 1
    said = "\n".join(estimates.lines(found, history))
    assert "dlbench plan: 3 runs to run (3 mnist), 1 other jobs" in said and "1.0 min on this machine (Test CPU 9000)" in said
    assert "1 with no record to go by, not counted" in said


def test_the_adaptive_rounds_cost_what_the_earlier_run_s_later_repeats_took_within_the_budget(tmp_path):
    results = tmp_path / "results"
    for repeat, wall in ((1, 10.0), (4, 50.0), (5, 70.0)):
        write_record(results, f"imdb/pytorch/p~1_repeat~{repeat}.json", wall)
    history = estimates.load_history([results], MACHINE)
    found = estimates.estimate([train("imdb/pytorch/p~1_repeat~1.json")], history, 3, budget_minutes=6, rounds=True)
    assert found.rounds == pytest.approx(120.0) and found.seconds == pytest.approx(130.0)
    capped = estimates.estimate([train("imdb/pytorch/p~1_repeat~1.json")], history, 3, budget_minutes=1, rounds=True)
    assert capped.rounds == pytest.approx(60.0)


def test_with_no_record_of_this_machine_the_estimate_says_it_cannot_and_why(tmp_path):
    results = tmp_path / "results"
    write_record(results, "mnist/pytorch/p~1_repeat~1.json", 30.0, cpu="Another CPU")
    history = estimates.load_history([results], MACHINE)
    found = estimates.estimate([train("mnist/pytorch/p~1_repeat~1.json")], history, 3, 6, True)
    said = estimates.lines(found, history)[-1]
    assert said.startswith("dlbench estimate: none: no earlier record of this machine (Test CPU 9000)")
    assert "records of other machines: Another CPU" in said and "estimate_from" in said


def test_a_dry_run_ends_with_the_runs_to_run_and_what_they_cost(tmp_path):
    """Through Snakemake: a dry run of the default in a fresh folder names its runs per run set and
    says it cannot estimate; named an earlier results folder of this machine, it estimates."""
    fresh = copy_workflow(tmp_path / "fresh")
    small = ["--config", "workloads=[mnist,imdb]", "studies=[]"]
    proc = snakemake("-n", "--cores", "2", *small, cwd=fresh)
    tail = proc.stderr.strip().splitlines()[-2:]
    plan = plan_of(workloads=["mnist", "imdb"], studies=[])
    mnist, imdb = len(plan.first_records("mnist")), len(plan.first_records("imdb"))
    transformer = len(plan.first_records("imdb-transformer"))
    assert tail[0].startswith(f"dlbench plan: {mnist + imdb + transformer} runs to run ({imdb} imdb, "
                              f"{transformer} imdb-transformer, {mnist} mnist), "), tail
    assert tail[1].startswith("dlbench estimate: none: no earlier record of this machine"), tail
    from dlbench.machine import cpu_model
    earlier = tmp_path / "earlier"
    for path in plan.first_records("mnist"):
        write_record(earlier, path.removeprefix("results/runs/"), 12.0, cpu=cpu_model())
    proc = snakemake("-n", "--cores", "2", *small, f"estimate_from=[{earlier}]", cwd=fresh)
    said = proc.stderr.strip().splitlines()[-1]
    assert said.startswith("dlbench estimate: ") and f"{len(plan.first_records('mnist'))} runs by their own earlier record" in said, said


# ---- every preset and every documented command, through Snakemake --------------------------------

def documented_commands():
    """Every `snakemake` command line in a code block of the README and docs/ (fenced or indented)."""
    found = {}
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text()
        lines = [line for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S) for line in block.splitlines()]
        lines += [line for line in text.splitlines() if line.startswith("    ")]
        for line in lines:
            command = line.split("#")[0].strip()
            if command.startswith("snakemake "):
                found.setdefault(command, page.name)
    return found


DOCUMENTED = documented_commands()


def yaml_block(page, first_line):
    """The YAML code block of a page that starts with `first_line`."""
    for block in re.findall(r"```yaml\n(.*?)```", (REPO / page).read_text(), re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"{page}: no yaml block starting {first_line!r}")


# Every preset as a user would start it, and every command the pages show (a preset's documented
# command plans it once)
COMMANDS = dict.fromkeys([*DOCUMENTED, *(f"snakemake --cores all --configfile presets/{p}" for p in PRESETS)])


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.removeprefix("snakemake ")[:60])
def test_every_preset_and_every_documented_snakemake_command_plans(tmp_path, command):
    """Each as a user would type it, as a dry run in a fresh copy, with what its page says it needs:
    its own config file (the page's yaml block), a baseline to compare with, a run's results to report."""
    copy = copy_workflow(tmp_path / "copy")
    args = shlex.split(command)[1:]
    if "ab.yaml" in args:   # the README's A/B: a variant with an env file of its own
        (copy / "ab.yaml").write_text(yaml_block("README.md", "# ab.yaml"))
        (copy / "envs" / "pytorch-next.yaml").write_text((REPO / "envs" / "pytorch.yaml").read_text())
    if "byo.yaml" in args:  # docs/environments.md: an interpreter of the user's
        (copy / "byo.yaml").write_text(f"interpreters:\n  pytorch: {sys.executable}\n")
    if "compare" in args:   # a baseline results folder
        tables = tmp_path / "before" / "results" / "tables"
        tables.mkdir(parents=True)
        (tables / "mnist-units.csv").write_text("run_set\n")
        (copy.parent / "before").mkdir(exist_ok=True)
        args = [a.replace("../before/results", str(tmp_path / "before" / "results")) for a in args]
    if "--report" in args:
        pytest.skip("--report gathers a finished run's results: tests/test_workflow.py builds it after the smoke run")
    if "--use-conda" in args and not shutil.which("conda"):
        proc = snakemake(*args, "-n", cwd=copy, check=False)
        assert proc.returncode != 0 and "--use-conda needs conda" in proc.stdout + proc.stderr
        return
    proc = snakemake(*args, "-n", cwd=copy)
    assert "This was a dry-run" in proc.stdout + proc.stderr and "dlbench plan: " in proc.stderr


def test_use_conda_without_conda_names_what_is_missing_and_both_ways_on(tmp_path):
    """`snakemake --use-conda` on a machine without conda: before any job, a message naming conda and
    both ways on, in place of Snakemake's `Error running conda info`."""
    path = ":".join(p for p in (str(Path(sys.executable).parent), "/usr/bin", "/bin") if not (Path(p) / "conda").exists())
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--use-conda"], cwd=REPO,
                          capture_output=True, text=True, env={"PATH": path, "HOME": str(Path.home())})
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "--use-conda needs conda, and there is none on this machine's PATH" in said, said[-2000:]
    assert "install conda" in said and "run without --use-conda: the same envs/*.yaml then build as venvs" in said
    assert "Building DAG of jobs" not in said and "conda info" not in said


def test_each_part_of_the_default_is_dropped_by_the_key_docs_default_run_names():
    """docs/default-run.md, "What it costs": imdb.models [lstm] drops the Transformer, its memory pass
    and its ONNX export; memory.workloads [] the memory pass; onnx.models [] ONNX."""
    default = load_config(REPO / "config.yaml")

    def first_round(section, **change):
        counts = plan_of(**{section: {**default[section], **change}}).counts()
        return {name: first for name, (first, _) in counts.items() if first}

    lstm_only = first_round("imdb", models=["lstm"])
    assert not {"imdb-transformer", "imdb-transformer-memory"} & set(lstm_only) and lstm_only["onnx"] == 18
    assert not [name for name in first_round("memory", workloads=[]) if name.endswith("-memory")]
    assert "onnx" not in first_round("onnx", models=[])
