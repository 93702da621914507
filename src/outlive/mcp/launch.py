"""Starting a stdio MCP server so that it cannot outlive its worker.

A graceful stop closes the server's stdin, then terminates it (the SDK does that). A worker
killed with `kill -9` gets no chance to: on Linux the server is therefore started through a
launcher, a few lines of Python that ask the kernel to kill it when its parent dies
(`PR_SET_PDEATHSIG`) and then become the server with `exec`, keeping its pid, pipes and
environment. Only the server process itself is covered, not processes it starts.
"""

from __future__ import annotations

import os
import sys

from mcp import StdioServerParameters

from .config import StdioServer

__all__ = ["launch_parameters"]

# Runs `argv[2:]` in place of itself once the kernel will kill it with its parent (Linux
# PR_SET_PDEATHSIG); exits at once if the parent is already gone.
_LAUNCHER = (
    "import ctypes,os,signal,sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(70)\n"
    "try:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as e:\n"
    "    sys.stderr.write(f'cannot run {sys.argv[2]!r}: {e.strerror}\\n')\n"
    "    sys.exit(127)\n"
)


def launch_parameters(server: StdioServer) -> StdioServerParameters:
    """How the SDK should start `server`: through the launcher where the kernel offers it."""
    command, args = server.command, list(server.args)
    if sys.platform.startswith("linux"):
        command, args = sys.executable, ["-c", _LAUNCHER, str(os.getpid()), command, *args]
    return StdioServerParameters(command=command, args=args, env=dict(server.env) or None,
                                 cwd=server.cwd)

