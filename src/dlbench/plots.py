"""What every workload's figures share (report environment: matplotlib, seaborn)."""
import matplotlib.pyplot as plt  # Agg by itself where there is no display
import seaborn as sns

sns.set_theme(style="whitegrid", context="paper")


def save(grid, path, title):
    grid.figure.suptitle(title, y=1.02)
    grid.figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(grid.figure)


def no_data(path, message):
    """A figure that says why it is empty, so that the report still has every entry."""
    fig, ax = plt.subplots(figsize=(5, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center")
    fig.savefig(path, dpi=120)
    plt.close(fig)
