"""The lines of framework-specific code (findings/scripts/code_lines.py): radon's count without
comments, docstrings and blank lines, per run set and framework, next to its speed. The script runs
in the report env, which has radon (the driver does not need it), as the workflow runs it."""
import pandas as pd

from conftest import REPO, SRC, report_python
from dlbench.frameworks import FRAMEWORKS

CODE_LINES = REPO / "src" / "dlbench" / "studies" / "findings" / "scripts" / "code_lines.py"

# 10 lines of code: the docstrings (a module's on two lines, a function's on one, a class's with a
# blank line in it), the comments' lines and the blank lines are left out; a line with code and a
# comment, and strings that are values (on two lines each), are code.
MODULE = '''"""A module docstring
on two lines."""
import math  # a trailing comment: the line is code

# a comment line


def area(radius):
    """One line."""
    return math.pi * radius ** 2


class Circle:
    \'\'\'A docstring

    with a blank line.\'\'\'

    def __init__(self, radius):
        self.radius = radius
        self.label = ("a string that is a value, "
                      # a comment within a statement: radon alone counts it
                      "on two lines")
        self.text = """a multi-line string
that is a value"""
'''
TASK = '"""The shared part."""\nclass Task:\n    pass\n'
BACKEND = "# the adapter\nDEVICE = 'cpu'\n\n\ndef device():\n    return DEVICE\n"


def write_tree(root, files):
    """A src/ folder with `files`: {path under src/dlbench/: text}."""
    for name, text in files.items():
        path = root / "dlbench" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def count(tmp_path, src, workloads, frameworks, points=(), inputs=None, check=True):
    """Run the script; its table, or the finished process where check is false."""
    inputs = [str(p) for p in src.rglob("*.py")] if inputs is None else inputs
    table = tmp_path / "findings-code-lines.csv"
    figure = tmp_path / "code-lines.png"
    proc = report_python(str(CODE_LINES), "--src", str(src), "--workloads", *workloads,
                         "--frameworks", *frameworks, "--points", *map(str, points), "--inputs", *inputs,
                         "--table", str(table), "--figure", str(figure), capture_output=True, text=True)
    if not check:
        return proc
    assert proc.returncode == 0, proc.stderr
    assert figure.stat().st_size > 0
    return pd.read_csv(table).set_index("framework")


def test_lines_are_counted_without_comments_docstrings_and_blank_lines(tmp_path):
    src = write_tree(tmp_path / "src", {"studies/matmul/pytorch.py": MODULE, "studies/matmul/task.py": TASK,
                                        "frameworks/pytorch/__init__.py": BACKEND,
                                        "frameworks/pytorch/step.py": MODULE})
    row = count(tmp_path, src, ["matmul"], ["pytorch"]).loc["pytorch"]
    assert row["module"] == "dlbench/studies/matmul/pytorch.py"
    assert (row["code_lines"], row["shared_lines"], row["adapter_lines"]) == (10, 2, 3 + 10)
    assert not row["module_shared"]
    assert pd.isna(row["samples_per_s"])  # no points table: no speed


def test_keras_frameworks_share_one_module_and_a_framework_without_one_has_no_row(tmp_path):
    src = write_tree(tmp_path / "src", {"workloads/mnist/keras.py": MODULE, "workloads/mnist/task.py": TASK,
                                        "workloads/mnist/pytorch.py": TASK,
                                        "frameworks/keras/__init__.py": BACKEND,
                                        "frameworks/pytorch/__init__.py": BACKEND})
    table = count(tmp_path, src, ["mnist"], ["pytorch", "keras-jax", "keras-torch", "jax"])
    assert list(table.index) == ["pytorch", "keras-jax", "keras-torch"]   # jax has no module here
    assert list(table["code_lines"]) == [2, 10, 10]
    assert list(table["module_shared"]) == [False, True, True]


def test_the_speed_is_at_the_point_most_frameworks_ran_in_their_default_mode(tmp_path):
    src = write_tree(tmp_path / "src", {"workloads/mnist/pytorch.py": MODULE, "workloads/mnist/tensorflow.py": MODULE,
                                        "workloads/mnist/task.py": TASK,
                                        "frameworks/pytorch/__init__.py": BACKEND,
                                        "frameworks/tensorflow/__init__.py": BACKEND})
    points = pd.DataFrame([
        # pytorch alone at batch 512; both at batch 256, pytorch also in a mode that is not its default
        {"framework": "pytorch", "batch": 512, "mode": "eager", "mean": 900.0},
        {"framework": "pytorch", "batch": 256, "mode": "compile", "mean": 700.0},
        {"framework": "pytorch", "batch": 256, "mode": "eager", "mean": 500.0},
        {"framework": "tensorflow", "batch": 256, "mode": "graph", "mean": 400.0},
    ]).assign(run_set="mnist", repeats=3, ci_low=lambda f: f["mean"] * 0.9, ci_high=lambda f: f["mean"] * 1.1)
    points = points[["run_set", "framework", "batch", "mode", "repeats", "mean", "ci_low", "ci_high"]]
    points.to_csv(tmp_path / "mnist-points.csv", index=False)
    table = count(tmp_path, src, ["mnist"], ["pytorch", "tensorflow"], points=[tmp_path / "mnist-points.csv"])
    speed = table.loc["pytorch", ["mode", "samples_per_s", "ci_low", "ci_high"]]
    assert speed.tolist() == ["eager", 500.0, 450.0, 550.0]
    assert table.loc["tensorflow", "samples_per_s"] == 400.0
    assert set(table["point"]) == {"batch=256"}


def test_a_counted_file_that_is_no_input_of_the_rule_stops_the_count(tmp_path):
    src = write_tree(tmp_path / "src", {"studies/matmul/pytorch.py": MODULE, "studies/matmul/task.py": TASK,
                                        "frameworks/pytorch/__init__.py": BACKEND})
    proc = count(tmp_path, src, ["matmul"], ["pytorch"], inputs=[str(src / "dlbench/studies/matmul/pytorch.py")],
                 check=False)
    assert proc.returncode != 0 and "frameworks/pytorch/__init__.py" in proc.stderr


def test_every_framework_s_mnist_module_has_lines(tmp_path):
    table = count(tmp_path, SRC, ["mnist"], list(FRAMEWORKS))
    assert set(table.index) == set(FRAMEWORKS)
    assert (table[["code_lines", "adapter_lines", "shared_lines"]] > 0).all().all()
