"""What every figure shares (dlbench.plots): a framework's colour is the same in every figure,
and a flagged point's mark is explained in the legend, only the marks that appear."""
import json
import subprocess
import textwrap

from conftest import venv_python

# Runs in the report env (seaborn): draws an interval plot and reports what it drew.
DRAW = textwrap.dedent("""
    import json, sys
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.colors import to_hex
    from dlbench import plots

    drawn = []
    plt.close = lambda fig: drawn.append(fig)   # keep the figure to look at it
    frame = pd.DataFrame(json.loads(sys.argv[1]))
    plots.interval_plot(frame, frame["framework"], "mean", "low", "high", sys.argv[2], "Which is fastest?",
                        "images/s", reference=1)
    fig = drawn[0]
    ax = fig.axes[0]
    points = [to_hex(bar.lines[0].get_color()) for bar in ax.containers]   # each point's dot and interval
    legend = [text.get_text() for legend in fig.legends for text in legend.get_texts()]
    print(json.dumps({"points": points, "legend": legend, "title": fig._suptitle.get_text(),
                      "colours": {name: to_hex(plots.colour(name)) for name in frame["framework"]}}))
""")


def draw(rows, tmp_path):
    out = subprocess.run([venv_python("report"), "-c", DRAW, json.dumps(rows), str(tmp_path / "figure.png")],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def row(framework, unstable=False, below_minimum=False):
    return {"framework": framework, "mean": 10.0, "low": 9.0, "high": 11.0, "unstable": unstable,
            "below_minimum": below_minimum, "contended": False}


def test_each_point_takes_its_framework_s_colour_and_the_legend_explains_its_marks(tmp_path):
    drawn = draw([row("pytorch"), row("tensorflow", unstable=True), row("mxnet", below_minimum=True)], tmp_path)
    assert drawn["points"] == [drawn["colours"][f] for f in ("pytorch", "tensorflow", "mxnet")]
    assert len(set(drawn["points"])) == 3
    assert any(text.startswith("hollow: unstable") for text in drawn["legend"])
    assert any("short units" in text for text in drawn["legend"])
    assert not any("contended" in text for text in drawn["legend"])   # no point ran contended
    assert drawn["title"] == "Which is fastest?"


def test_a_figure_without_flags_has_no_marks_to_explain(tmp_path):
    drawn = draw([row("pytorch"), row("jax")], tmp_path)
    assert drawn["legend"] == []
    # the same framework, the same colour, in every figure
    assert draw([row("jax"), row("chainer")], tmp_path)["colours"]["jax"] == drawn["colours"]["jax"]
