"""ChestX-ray14 DenseNet, the part every framework shares: the split's files and labels,
the augmentation drawn from the shared seed, the synthetic tensors, validation and test AUC.

The model: DenseNet-121's architecture with the dense blocks of chestxray.blocks (DenseNet-121:
6,968,206 parameters with 14 outputs; the default's DenseNet-45: 1,342,798), sigmoid + binary
cross-entropy, Adam at the base learning rate times the device count (as the study did).

Input "real": the preprocessed size x size grey images through the framework's own loader
and decoder, `workers` workers; a random crop and horizontal flip per sample, their values
drawn from the seed, the epoch and the sample's index (`augmentation`), the same in every
framework; the grey value replicated to 3 channels and ImageNet-normalised. Input
"synthetic": random tensors made once in host memory (at most SYNTHETIC_POOL images, reused by
index), the same in every framework, gathered in the same order with no loader and copied to
the device each step (on a GPU each framework hides the copy in its own idiom: the next batch
copied while the step runs). Input "resident": the same tensors and labels, and the run's whole
order, put on the device once, outside the clock; each step gathers its batch there, and
nothing is copied from the host inside a step: the compute-only bound. On a CPU the device is
the host, and "resident" should measure what "synthetic" does, within the noise.

Evaluation reads the real validation and test images (centre crop) in both input modes, so
evaluation time compares; the framework decodes them (`eval_inputs`) and predicts logits.
"""
import numpy as np

from dlbench.workloads.chestxray.images import augmentation
from dlbench.workloads.chestxray.labels import PATHOLOGIES, split_files
from dlbench.workloads.chestxray.synthetic import SYNTHETIC_POOL
from dlbench.workloads.chestxray.metrics import auc_per_pathology, macro_auc
from dlbench.contract import Workload


def bce_with_logits(logits, labels):
    """Mean binary cross-entropy over samples and pathologies, from logits (numerically stable)."""
    logits = logits.astype(np.float64)
    return float(np.mean(np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))))


def synthetic_set(n_samples, seed, crop):
    """Random N(0, 1) float32 images [min(N, SYNTHETIC_POOL), 3, crop, crop] and random 0/1
    float32 labels [N, 14]."""
    rng = np.random.default_rng([seed, 1])
    images = rng.standard_normal((min(n_samples, SYNTHETIC_POOL), 3, crop, crop), dtype=np.float32)
    labels = rng.integers(0, 2, (n_samples, len(PATHOLOGIES))).astype(np.float32)
    return images, labels


class ChestXray(Workload):
    """The framework part adds eval_inputs(paths): the images of `paths`, in order, decoded
    and centre-cropped by the framework's own loader, as numpy float32 [B, 3, crop, crop]
    batches of spec.batch."""

    def load_data(self):
        data = self.spec.data
        self.train_paths, self.train_labels = split_files(data.labels, data.images, "train")
        self.n_train = len(self.train_paths)
        if self.spec.input in ("synthetic", "resident"):
            # at least one global batch of tensors, whatever the subset (the memory pass's large batches)
            self.n_train = max(self.n_train, self.spec.global_batch)
            self.synthetic_images, self.synthetic_labels = synthetic_set(self.n_train, self.spec.seed, data.crop)
        if self.placement.rank == 0:
            self.eval_files = {split: split_files(data.labels, data.images, split) for split in ("valid", "test")}

    @property
    def learning_rate(self):
        return self.spec.optimizer.lr * self.spec.devices

    def augmentation(self, epoch, indices):
        """(top, left, flip) int arrays of the samples `indices` in `epoch`."""
        data = self.spec.data
        return augmentation(self.spec.seed, epoch, indices, data.size, data.crop)

    def scores(self, split):
        """(mean BCE, {pathology: AUC or None}) of a split."""
        paths, labels = self.eval_files[split]
        logits = np.concatenate([self.predict(inputs) for inputs in self.eval_inputs(paths)])
        return bce_with_logits(logits, labels), auc_per_pathology(labels.astype(np.uint8), logits, PATHOLOGIES)

    def evaluate(self):
        loss, per_pathology = self.scores("valid")
        auc = macro_auc(per_pathology)
        return {"valid_loss": loss, **({"valid_auc": auc} if auc is not None else {})}

    def test_inputs(self):
        """The test split's images, decoded and centre-cropped (the ONNX export's check)."""
        return np.concatenate(list(self.eval_inputs(self.eval_files["test"][0])))

    def precision_inputs(self):
        """The batch of the precision probe (dlbench.precision): a batch of the synthetic tensors,
        whatever the run's input (an evaluation batch's shape)."""
        return synthetic_set(self.spec.batch, self.spec.seed, self.spec.data.crop)[0]

    def final_evaluation(self):
        loss, per_pathology = self.scores("test")
        return {"test_loss": loss, "test_auc": {"macro": macro_auc(per_pathology), "per_pathology": per_pathology}}
