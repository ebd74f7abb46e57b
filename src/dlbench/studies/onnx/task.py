"""An exported model in one runtime (a run of no framework; dlbench.studies.onnx.definition):
a step is the inference of one batch of the test inputs, drawn in the run's order (an epoch
of at least one batch: the inputs in turn); the final evaluation checks the runtime's outputs
on every test input against PyTorch's.
"""
import math

import numpy as np

from dlbench.contract import WithoutModel
from dlbench.errors import NotApplicable
from dlbench.studies.onnx.runtimes import RUNTIMES

CHECK_BATCH = 64  # the agreement check's batch


class OutputsDiffer(RuntimeError):
    """The runtime's outputs are not PyTorch's."""


def agreement(outputs, reference, classes):
    """(largest absolute difference, share of predicted classes that agree): argmax over the
    outputs (one class per input), or the sign of each logit (a finding per output)."""
    difference = float(np.abs(outputs.astype(np.float64) - reference).max())
    if classes == "argmax":
        agree = float(np.mean(outputs.argmax(axis=1) == reference.argmax(axis=1)))
    else:
        agree = float(np.mean((outputs > 0) == (reference > 0)))
    return difference, agree


class OnnxInference(WithoutModel):
    @classmethod
    def check(cls, spec, device_kind):
        if device_kind != "cpu":
            raise NotApplicable("the exported models run on the CPU here (the GPU path is the GPU issue's)")

    def load_data(self):
        self.inputs = np.load(self.spec.data.inputs)
        self.reference = np.load(self.spec.data.reference)
        # An epoch holds at least one batch: the inputs in turn.
        self.n_train = len(self.inputs) * math.ceil(self.spec.batch / len(self.inputs))

    def build_training(self):
        self.runtime = RUNTIMES[self.spec.runtime]()
        self.library_version = self.runtime.load(self.spec)  # NotApplicable: an operator it cannot translate

    def batches(self, order, epochs):
        # Each batch gathered and put where the runtime computes when the step asks for it.
        return (self.runtime.prepare(self.inputs[indices % len(self.inputs)]) for indices in order)

    def train_step(self, batch):
        self.runtime.run(batch)
        return None

    def predict(self, inputs):
        return self.runtime.to_numpy(self.runtime.run(self.runtime.prepare(inputs)))

    def final_evaluation(self):
        outputs = np.concatenate([self.predict(self.inputs[i:i + CHECK_BATCH])
                                  for i in range(0, len(self.inputs), CHECK_BATCH)])
        difference, agree = agreement(outputs, self.reference, self.spec.classes)
        if difference > self.spec.tolerance or agree < self.spec.min_agreement:
            raise OutputsDiffer(
                f"{self.spec.model} in {self.spec.runtime}: its outputs on the {len(outputs)} test inputs differ from "
                f"PyTorch's by up to {difference:.3g} (tolerance {self.spec.tolerance:g}) and its predicted classes "
                f"agree on {agree:.2%} of them (at least {self.spec.min_agreement:.2%} asked)")
        return {"max_abs_difference": difference, "class_agreement": agree, "test_inputs": len(outputs)}


WORKLOAD = OnnxInference
