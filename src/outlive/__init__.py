"""outlive: durable agent sessions that outlive requests, tabs and workers."""

__version__ = "0.1.0"
