"""What bpetok installs on a Dask cluster, and the check of a ``--dask`` address (imported only
when Dask is used)."""

from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin

from bpetok.apps import dataset_tasks
from bpetok.errors import BpetokError

def check_scheduler_address(address: str) -> str:
    """``address`` when it has the form of a Dask scheduler's address, else a one-line
    :class:`BpetokError` naming it and the form expected.

    Checked before connecting: given a malformed address, ``Client`` raises a bare ``ValueError``
    from deep inside distributed (an unknown scheme, a port that is not a number). The schemes are
    those distributed has a transport for, but ``inproc://`` (a scheduler inside one process, out
    of this command's reach); ``HOST:PORT`` alone means ``tcp://``, as it does to ``Client``.
    """
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    schemes = sorted(set(backends) - {"inproc", "tcp"})
    expected = f"give the scheduler's address as tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786 (or {', '.join(s + '://' for s in schemes)})"
    scheme, location = parse_address(address, strict=False)
    if scheme not in backends or scheme == "inproc":
        raise BpetokError(f"--dask {address!r}: {scheme}:// is not a scheme this command can reach a scheduler by; {expected}")
    try:
        host, port = parse_host_port(location)
    except ValueError:
        host, port = "", None
    if not host or not isinstance(port, int) or not 0 < port < 1 << 16:
        raise BpetokError(f"--dask {address!r}: not HOST:PORT with a port number from 1 to 65535; {expected}")
    return address


class ModelOnWorkers(WorkerPlugin):
    """The GGUF's bytes on every worker, for :meth:`bpetok.apps.datasets.ModelSource.tokenizer`.

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
        dataset_tasks._WORKER_MODELS[self.sha256] = self.data

    def teardown(self, worker) -> None:
        dataset_tasks._WORKER_MODELS.pop(self.sha256, None)


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
