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


def result_from_worker(client):
    """How bpetok waits for a task's result: fetched from the worker that holds it.

    ``future.result()`` asks the scheduler to fetch it and pass it on, and the scheduler's
    connections pickle with protocol 4: the ids travel in-band, copied into a pickle on the worker
    and again on the scheduler (measured: most of a 2-worker LocalCluster's overhead over local
    threads). A client made with ``direct_to_workers=False`` (workers it cannot reach) keeps the
    scheduler's way; keys a direct fetch misses are fetched through the scheduler all the same.
    """
    direct = True if client.direct_to_workers is None else client.direct_to_workers
    return lambda future: client.gather(future, direct=direct)
