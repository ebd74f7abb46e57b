"""What every figure shares (dlbench.plots): a framework's colour is the same in every figure,
and a flagged point's mark is explained in the legend, only the marks that appear."""
import json
import textwrap

from conftest import report_python

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
    out = report_python("-c", DRAW, json.dumps(rows), str(tmp_path / "figure.png"),
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


# Runs in the report env: which runs the accuracy figures and the loss curves read.
CONVERGENCE = textwrap.dedent("""
    import json, sys
    import pandas as pd
    from dlbench import plots

    runs, convergence, units = (pd.DataFrame(json.loads(arg)) for arg in sys.argv[1:4])
    drawn = []
    plots.save = lambda grid, path, title: drawn.append(grid.data)   # keep what the figure drew
    plots.loss_curves(convergence, units, sys.argv[4], "losses")
    print(json.dumps({"accuracy": sorted(plots.convergence_runs(runs)["run_id"]),
                      "losses": sorted(set(drawn[0]["run_id"]))}))
""")


def tables_of(segments_in):
    """Runs, convergence and units tables of one framework's repeats 1 to 3; the repeats in
    `segments_in` trained 2 convergence segments, the others none (one row, no segment)."""
    runs, convergence, units = [], [], []
    for repeat in (1, 2, 3):
        run = {"framework": "pytorch", "run_id": f"repeat~{repeat}", "repeat": repeat, "status": "ok"}
        carries = repeat in segments_in
        runs.append({**run, "segments": 2 if carries else 0, "final_test_accuracy": 0.9 if carries else None})
        convergence += ([{**run, "segment": s, "step": 10 * s, "loss": 1.0 / s} for s in (1, 2)] if carries
                        else [{**run, "segment": None, "step": None, "loss": None}])
        start = 20 if carries else 0
        units += [{**run, "step": start + 10 * u, "loss": 0.4} for u in (1, 2)]
    return runs, convergence, units


def convergence_figures(tmp_path, segments_in):
    tables = [json.dumps(table) for table in tables_of(segments_in)]
    out = report_python("-c", CONVERGENCE, *tables, str(tmp_path / "loss.png"),
                        capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_accuracy_and_loss_curves_read_the_repeats_that_carry_segments(tmp_path):
    # repeat 1 trained the segments (measurement.convergence_repeats 1); 2 and 3 measured throughput only
    assert convergence_figures(tmp_path, {1}) == {"accuracy": ["repeat~1"], "losses": ["repeat~1"]}
    # a run set without convergence steps: every repeat trained alike
    every = ["repeat~1", "repeat~2", "repeat~3"]
    assert convergence_figures(tmp_path, set()) == {"accuracy": every, "losses": every}


# Runs in the report env: ChestX-ray's loader verdict of one framework loader's point beside the
# training points given (JSON), as its table reads in CSV.
VERDICT = textwrap.dedent("""
    import io, json, sys
    import pandas as pd
    from dlbench.workloads.chestxray.scripts import plot
    rates = pd.DataFrame([{"framework": "pytorch", "loader": "pytorch loader", "format": "jpeg", "workers": 1,
                           "mean": 50.0, "ci_low": 40.0, "ci_high": 60.0}])
    table = io.StringIO()
    plot.loader_verdict(pd.DataFrame(json.loads(sys.argv[1]), columns=["framework", "input", "devices", "mean"]),
                        rates).to_csv(table, index=False)
    row = pd.read_csv(io.StringIO(table.getvalue())).iloc[0]
    print(json.dumps({name: None if pd.isna(value) else getattr(value, "item", lambda: value)()
                      for name, value in row.items()}))
""")


def test_a_loader_verdict_without_synthetic_training_is_not_measured():
    """The verdict compares a loader with the synthetic-data trainer; a run of real input only (as the
    smoke preset's) has none, so the table leaves the verdict empty instead of failing or saying no."""
    def verdict(training):
        out = report_python("-c", VERDICT, json.dumps(training), capture_output=True, text=True, check=True).stdout
        return json.loads(out)
    fed = verdict([{"framework": "pytorch", "input": "synthetic", "devices": 1, "mean": 30.0}])
    assert fed["trainer_images_per_s"] == 30.0 and fed["keeps_trainer_fed"] is True
    real_only = verdict([{"framework": "pytorch", "input": "real", "devices": 1, "mean": 30.0}])
    assert real_only["trainer_images_per_s"] is None and real_only["keeps_trainer_fed"] is None


# Runs in the report env: the loss curves of one framework at two precisions.
PRECISION_LOSSES = textwrap.dedent("""
    import json, sys
    import pandas as pd
    from dlbench import plots

    convergence, units = (pd.DataFrame(json.loads(arg)) for arg in sys.argv[1:3])
    drawn = []
    plots.save = lambda grid, path, title: drawn.append(grid)
    plots.loss_curves(convergence, units, sys.argv[3], "losses")
    legend = [text.get_text() for text in drawn[0].legend.texts]
    print(json.dumps({"precisions": sorted(set(drawn[0].data["precision"])), "legend": legend}))
""")


def test_each_precision_s_loss_curve_is_drawn_beside_float32_s(tmp_path):
    convergence, units = [], []
    for policy, scale in (("float32", 1.0), ("mixed-bfloat16", 1.01)):
        run = {"framework": "pytorch", "run_id": f"precision~{policy}_repeat~1", "precision": policy, "repeat": 1,
               "status": "ok"}
        convergence += [{**run, "segment": s, "step": 10 * s, "loss": scale / s} for s in (1, 2)]
        units += [{**run, "step": 30, "loss": 0.4 * scale}]
    out = report_python("-c", PRECISION_LOSSES, json.dumps(convergence), json.dumps(units), str(tmp_path / "loss.png"),
                        capture_output=True, text=True, check=True).stdout
    drawn = json.loads(out)
    assert drawn["precisions"] == ["float32", "mixed-bfloat16"]
    assert {"precision", "float32", "mixed-bfloat16"} <= set(drawn["legend"])  # a line style per precision


# Runs in the report env: the precision figure's labels, from a ratios and a runs table (JSON).
PRECISION_FIGURE = textwrap.dedent("""
    import json, sys
    import pandas as pd
    from dlbench import plots

    ratios, runs = (pd.DataFrame(json.loads(arg)) for arg in sys.argv[1:3])
    drawn = []
    plots.interval_plot = lambda frame, labels, *args, **kwargs: drawn.append(list(labels))
    plots.precision_figure(ratios, runs, sys.argv[3], "precision")
    print(json.dumps(drawn[0]))
""")


def test_the_precision_figure_labels_each_ratio_with_its_measured_16_bit_share(tmp_path):
    ratio = {"run_set": "chestxray", "framework": "pytorch", "input": "synthetic", "precision": None,
             "ratio": 1.4, "ci_low": 1.3, "ci_high": 1.5}
    ratios = [{**ratio, "comparison": "mixed-bfloat16 / float32"},
              {**ratio, "comparison": "tensorflow (graph) / pytorch (eager)", "framework": "", "precision": "float32"}]
    runs = [{"framework": "pytorch", "input": "synthetic", "precision": policy, "precision_share_16bit": share}
            for policy, share in (("float32", 0.0), ("mixed-bfloat16", 0.999997), ("mixed-bfloat16", 1.0))]
    out = report_python("-c", PRECISION_FIGURE, json.dumps(ratios), json.dumps(runs), str(tmp_path / "p.png"),
                        capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["pytorch mixed-bfloat16 / float32 (measured: 99.9% of its FLOPs in 16 bits)"]
