"""What every layer of parbench may use, and which imports nothing of parbench: the usage error
(one line, exit 2), the ``Option`` and ``Bounds`` every layer declares its run options with
(``options``), files written atomically and temporary folders cleaned up after a killed
process, free ports on loopback, and the machine's CPU cores and GPUs found without a
framework."""
