"""veriloco: the command line and the wiring of daemons and local networks."""

__version__ = "0.1.0"
