"""Records and what is made of them: a run's metrics from its ranks' logs, the record file and
its schema, sample accounting, and the report (rows, headline, per-node rows, Markdown, CSV,
HTML, plots). It may import parbench.run (rank logs, modes, the registry's order), the contract
and parbench.base, never the harness or the CLI, so a report needs no launcher."""
