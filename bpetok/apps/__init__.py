"""The applications built on the engine: the ``bpetok`` command line (cli.py), the HTTP server
(server*.py, with the playground page), chat templates (chat*.py), dataset encoding (datasets*.py,
_outdir.py, with Dask in _dask.py).

Each registers its subcommand through the same ``bpetok_register_commands`` hook a third-party
plugin uses; loading a tokenizer imports none of them.
"""
