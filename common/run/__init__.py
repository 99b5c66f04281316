"""Inside a training process: the job file a worker reads, the worker's entry point, the
registry that names each backend's strategy module and launcher, the training loop every
strategy runs in, the feeds, the run modes, profiling, and a worker's own exit. This is the API
the framework folders program against (with the contract); it imports the contract, the
registry's launcher lines and parbench.base, never the harness, the results or the CLI."""
