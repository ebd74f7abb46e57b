import shutil
import subprocess
import sys

import pytest
import yaml

from dlbench.config import load_config
from dlbench.workloads import run_set
from conftest import REPO, copy_workflow, snakemake


def run_with(tmp_path, overrides, *args, cwd=REPO):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(overrides))
    return snakemake("--configfile", str(path), *args, cwd=cwd, check=False)


@pytest.mark.parametrize(
    "overrides, named",
    [
        ({"mnist": {"batches": [-64]}}, "batches"),
        ({"mnist": {"epoch": 2}}, "epoch"),  # a typo of 'epochs' is an unknown key
        ({"device": "tpu"}, "device"),
        # checked against the one list of frameworks (src/dlbench/frameworks/__init__.py)
        ({"frameworks": ["pytorch", "caffe"]}, "config frameworks: unknown framework 'caffe'"),
        ({"mnist": {"strategies": {"pytorch": ["parameter-server"]}}},
         "config mnist.strategies.pytorch: unknown strategy 'parameter-server'"),
        ({"chestxray": {"weights": {"theano": "w.npz"}}}, "config chestxray.weights: unknown framework 'theano'"),
        ({"chestxray": {"split": {"train": 0.7, "valid": 0.2, "test": 0.2}}}, "config chestxray.split"),
        # ImageNet weights are DenseNet-121's; the default trains DenseNet-45
        ({"chestxray": {"blocks": [2, 4, 8, 6], "weights": {"mxnet": "densenet121.params"}}},
         "config chestxray.weights (mxnet): ImageNet weights are DenseNet-121's; chestxray.blocks is [2, 4, 8, 6]"),
        ({"chestxray": {"blocks": [6, 12, 24]}}, "blocks"),
        # one word per meaning: an old key name stops, naming the new one
        ({"chestxray": {"preprocess": {"backends": ["pillow"]}}},
         "config chestxray.preprocess.backends: renamed to chestxray.preprocess.libraries"),
        ({"imdb": {"batch_sizes": [64]}}, "config imdb.batch_sizes: renamed to imdb.batches"),
        ({"chestxray": {"batch_size": 4}}, "config chestxray.batch_size: renamed to chestxray.batch"),
        ({"chestxray": {"decode_workers": [0]}}, "config chestxray.decode_workers: renamed to chestxray.decode.workers"),
        ({"chestxray": {"benchmark_images": {"loader": 8}}},
         "config chestxray.benchmark_images: renamed to chestxray.preprocess.images, chestxray.decode.images and "
         "chestxray.loader.images"),
    ],
)
def test_bad_config_stops_with_a_message_naming_the_key(tmp_path, overrides, named):
    proc = run_with(tmp_path, overrides, "-n")
    assert proc.returncode != 0
    assert named in proc.stdout + proc.stderr


def test_bad_config_stops_before_any_job(tmp_path):
    fresh = copy_workflow(tmp_path / "fresh")  # the session's copy may hold other tests' results
    proc = run_with(tmp_path, {"mnist": {"batches": [0]}}, "--cores", "1", cwd=fresh)
    assert proc.returncode != 0
    assert not (fresh / "results").exists()


def test_defaults_fill_what_a_preset_leaves_out():
    proc = snakemake("-n", "--configfile", "presets/smoke.yaml", "--print-compilation")
    assert proc.returncode == 0


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


def test_the_default_runs_every_mode_on_mnist_and_the_paper_preset_on_every_workload():
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
    paper = load_config(REPO / "config.yaml", REPO / "presets" / "paper.yaml")
    assert {fw: set(modes) for fw, modes in paper["mnist"]["modes"].items()} == general
    assert {fw: set(modes) for fw, modes in paper["chestxray"]["modes"].items()} == every
    assert {fw: set(modes) for fw, modes in paper["imdb"]["modes"].items()} == {
        **general, "pytorch": general["pytorch"] - {"channels-last"}}  # an LSTM has no channels


def test_a_framework_given_no_strategy_runs_on_one_device_only(tmp_path):
    extra = tmp_path / "one.yaml"
    extra.write_text("mnist: {devices: [1, 2], strategies: {mxnet: [], tensorflow: [mirrored]}}\n")
    config = load_config(REPO / "config.yaml", extra)
    rows = run_set("mnist").rows(config, ["mxnet", "tensorflow"], 1)
    assert {r["devices"] for r in rows if r["framework"] == "mxnet"} == {1}
    assert {r["strategy"] for r in rows if r["framework"] == "tensorflow" and r["devices"] == 2} == {"mirrored"}
