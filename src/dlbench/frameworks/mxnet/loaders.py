"""MXNet's loaders: Gluon DataLoaders, their worker pools stopped by the adapter's teardown."""
import signal


def data_loader(placement, dataset, **options):
    """A Gluon DataLoader (its worker pool, if any, starts now), closed by `teardown`.

    Its workers are forked with SIGTERM's default action: the training process's SIGTERM
    handler ends the whole run (dlbench.protocol), and a forked worker would inherit it and
    run it when its pool terminates it (at teardown, or on a loading error).
    """
    from mxnet import gluon

    handler = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        loader = gluon.data.DataLoader(dataset, **options)
    finally:
        signal.signal(signal.SIGTERM, handler)
    placement.handles["loaders"].append(loader)
    return loader
