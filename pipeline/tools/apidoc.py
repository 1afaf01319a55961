"""Writes ``docs/api.md``, the API reference, from the docstrings.

    python -m pipeline.tools.apidoc            # rewrite docs/api.md
    python -m pipeline.tools.apidoc --check    # exit 1 when docs/api.md is out of date

The reference covers every name in ``pipeline.__all__`` (with the factories'
element table from ``pipeline.sources.factories``) and the public names of
``pipeline.compat``, ``pipeline.tools.sample`` and ``pipeline.tools.capacity``: each one's
signature and docstring, verbatim. A test compares the file with ``generate()``, so the
reference cannot drift from the code: change a docstring, then run this.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from typing import List

API_PATH = os.path.join("docs", "api.md")
HEADER = """# API reference

Generated from the docstrings by `python -m pipeline.tools.apidoc`; do not edit by hand
(`tests/test_cli.py` fails when this file and the docstrings differ). The README has the
tour; this file has every public name, its signature and its full docstring.
"""


def _signature(obj) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    # Object reprs carry memory addresses: keep them stable.
    return re.sub(r" at 0x[0-9a-f]+", "", sig)


def _entry(qualname: str, obj, level: str = "##") -> List[str]:
    kind = "class" if inspect.isclass(obj) else "function" if callable(obj) else "value"
    out = [f"{level} `{qualname}`", ""]
    if kind == "value":
        out += ["```python", f"{qualname} = {obj!r}", "```", ""]
        return out
    prefix = "class " if kind == "class" else ""
    out += ["```python", f"{prefix}{qualname}{_signature(obj)}", "```", ""]
    doc = inspect.getdoc(obj)
    if doc:
        out += ["```text", doc, "```", ""]
    if kind == "class":
        for name, member in inspect.getmembers(obj):
            if name.startswith("_") or not (inspect.isfunction(member) or
                                            inspect.ismethod(member)):
                continue
            if getattr(member, "__qualname__", "").split(".")[0] != obj.__name__:
                continue  # inherited from elsewhere (dataclass, Exception, ...)
            out += _entry(f"{qualname}.{name}", member, level + "#")
    return out


def _module_functions(module) -> List[str]:
    names = getattr(module, "__all__", None) or [
        n for n, v in vars(module).items()
        if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == module.__name__]
    return sorted(names)


def generate() -> str:
    """The text of ``docs/api.md``."""
    import pipeline
    from pipeline import compat
    from pipeline.tools import capacity
    from pipeline.tools import sample
    from pipeline.sources import factories as sources

    out = [HEADER, "## Contents", ""]
    sections = [("pipeline", pipeline, [n for n in pipeline.__all__
                                        if n not in ("compat", "__version__")]),
                ("pipeline.compat", compat, _module_functions(compat)),
                ("pipeline.tools.sample", sample, _module_functions(sample)),
                ("pipeline.tools.capacity", capacity, _module_functions(capacity))]
    for title, _, names in sections:
        out.append(f"- `{title}`: " + ", ".join(f"`{n}`" for n in names))
    out.append("")
    for title, module, names in sections:
        out += [f"# `{title}`", ""]
        doc = inspect.getdoc(module)
        if doc:
            out += ["```text", doc, "```", ""]
        if module is pipeline:  # the factories' element table (pipeline.sources.factories)
            table = inspect.getdoc(sources).split("Returned elements", 1)[1]
            out += ["## Returned elements (every factory)", "", "```text",
                    "Returned elements" + table, "```", ""]
        for n in names:
            out += _entry(f"{title}.{n}", getattr(module, n))
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.tools.apidoc", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    ap.add_argument("--out", default=None, help="file to write (default: docs/api.md of "
                                                "the repository)")
    a = ap.parse_args(argv)
    from pipeline.tools import sample
    path = a.out or os.path.join(sample.repository_dir(), API_PATH)
    text = generate()
    if a.check:
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if current != text:
            print(f"{path} is out of date: run python -m pipeline.tools.apidoc", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
