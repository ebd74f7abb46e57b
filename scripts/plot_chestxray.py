"""The DenseNet-121 study's table and charts, and the loader and preprocessing results."""
import argparse
from pathlib import Path

import pandas as pd
import seaborn as sns

from dlbench.plots import no_data, save

FIGURES = ("train-minutes", "auc", "preprocess", "loaders", "utilisation")


def read_ok(path):
    frame = pd.read_csv(path)
    return frame[frame["status"] == "ok"].copy()


def train_minutes(epochs):
    """Train + validation minutes of each run (every epoch, first included, as the study timed)."""
    per_run = epochs.groupby(["framework", "run_id", "input", "devices", "strategy", "repeat"], as_index=False)
    minutes = per_run.agg(train_s=("wall_s", "sum"), validation_s=("eval_s", "sum"))
    minutes["minutes"] = (minutes["train_s"] + minutes["validation_s"]) / 60
    return minutes


def study_table(minutes):
    """Mean train + validation minutes: framework and devices (rows) by real or synthetic data."""
    table = minutes.pivot_table(index=["framework", "devices", "strategy"], columns="input", values="minutes",
                                aggfunc="mean")
    table.columns = [f"{column} data (min)" for column in table.columns]
    return table.reset_index()


def loader_verdict(training, loaders, decode):
    """Which loaders keep a trainer fed: their images/s against the real-data training images/s
    of one device (of the same framework; of the fastest framework for the image libraries)."""
    fed_rate = training[(training["input"] == "real") & (training["devices"] == 1)]
    fed_rate = fed_rate.groupby("framework")["samples_per_s"].mean()
    rows = []
    for row in loaders.itertuples():
        rows.append({"loader": f"{row.framework} loader", "format": "jpeg", "workers": row.workers,
                     "images_per_s": row.samples_per_s, "trainer_images_per_s": fed_rate.get(row.framework)})
    fastest = fed_rate.max() if len(fed_rate) else None
    for row in decode.itertuples():
        rows.append({"loader": f"{row.framework} (no framework)", "format": row.format, "workers": row.workers,
                     "images_per_s": row.samples_per_s, "trainer_images_per_s": fastest})
    verdict = pd.DataFrame(rows, columns=["loader", "format", "workers", "images_per_s", "trainer_images_per_s"])
    verdict["keeps_trainer_fed"] = verdict["images_per_s"] >= verdict["trainer_images_per_s"]
    return verdict.groupby(["loader", "format", "workers"], as_index=False).mean(numeric_only=True).assign(
        keeps_trainer_fed=lambda f: f["images_per_s"] >= f["trainer_images_per_s"])


