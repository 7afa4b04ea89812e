"""``--help`` as users type the commands: the target group named ``conf`` (as every example writes
it), and every top-level option of the config dump followed by what it does, taken from the
comments of the command's schema dataclass (``nas/config/``), so the explanation lives beside the
option's definition."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from typing import Any

__all__ = ["annotate_help", "option_help"]

TARGET_HELP = "the target: conf=<name> (listed above); conf.<key>=<value> changes one of its values"
_FIELD = re.compile(r"^(\w+)\s*:")


def option_help(schema: type) -> dict[str, str]:
    """Each field of the dataclass ``schema`` -> its explanation: the comment lines just above the
    field and its inline comment, joined; a nested dataclass field without one gets the first line
    of its class's docstring."""
    out: dict[str, str] = {}
    block: list[str] = []
    in_doc = False
    for line in inspect.getsource(schema).splitlines()[1:]:
        s = line.strip()
        if s.count('"""') == 1:
            in_doc = not in_doc
            continue
        if in_doc or s.startswith('"""') or line[:4] != "    " or line[4:5] == " ":
            block = [] if not s.startswith("#") else block
            continue
        if s.startswith("#"):
            block.append(s.lstrip("#").strip())
            continue
        m = _FIELD.match(s)
        if m:
            inline = s.split("  # ", 1)[1].strip() if "  # " in s else ""
            out[m.group(1)] = " ".join([*block, inline]).strip()
        block = []
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        kind = hints.get(f.name)
        if not out.get(f.name) and isinstance(kind, type) and dataclasses.is_dataclass(kind):
            out[f.name] = (inspect.getdoc(kind) or "").splitlines()[0]
    return out


def annotate_help(text: str, schema: Any) -> str:
    """Hydra's ``--help`` ``text`` with ``target`` shown as ``conf`` (in the groups and in the config
    dump) and, in the dump (after ``== Config ==``), each top-level option followed by ``# what it
    does`` from ``option_help(schema)`` (left as it is when ``schema`` is not a dataclass)."""
    helps = option_help(schema) if dataclasses.is_dataclass(schema) else {}
    helps["target"] = TARGET_HELP
    out, in_config = [], False
    for line in text.splitlines():
        in_config = in_config or line.startswith("== Config ==")
        if line.startswith("target:"):
            line = "conf:" + line[len("target:"):]
            key = "target"
        else:
            m = _FIELD.match(line)
            key = m.group(1) if m else None
        if in_config and key and helps.get(key):
            line = f"{line}  # {helps[key]}"
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")
