"""Evaluation metrics in numpy: ROC AUC per pathology and its macro average (ChestX-ray14)."""
import numpy as np


def average_ranks(values):
    """Ranks 1..n of values, ties given the mean of the ranks they span (as scipy's rankdata)."""
    values = np.asarray(values)
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    # Tie groups: where a value differs from the one before it, a new group starts.
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(values)]                  # exclusive
    group_rank = (starts + 1 + ends) / 2.0                 # mean of ranks starts+1 .. ends
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.repeat(group_rank, ends - starts)
    return ranks


def roc_auc(labels, scores):
    """Area under the ROC curve of one binary label, by the Mann-Whitney rank formula:
    (sum of the positives' ranks - P(P+1)/2) / (P N), tied scores sharing their mean rank
    (a tied positive/negative pair counts one half). None when the labels hold one class only."""
    labels = np.asarray(labels).ravel()
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if labels.shape != scores.shape:
        raise ValueError(f"{labels.size} labels but {scores.size} scores")
    if not np.isin(labels, (0, 1)).all():
        raise ValueError("labels must be 0 or 1")
    if np.isnan(scores).any():
        raise ValueError("scores hold NaN")
    positive = labels == 1
    n_pos = int(positive.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum = average_ranks(scores)[positive].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def auc_per_pathology(labels, scores, names):
    """labels, scores: [N, K]; names: K names -> {name: AUC, or None where one class only}."""
    labels, scores = np.asarray(labels), np.asarray(scores)
    if labels.ndim != 2 or labels.shape != scores.shape or labels.shape[1] != len(names):
        raise ValueError(f"labels {labels.shape} and scores {scores.shape} must both be [N, {len(names)}]")
    return {name: roc_auc(labels[:, k], scores[:, k]) for k, name in enumerate(names)}


def macro_auc(per_pathology):
    """Mean of the defined AUCs of auc_per_pathology's result; None if none is defined."""
    defined = [value for value in per_pathology.values() if value is not None]
    return float(np.mean(defined)) if defined else None
