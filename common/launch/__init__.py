"""The harness: what a user asked for resolved into a plan, the inputs prepared, each repeat
launched as its own process tree under the backend's launcher and supervised (timeout,
progress, every process ended, network isolation), several nodes checked in and watched, and
the record built from what the workers wrote. It may import every layer below it (results,
run, contract, base), never the CLI."""
