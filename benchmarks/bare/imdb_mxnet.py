"""IMDB in plain MXNet Gluon, as a tutorial writes the loop: the benchmark's LSTM, batch,
threads, optimizer and learning-rate schedule, EPOCHS epochs on one context, the training
sequences in memory as NDArrays.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order (numpy's permutation here), the DataLoader and its workers (batches are gathered here
in the training process), its calibrated units and evaluations, the loss read.

    python benchmarks/bare/imdb_mxnet.py SPEC_FILE EPOCHS
"""
import numpy as np

from dlbench import bare
from dlbench.workloads.imdb.mxnet import build_model


def main():
    spec, epochs, ctx = bare.start("mxnet")  # before MXNet's import, which reads the thread settings
    import mxnet as mx
    from mxnet import autograd, gluon

    sequences, labels = bare.training_arrays(spec, "train_sequences", "train_labels")
    sequences, labels = mx.nd.array(sequences, dtype="int64"), mx.nd.array(labels, dtype="float32")

    m = spec.model
    net = build_model(m.vocabulary, m.embedding, m.hidden, m.classes)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)  # the harness's default mode, hybrid
    opt, schedule = spec.optimizer, spec.schedule
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": opt.lr, "beta1": opt.beta1,
                                                           "beta2": opt.beta2, "epsilon": opt.eps})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    n_batches = sequences.shape[0] // spec.batch  # the last partial batch is dropped, as in the harness
    clock = bare.EpochClock(n_batches * spec.batch)

    for epoch in range(1, epochs + 1):
        # The rate times `factor` every `every_epochs` epochs.
        trainer.set_learning_rate(opt.lr * schedule.factor ** ((epoch - 1) // schedule.every_epochs))
        clock.start()
        order = mx.nd.array(np.random.permutation(sequences.shape[0]), dtype="int64")
        for i in range(n_batches):
            index = order[i * spec.batch:(i + 1) * spec.batch]
            x = mx.nd.take(sequences, index).as_in_context(ctx)
            y = mx.nd.take(labels, index).as_in_context(ctx)
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(spec.batch)
        mx.nd.waitall()  # the engine is asynchronous: the epoch ends when its work is done
        clock.stop(epoch)


if __name__ == "__main__":
    main()
