"""What bpetok installs on a Dask cluster (imported only when a ``client`` is given)."""

from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin

from bpetok import datasets


class ModelOnWorkers(WorkerPlugin):
    """The GGUF's bytes on every worker, for :meth:`bpetok.datasets.ModelSource.tokenizer`.

    A worker plugin rather than ``client.scatter``: Dask runs a plugin's ``setup`` again on every
    worker that joins later, a nanny's replacement for a killed worker included, whereas scattered
    data can be lost with the worker that held it and then cancels the tasks that need it
    (dask/distributed#3149).
    """

    def __init__(self, sha256: str, data: bytes):
        self.name = f"bpetok-model-{sha256[:16]}"
        self.sha256 = sha256
        self.data = data

    def setup(self, worker) -> None:
        datasets._WORKER_MODELS[self.sha256] = self.data

    def teardown(self, worker) -> None:
        datasets._WORKER_MODELS.pop(self.sha256, None)
