"""The ChestX-ray training loader alone, without a model: each framework's own loader and
decoder on the real training images (decode, random crop and flip from the shared seed,
normalise, batches moved to the device), one device, `workers` workers, epochs of
`images` images (the training images in turn). A framework's
module reuses its ChestX-ray training loader; train_step only takes the batch.
"""
import numpy as np

from dlbench.workloads.chestxray.images import augmentation
from dlbench.workloads.chestxray.labels import split_files
from dlbench.contract import WithoutModel


class ChestXrayLoader(WithoutModel):
    def load_data(self):
        data = self.spec.data
        paths, labels = split_files(data.labels, data.images, "train")
        # An epoch of `images` images, independent of the training subset: the files in turn.
        turn = np.arange(self.spec.images) % len(paths)
        self.train_paths, self.train_labels = [paths[i] for i in turn], labels[turn]
        self.n_train = self.spec.images

    def augmentation(self, epoch, indices):
        data = self.spec.data
        return augmentation(self.spec.seed, epoch, indices, data.size, data.crop)


