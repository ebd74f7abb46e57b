"""A run's result file: what its first process reports, block by block (the harness reads it
into the record)."""

from dlbench.record import write_json


class ResultFile:
    """What the first process reports, flushed after every block so that a crash keeps the
    blocks that finished."""

    def __init__(self, path):
        self.path = path
        self.data = {"status": "running", "segments": [], "units": []}

    def update(self, **values):
        self.data.update(values)
        write_json(self.path, self.data)

    def block(self, kind, **values):
        """A convergence segment or a throughput unit."""
        self.data["segments" if kind == "segment" else "units"].append({"kind": kind, **values})
        write_json(self.path, self.data)
        print(f"{kind} {values['index']}: {values['steps']} steps, {values['wall_s']:.3f} s, loss {values['loss']}"
              + (f", {values['metric']}" if kind == "segment" else ""), flush=True)
