"""The harness: the option table and what a user asked for (``options``), resolved into a plan
(``config``), the inputs prepared, each repeat launched as its own process tree under the
backend's launcher and supervised (timeout, progress, every process ended, network
isolation), several nodes checked in and watched, and the record built in one place from
what the workers wrote (``record``). It may import every layer below it (results, run,
contract, base), never the CLI."""