def auc_table(training):
    columns = [c for c in training.columns if c.startswith("test_auc_per_finding_")]
    table = training[["framework", "input", "devices", "strategy", "repeat", "test_auc_macro", *columns]]
    return table.rename(columns={c: c.removeprefix("test_auc_per_finding_") for c in columns})


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("runs", "epochs", "utilisation", "loader-runs", "preprocess-runs", "decode-runs"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--outdir", required=True, type=Path)
    parser.add_argument("--minutes-table", required=True)
    parser.add_argument("--auc-table", required=True)
    parser.add_argument("--verdict-table", required=True)
    parser.add_argument("--image-source", required=True, help="'synthetic images' or 'NIH images'")
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    source = f"({args.image_source})"
    training = read_ok(args.runs)
    epochs = read_ok(args.epochs)
    loaders, preprocess, decode = (read_ok(p) for p in (args.loader_runs, args.preprocess_runs, args.decode_runs))

    minutes = train_minutes(epochs) if not epochs.empty else pd.DataFrame(
        columns=["framework", "input", "devices", "strategy", "repeat", "minutes"])
    study_table(minutes).to_csv(args.minutes_table, index=False) if not minutes.empty else \
        pd.DataFrame(columns=["framework", "devices", "strategy"]).to_csv(args.minutes_table, index=False)
    auc = auc_table(training) if "test_auc_macro" in training else pd.DataFrame(columns=["framework"])
    auc.to_csv(args.auc_table, index=False)
    loader_verdict(training, loaders, decode).to_csv(args.verdict_table, index=False)

    if minutes.empty:
        no_data(args.outdir / "train-minutes.png", "no successful DenseNet-121 run")
    else:
        minutes["devices"] = minutes["devices"].astype(str) + " (" + minutes["strategy"] + ")"
        grid = sns.catplot(data=minutes, x="minutes", y="framework", hue="input", col="devices", kind="bar",
                           errorbar="sd", height=3.5, aspect=1.2)
        grid.set(xlabel="train + validation (min)", ylabel="")
        save(grid, args.outdir / "train-minutes.png", f"DenseNet-121 on ChestX-ray14 {source}")

    if auc.empty or auc["test_auc_macro"].isna().all():
        no_data(args.outdir / "auc.png", "no test AUC (a split with one class only has none)")
    else:
        auc = auc.assign(run=auc["framework"] + " x" + auc["devices"].astype(str) + " " + auc["input"])
        grid = sns.catplot(data=auc, x="test_auc_macro", y="run", kind="bar", errorbar="sd", height=3.5, aspect=1.4)
        grid.refline(x=0.5, color="grey", linestyle=":")
        grid.set(xlabel="test AUC, macro over the findings", ylabel="", xlim=(0, 1))
        save(grid, args.outdir / "auc.png", f"DenseNet-121 test AUC {source}")

    if preprocess.empty:
        no_data(args.outdir / "preprocess.png", "no successful preprocessing run")
    else:
        grid = sns.catplot(data=preprocess, x="samples_per_s", y="backend", hue="format", kind="bar",
                           height=3, aspect=1.6)
        grid.set(xlabel="images/s: decode 1024x1024, resize to 264, encode, write", ylabel="")
        save(grid, args.outdir / "preprocess.png", f"Preprocessing throughput {source}")

    rates = pd.concat([
        loaders.assign(loader=loaders["framework"] + " loader", format="jpeg"),
        decode.assign(loader=decode["framework"] + " (no framework)"),
    ], ignore_index=True)
    if rates.empty:
        no_data(args.outdir / "loaders.png", "no successful loader run")
    else:
        grid = sns.catplot(data=rates, x="samples_per_s", y="loader", hue="workers", col="format", kind="bar",
                           errorbar="sd", palette="viridis", height=3.5, aspect=1.2)
        fed = training[(training["input"] == "real") & (training["devices"] == 1)]
        for ax in grid.axes.flat:
            for row in fed.groupby("framework")["samples_per_s"].mean().items():
                ax.axvline(row[1], color="grey", linestyle=":")
        grid.set(xlabel="images/s", ylabel="")
        save(grid, args.outdir / "loaders.png",
             f"Loaders {source}; dotted: real-data training images/s of each framework on one device")

    samples = pd.read_csv(args.utilisation)
    if samples.empty:
        no_data(args.outdir / "utilisation.png", "no utilisation samples")
    else:
        samples["run"] = samples["input"] + " x" + samples["devices"].astype(str)
        gpu = [c for c in samples.columns if c.startswith("gpu_percent_")]
        long = samples.melt(id_vars=["framework", "run", "t_s"], value_vars=["cpu_percent", *gpu],
                            var_name="device", value_name="utilisation")
        grid = sns.relplot(data=long, x="t_s", y="utilisation", hue="run", style="device", col="framework",
                           kind="line", height=3, aspect=1.3)
        grid.set(xlabel="time since the run started (s)", ylabel="utilisation (%)", ylim=(0, 105))
        save(grid, args.outdir / "utilisation.png", f"CPU (and GPU) utilisation over DenseNet-121 runs {source}")


if __name__ == "__main__":
    main()
