"""Registry of ``python -m pipeline`` commands (kept apart from ``__main__``).

A command module defines its absl flags at import time and registers a
function ``fn(argv) -> exit code`` with ``@command("name")``.
"""

COMMANDS = {}


def command(name):
    def deco(fn):
        COMMANDS[name] = fn
        return fn
    return deco
