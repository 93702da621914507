"""The `outlive` command line (`outlive = "outlive.cli:main"`, `python -m outlive`).

`app` is the typer app and `main` runs it. The commands live in their own modules (`serve`,
`worker`, `admin`, `sessions`); the options they share and the one path from options to a
worker's settings in `options` and `settings`; `embedded` and `tour` are `outlive demo`.
"""

from .app import app, main

__all__ = ["app", "main"]
