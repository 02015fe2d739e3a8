"""One-line parse errors with "did you mean" for the LightningCLI commands (fit, validate, ...).

jsonargparse reports a bad value deep inside a config as a tree of several lines (`Parser key
"model.penalties":` / `Does not validate against any of the Union subtypes` / `Problem with
given class_path '...'` / the actual error), and a misspelt key without any suggestion. Here the
tree is reduced to its deepest error, prefixed with the full key it belongs to and the class that
refused it, and a misspelt key gets the closest known one:

    model.penalties.init_args.weight (robust_train.regularizers.ExplanationSmoothness): Expected a
    float. Got value: heavy
    Subcommand 'fit' does not accept option 'trainer.max_epocs' (did you mean 'trainer.max_epochs'?)
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["close_key", "describe_parse_error", "init_arguments"]

_KEY = re.compile(r'^Parser key "([^"]+)"')
_CLASS = re.compile(r"^Problem with given class_path '([^']+)':$")
_NOT_ACCEPTED = re.compile(r"^Option '([^']+)' is not accepted$")
_SUBCOMMAND = re.compile(r"^Subcommand '([^']+)' does not accept option '([^']+)'$")
_NO_ATTRIBUTE = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")
_REWRITTEN = re.compile(r"^([\w.]+)(?: \(([\w.]+)\))?: (.+)$")  # what a nested parser said
_NOISE = (
    "Does not validate against any",
    "Subtypes:",
    "Errors:",
    "Given value",
    "Expected a <class 'NoneType'>",
    "Not a valid subclass of",
    "Subclass types expect one of",
    "a class path (str)",
    "a dict with",
    "a dict without",
    "Expected a path but",
)


def close_key(key: str, known: Iterable[str], cutoff: float = 0.7) -> str | None:
    """The known dotted key closest to `key`, found segment by segment (None if none is close).

    The first segment that no known key has at that place is replaced by the closest one there,
    and the rest is kept, so nested options (`model.optimizr.init_args.lr`) are corrected too.

    Examples:
        >>> known = ["trainer.max_epochs", "trainer.max_steps", "model.optimizer"]
        >>> close_key("trainer.max_epocs", known), close_key("model.optimizr.init_args.lr", known)
        ('trainer.max_epochs', 'model.optimizer.init_args.lr')
        >>> close_key("data.zzz", known) is None
        True
    """
    keys = [k for k in known if k]
    prefixes = {".".join(k.split(".")[: i + 1]) for k in keys for i in range(k.count(".") + 1)}
    parts = key.split(".")
    for i, part in enumerate(parts):
        if ".".join(parts[: i + 1]) in prefixes:
            continue
        head = ".".join(parts[:i])
        children = {
            k.split(".")[i]
            for k in keys
            if i == 0 or (k.startswith(head + ".") and k.count(".") >= i)
        }
        close = difflib.get_close_matches(part, sorted(children), n=1, cutoff=cutoff)
        return ".".join([*parts[:i], close[0], *parts[i + 1 :]]) if close else None
    return None


def init_arguments(class_path: str) -> list[str]:
    """Keyword arguments a class takes (following `**kwargs` up its bases); [] if unknown.

    Examples:
        >>> "batch_size" in init_arguments("robust_train.data.DigitsDataModule")
        True
    """
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 - only a suggestion
        return []
    found: list[str] = []
    for base in getattr(cls, "__mro__", (cls,)):
        init = base.__dict__.get("__init__") if isinstance(base, type) else None
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            break
        found += [
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return list(dict.fromkeys(found))


def _leaves(text: str) -> list[tuple[list[tuple[str, str]], str]]:
    """(contexts, error line) for every error line of a jsonargparse message tree; a context is
    ("key", name), ("class", class_path) or, from a line a nested parser already rewrote,
    ("path", dotted path) and ("shown", class_path); outermost first."""
    stack: list[tuple[int, tuple[str, str]]] = []
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        indent = len(raw) - len(raw.lstrip())
        if line.startswith("- "):
            line, indent = line[2:].strip(), indent + 2
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if key := _KEY.match(line):
            stack.append((indent, ("key", key.group(1))))
        elif cls := _CLASS.match(line):
            stack.append((indent, ("class", cls.group(1))))
        elif any(line.startswith(n) for n in _NOISE):
            continue
        elif nested := _REWRITTEN.match(line):
            extra = [("path", nested.group(1))] + [("shown", nested.group(2))] * bool(nested[2])
            found.append(([c for _, c in stack] + extra, nested.group(3)))
        else:
            found.append(([c for _, c in stack], line))
    return found


def _chain(ex: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while ex is not None and all(ex is not s for s in seen):
        seen.append(ex)
        ex = ex.__cause__
    return seen


def _suggest_for_leaf(contexts: list[tuple[str, str]], leaf: str) -> tuple[str, str]:
    """(last key segment to add to the path, suggestion suffix) for one error line."""
    classes = [value for kind, value in contexts if kind in ("class", "shown")]
    if (option := _NOT_ACCEPTED.match(leaf)) and classes:
        close = difflib.get_close_matches(option.group(1), init_arguments(classes[-1]), n=1)
        return option.group(1), f" (did you mean {close[0]!r}?)" if close else ""
    if missing := _NO_ATTRIBUTE.search(leaf):
        try:
            names = dir(importlib.import_module(missing.group(1)))
        except Exception:  # noqa: BLE001 - only a suggestion
            names = []
        close = difflib.get_close_matches(missing.group(2), names, n=1)
        return "", f" (did you mean {missing.group(1)}.{close[0]}?)" if close else ""
    return "", ""


def _tree_message(message: str, ex: BaseException | None) -> str | None:
    texts = [message, *(str(e) for e in _chain(ex))]
    candidates = [leaf for text in texts for leaf in _leaves(text)]
    if not candidates:
        return None
    outer = next((c[:1] for c, _ in candidates if c and c[0][0] == "key"), [])
    candidates = [
        (c if c[:1] and c[0][0] == "key" else [*outer, *c], leaf) for c, leaf in candidates
    ]
    # the first of the deepest, preferring one that shows the value given
    contexts, leaf = max(candidates, key=lambda c: (len(c[0]), "Got value" in c[1]))
    option, suffix = _suggest_for_leaf(contexts, leaf)
    path: list[str] = []
    for kind, value in contexts:
        if kind == "path" and path[-1:] == ["init_args"]:
            value = value.removeprefix("init_args.")
        path += {"key": [value], "class": ["init_args"], "path": [value]}.get(kind, [])
    if path[-1:] == ["init_args"] and not option:
        path.pop()
    path += [option] if option else []
    classes = [v for kind, v in contexts if kind in ("class", "shown")]
    where = ".".join(path) + (f" ({classes[-1]})" if classes else "")
    leaf = re.sub(r"<class '([\w.]+)'>", r"\1", leaf)
    return f"{where}: {leaf}{suffix}" if where else f"{leaf}{suffix}"


def _option_keys(parser: Any) -> list[str]:
    keys = [a.dest for a in getattr(parser, "_actions", [])]
    keys += [o[2:] for o in getattr(parser, "_option_string_actions", {}) if o.startswith("--")]
    return list(dict.fromkeys(k for k in keys if k and k != "help"))


def describe_parse_error(message: str, ex: BaseException | None, parser: Any) -> str:
    """The one-line form of a jsonargparse parse error, with a suggestion where one is close.

    Examples:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> _ = parser.add_argument("--trainer.max_epochs")
        >>> describe_parse_error("unrecognized arguments: --trainer.max_epoch 1", None, parser)
        'unrecognized arguments: --trainer.max_epoch 1 (did you mean --trainer.max_epochs?)'
    """
    if "did you mean" in message or ("\n" not in message and _REWRITTEN.match(message)):
        return message  # already rewritten (jsonargparse calls `error` again as it unwinds)
    if message.startswith("unrecognized arguments:"):
        known = _option_keys(parser)
        for token in message.split(":", 1)[1].split():
            close = close_key(token.split("=")[0][2:], known) if token.startswith("--") else None
            if close:
                return f"{message} (did you mean --{close}?)"
        return message
    if sub := _SUBCOMMAND.match(message.strip()):
        subparser = getattr(ex, "subcommand_parser", None) or parser
        close = close_key(sub.group(2), _option_keys(subparser))
        return f"{message} (did you mean {close!r}?)" if close else message
    if "\n" in message.strip() or any(_KEY.match(str(e)) for e in _chain(ex)):
        return _tree_message(message, ex) or message
    return message
