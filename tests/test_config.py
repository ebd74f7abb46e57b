import re
import shutil
import subprocess
import sys

import pytest
import yaml
from snakemake.exceptions import WorkflowError

from dlbench.config import load_config
from dlbench.definitions import run_set
from dlbench.errors import ConfigError
from conftest import REPO, copy_workflow, snakemake


def run_with(tmp_path, overrides, *args, cwd=REPO):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(overrides))
    return snakemake("--configfile", str(path), *args, cwd=cwd, check=False)


# A schema error names the key by its place in the config (jsonschema's "On instance[...]") and
# the value; the workflow's own checks name the key as "config <section>.<key>".
@pytest.mark.parametrize(
    "overrides, named",
    [
        ({"mnist": {"batches": [-64]}},
         ("ValidationError: -64 is less than the minimum of 1", "On instance['mnist']['batches'][0]")),
        # a typo of 'epochs' is an unknown key
        ({"mnist": {"epoch": 2}},
         ("ValidationError: Additional properties are not allowed ('epoch' was unexpected)", "On instance['mnist']")),
        ({"device_kind": "tpu"}, ("ValidationError: 'tpu' is not one of ['auto', 'cpu', 'gpu']", "On instance['device_kind']")),
        # checked against the one list of frameworks (src/dlbench/frameworks/__init__.py)
        ({"frameworks": ["pytorch", "caffe"]}, "config frameworks: unknown framework 'caffe'"),
        ({"mnist": {"strategies": {"pytorch": ["parameter-server"]}}},
         "config mnist.strategies.pytorch: unknown strategy 'parameter-server'"),
        ({"chestxray": {"weights": {"theano": "w.npz"}}}, "config chestxray.weights: unknown framework 'theano'"),
        ({"chestxray": {"split": {"train": 0.7, "valid": 0.2, "test": 0.2}}},
         ("config chestxray.split: the fractions {", "} sum to 1.1, not 1")),
        # ImageNet weights are DenseNet-121's; the default trains DenseNet-45
        ({"chestxray": {"blocks": [2, 4, 8, 6], "weights": {"mxnet": "densenet121.params"}}},
         "config chestxray.weights (mxnet): ImageNet weights are DenseNet-121's; chestxray.blocks is [2, 4, 8, 6]"),
        ({"chestxray": {"blocks": [6, 12, 24]}},
         ("ValidationError: [6, 12, 24] is too short", "On instance['chestxray']['blocks']")),
        # one word per meaning: an old key name stops, naming the new one
        ({"chestxray": {"preprocess": {"backends": ["pillow"]}}},
         "config chestxray.preprocess.backends: renamed to chestxray.preprocess.libraries"),
        ({"imdb": {"batch_sizes": [64]}}, "config imdb.batch_sizes: renamed to imdb.batches"),
        ({"chestxray": {"batch_size": 4}}, "config chestxray.batch_size: renamed to chestxray.batch"),
        ({"chestxray": {"decode_workers": [0]}}, "config chestxray.decode_workers: renamed to chestxray.decode.workers"),
        # counts that multiply runs or memory have bounds (the dry run of repeats 100000 filled 5.7 GB)
        ({"measurement": {"repeats": 100000}},
         ("ValidationError: 100000 is greater than the maximum of 100", "On instance['measurement']['repeats']")),
        ({"measurement": {"steady_units": 10 ** 6}},
         ("ValidationError: 1000000 is greater than the maximum of 100", "On instance['measurement']['steady_units']")),
        # a batch the data it divides cannot fill stops here, not when its run starts
        ({"mnist": {"batches": [10 ** 9], "devices": [1]}},
         "config mnist.batches: a batch of 1000000000 is more than the 4096 training images of model small"),
        ({"mnist": {"batches": [4096], "devices": [1, 2]}},
         "config mnist.batches: a batch of 4096 on 2 devices is more than the 4096 training images of model small"),
        ({"imdb": {"convergence_batch": 20000}},
         "config imdb.convergence_batch: a batch of 20000 is more than the 12500 training reviews"),
        ({"chestxray": {"batch": 64}},
         "config chestxray.batch: a batch of 64 is more than the 8 training images (chestxray.subset.train)"),
        ({"chestxray": {"benchmark_images": {"loader": 8}}},
         "config chestxray.benchmark_images: renamed to chestxray.preprocess.images, chestxray.decode.images and "
         "chestxray.loader.images"),
        # the studies: checked against their registry (src/dlbench/studies/__init__.py), a renamed one named
        ({"studies": ["onnx", "paper"]}, "config studies: unknown study 'paper' (known: onnx, matmul, memory, findings)"),
        ({"studies": ["survey"]}, "config studies: study 'survey' renamed to 'findings'"),
        ({"workloads": ["mnist", "survey"]}, "config workloads: study 'survey' renamed to 'findings'"),
        ({"workloads": ["mnist", "cifar"]}, "config workloads: unknown workload 'cifar' (known: mnist, imdb, chestxray;"),
        # what a study reads of the workloads is what they declare
        ({"memory": {"batches": {"cifar": [8]}}},
         "config memory.batches.cifar: cifar declares no MEMORY_BATCHES: the memory pass measures mnist, imdb, chestxray"),
        # the A/B's positive control (docs/ab.md): a fraction of the throughput, below a half
        ({"variants": {"pytorch-slow": {"framework": "pytorch", "environment": {"DLBENCH_PLANTED_SLOWDOWN": "0.5"}}}},
         "config variants.pytorch-slow.environment: DLBENCH_PLANTED_SLOWDOWN=0.5: a fraction of the throughput"),
        ({"onnx": {"models": ["resnet"]}}, "config onnx.models: unknown model 'resnet' (the workloads' EXPORTS: "
                                            "mnist-small, imdb-lstm, imdb-transformer, densenet)"),
    ],
)
def test_bad_config_stops_with_a_message_naming_the_key(tmp_path, overrides, named):
    """Through load_config: the Snakefile's checks in the Snakefile's order (renamed keys, the
    schema through Snakemake's own validate, the workflow's checks); each kind's message reaches
    a Snakemake invocation (the next test)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(overrides))
    with pytest.raises((ConfigError, WorkflowError)) as stopped:
        load_config(REPO / "config.yaml", bad)
    for part in [named] if isinstance(named, str) else named:
        assert part in str(stopped.value), (part, str(stopped.value))


@pytest.mark.parametrize("overrides, named", [
    ({"device_kind": "tpu"}, "ValidationError: 'tpu' is not one of ['auto', 'cpu', 'gpu']"),  # the schema
    ({"imdb": {"batch_sizes": [64]}}, "config imdb.batch_sizes: renamed to imdb.batches"),  # a renamed key
    ({"frameworks": ["pytorch", "caffe"]}, "config frameworks: unknown framework 'caffe'"),  # the workflow's own
    ({"chestxray": {"blocks": [2, 4, 8, 6], "weights": {"mxnet": "densenet121.params"}}},  # a workload's own
     "config chestxray.weights (mxnet): ImageNet weights are DenseNet-121's; chestxray.blocks is [2, 4, 8, 6]"),
], ids=["schema", "renamed", "workflow", "workload"])
def test_each_kind_of_bad_config_stops_snakemake_before_the_dag_naming_the_key(tmp_path, overrides, named):
    proc = run_with(tmp_path, overrides, "-n")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and named in output, output[-3000:]
    assert "Building DAG of jobs" not in output  # stopped before planning a job


def test_a_plan_of_too_many_runs_stops_naming_the_settings_that_multiply_it(tmp_path):
    """Each setting within its bounds, their product not: 40 batches x 100 repeats of MNIST."""
    proc = run_with(tmp_path, {"measurement": {"repeats": 100, "max_repeats": 100},
                               "mnist": {"batches": list(range(1, 41))}}, "-n")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "runs planned, more than 20,000 (the most: mnist," in output, output[-3000:]
    assert "measurement.max_repeats 100" in output and "fewer values in the lists of mnist" in output
    assert "Building DAG of jobs" not in output


def test_bad_config_stops_before_any_job(tmp_path):
    fresh = copy_workflow(tmp_path / "fresh")  # the session's copy may hold other tests' results
    proc = run_with(tmp_path, {"mnist": {"batches": [0]}}, "--cores", "1", cwd=fresh)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    # stopped by the config (not by anything else that fails), and before its first job
    assert "ValidationError: 0 is less than the minimum of 1" in output and "On instance['mnist']['batches'][0]" in output, \
        output[-3000:]
    assert "Building DAG of jobs" not in output and not re.search(r"^(local)?rule \w+:$", output, re.MULTILINE), \
        output[-3000:]
    assert not (fresh / "results").exists()


def test_defaults_fill_what_a_preset_leaves_out(tmp_path):
    """A preset names only what it changes: config.yaml (and the schema's defaults) fill the rest,
    key by key inside a section too (here mnist.batches from the preset, mnist's other keys and
    measurement.repeats from config.yaml)."""
    fresh = copy_workflow(tmp_path / "fresh")  # nothing done yet: every run is planned
    preset = tmp_path / "preset.yaml"
    preset.write_text(yaml.safe_dump({"workloads": ["mnist"], "studies": [], "frameworks": ["pytorch", "tensorflow"],
                                      "mnist": {"batches": [32]}}))
    out = snakemake("-n", "--configfile", str(preset), cwd=fresh).stdout
    runs = [dict(field.split("~") for field in match[2].split("_"))
            | {"run_set": match[0], "framework": match[1]}
            for match in re.findall(r"output: results/runs/([^/\s]+)/([^/\s]+)/(\S+?)\.json", out)]
    assert runs, out[-3000:]
    default = load_config(REPO / "config.yaml")
    # the preset's
    assert {(run["run_set"], run["framework"]) for run in runs} == {("mnist", "pytorch"), ("mnist", "tensorflow")}
    assert {run["batch"] for run in runs} == {"32"}
    # config.yaml's, which the preset leaves out
    assert {run["model"] for run in runs} == set(default["mnist"]["models"])
    assert {int(run["repeat"]) for run in runs} == set(range(1, default["measurement"]["repeats"] + 1))
    for framework in ("pytorch", "tensorflow"):
        mine = [run for run in runs if run["framework"] == framework]
        assert {run["mode"] for run in mine} == set(default["mnist"]["modes"][framework]), framework
        assert {run["strategy"] for run in mine} - {"none"} == set(default["mnist"]["strategies"][framework]), framework
    # tensorflow's strategy spans config.yaml's device counts; pytorch, given none, runs on one device
    assert {int(run["devices"]) for run in runs if run["framework"] == "tensorflow"} == set(default["mnist"]["devices"])
    assert {int(run["devices"]) for run in runs if run["framework"] == "pytorch"} == {1}


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, workflow_copy):
    bad = tmp_path / "bad.yaml"
    bad.write_text("mnist:\n  epochs: [2\n")
    check = subprocess.run([sys.executable, "-m", "dlbench.config", "presets/smoke.yaml", str(bad)], cwd=REPO,
                           capture_output=True, text=True)
    assert check.returncode != 0 and f"{bad}: not valid YAML: line 3" in check.stderr
    copy = tmp_path / "copy"
    shutil.copytree(workflow_copy, copy, ignore=shutil.ignore_patterns("results", ".snakemake"))
    (copy / "config.yaml").write_text((copy / "config.yaml").read_text() + "oops: [\n")
    proc = snakemake("-n", cwd=copy, check=False)
    assert proc.returncode != 0 and "config.yaml: not valid YAML: line" in proc.stdout + proc.stderr


def test_the_default_runs_every_mode_on_mnist_and_the_modes_preset_on_every_workload():
    from dlbench.frameworks import FRAMEWORKS, RECOMPUTING

    every = {name: {mode for mode, _ in framework.modes} for name, framework in FRAMEWORKS.items()}
    # The memory-saving modes recompute DenseNet's dense layers: ChestX-ray's only
    general = {name: modes - {RECOMPUTING.get(name)} for name, modes in every.items()}
    default = load_config(REPO / "config.yaml")
    # the default: each framework's default mode, and the survey's two compiled / imperative pairs
    assert {fw: modes for fw, modes in default["mnist"]["modes"].items()} == {
        fw: [FRAMEWORKS[fw].default_mode] + {"tensorflow": ["eager"], "mxnet": ["imperative"]}.get(fw, [])
        for fw in FRAMEWORKS}
    assert all(modes == [FRAMEWORKS[fw].default_mode] for fw, modes in default["imdb"]["modes"].items())
    # ChestX-ray's memory-saving modes are the modes preset's, not the default's
    assert all(modes == [FRAMEWORKS[fw].default_mode] for fw, modes in default["chestxray"]["modes"].items())
    modes = load_config(REPO / "config.yaml", REPO / "presets" / "study-modes.yaml")
    assert {fw: set(modes) for fw, modes in modes["mnist"]["modes"].items()} == general
    assert {fw: set(modes) for fw, modes in modes["chestxray"]["modes"].items()} == every
    assert {fw: set(modes) for fw, modes in modes["imdb"]["modes"].items()} == {
        **general, "pytorch": general["pytorch"] - {"channels-last"}}  # an LSTM has no channels


def test_a_framework_given_no_strategy_runs_on_one_device_only(tmp_path):
    extra = tmp_path / "one.yaml"
    extra.write_text("mnist: {devices: [1, 2], strategies: {mxnet: [], tensorflow: [mirrored]}}\n")
    config = load_config(REPO / "config.yaml", extra)
    rows = run_set("mnist").rows(config, ["mxnet", "tensorflow"], 1)
    assert {r["devices"] for r in rows if r["framework"] == "mxnet"} == {1}
    assert {r["strategy"] for r in rows if r["framework"] == "tensorflow" and r["devices"] == 2} == {"mirrored"}


OLD_STYLE = "warning: config workloads: onnx, matmul are studies, taken as studies: [onnx, matmul]"


def test_studies_listed_under_workloads_are_taken_as_studies_with_a_warning(tmp_path, capsys):
    """A config from before the studies had their own key (workloads: [..., onnx, findings]) works
    for one release: the studies it lists under workloads are its studies (those it leaves out do
    not run, as before), and one warning names the key studies."""
    old = tmp_path / "old.yaml"
    old.write_text("workloads: [mnist, onnx, matmul]\n")
    config = load_config(REPO / "config.yaml", old)
    assert config["workloads"] == ["mnist"] and config["studies"] == ["onnx", "matmul"]
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and OLD_STYLE in err and "list them under the key studies" in err
    # the new key: the same config, no warning
    new = tmp_path / "new.yaml"
    new.write_text("workloads: [mnist]\nstudies: [onnx, matmul]\n")
    assert {k: v for k, v in load_config(REPO / "config.yaml", new).items()} == config
    assert "warning" not in capsys.readouterr().err
    # left out: every study; a workloads list with no study leaves them as they are
    assert load_config(REPO / "config.yaml")["studies"] == ["onnx", "matmul", "memory", "findings"]
    only = tmp_path / "only.yaml"
    only.write_text("workloads: [mnist]\n")
    assert load_config(REPO / "config.yaml", only)["studies"] == ["onnx", "matmul", "memory", "findings"]


def test_an_old_style_config_plans_what_the_new_key_plans_saying_so_once(tmp_path):
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text("workloads: [mnist, onnx, matmul]\nframeworks: [pytorch, jax]\n")
    new.write_text("workloads: [mnist]\nstudies: [onnx, matmul]\nframeworks: [pytorch, jax]\n")
    planned = {}
    for name, path in (("old", old), ("new", new)):
        proc = snakemake("-n", "--forceall", "--configfile", str(path))
        planned[name] = sorted(re.findall(r"output: (results/\S+)", proc.stdout))
        warned = (proc.stdout + proc.stderr).count("warning: config workloads:")
        assert warned == (1 if name == "old" else 0), name
    assert planned["old"] == planned["new"] and any("results/runs/onnx/" in p for p in planned["old"])


def test_a_renamed_key_or_value_is_taken_under_its_new_name_with_a_warning(tmp_path, capsys):
    """device -> device_kind and ChestX-ray's input device -> resident (one word per meaning): an old
    config means what it meant for one release (over config.yaml's new key), each rename said once."""
    old = tmp_path / "old.yaml"
    old.write_text("device: cpu\nchestxray: {inputs: [synthetic, device]}\n")
    config = load_config(REPO / "config.yaml", old)
    assert config["device_kind"] == "cpu" and "device" not in config
    assert config["chestxray"]["inputs"] == ["synthetic", "resident"]
    err = capsys.readouterr().err
    assert "warning: config device: renamed to device_kind" in err
    assert "warning: config chestxray.inputs: device renamed to resident" in err and err.count("warning:") == 2
    new = tmp_path / "new.yaml"
    new.write_text("device_kind: cpu\nchestxray: {inputs: [synthetic, resident]}\n")
    assert load_config(REPO / "config.yaml", new) == config and "warning" not in capsys.readouterr().err


def test_a_working_folder_other_than_the_clone_reads_the_workflow_s_own_config(tmp_path):
    """snakemake --directory elsewhere -s <clone>/Snakefile: the clone's config.yaml under the one given."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = snakemake("-n", "--directory", str(elsewhere), "-s", str(REPO / "Snakefile"),
                     "--configfile", str(REPO / "presets" / "smoke.yaml"), cwd=tmp_path)
    [line] = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if "Config file(s):" in line]
    assert f"{REPO}/config.yaml" in line and "smoke.yaml" in line, line
    assert "output: results/runs/mnist/" in proc.stdout


@pytest.mark.parametrize("preset", sorted(path.name for path in (REPO / "presets").glob("*.yaml")))
def test_every_preset_passes_the_config_checks(preset):
    config = load_config(REPO / "config.yaml", REPO / "presets" / preset)
    if preset == "ab.yaml":  # the A/B's calibration (docs/ab.md): an A/A and a planted 10% slowdown
        aa = config["variants"]["pytorch-aa"]
        assert not aa["environment"] and not aa["env"] and aa["allocator"] is aa["denormals"] is aa["threads"] is None
        assert config["variants"]["pytorch-planted"]["environment"] == {"DLBENCH_PLANTED_SLOWDOWN": "0.10"}
