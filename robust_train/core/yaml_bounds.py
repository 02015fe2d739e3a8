"""YAML alias bombs are refused before any alias is expanded.

A YAML document may name a node once (`&a`) and repeat it by alias (`*a`); nine levels of ten
aliases ("billion laughs") are a few hundred bytes that expand to 10**9 nodes, and whatever walks
the expanded value (a config parser, a deep copy, a dump) runs out of memory. `check_yaml_aliases`
composes the document into its node graph, where an alias is a reference to the node it names
(no expansion), and counts the nodes the expanded document would hold, stopping at the bound: a
document that would expand beyond `MAX_EXPANDED_NODES` nodes, or whose aliases form a cycle, is
refused (`YamlAliasBombError`: one line naming the file, exit code 2 from the command line).
Configs without aliases cost one extra parse.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_EXPANDED_NODES", "YamlAliasBombError", "check_yaml_aliases", "expanded_nodes"]

# Far above any config (a LightningCLI config holds a few hundred nodes), far below a bomb.
MAX_EXPANDED_NODES = 100_000


class YamlAliasBombError(ValueError):
    """A YAML document whose aliases expand beyond the bound (or loop): a user error."""

    user_error = True


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_nodes(roots: list[Any], limit: int = MAX_EXPANDED_NODES) -> int:
    """The number of nodes the composed YAML `roots` hold once every alias is expanded, counted
    on the shared graph without expanding it (each count capped at `limit + 1`).

    Raises:
        YamlAliasBombError: the aliases form a cycle (a node that contains itself).

    Examples:
        >>> import yaml
        >>> expanded_nodes([yaml.compose("a: &x [1, 2]\\nb: [*x, *x]")])
        13
    """
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    total = 0
    for root in roots:
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            key = id(node)
            if done:
                size = 1 + sum(sizes[id(child)] for child in _children(node))
                sizes[key] = min(size, limit + 1)
                visiting.discard(key)
                continue
            if key in sizes:
                continue
            if key in visiting:
                raise YamlAliasBombError("its aliases form a cycle (a node that holds itself)")
            visiting.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
        total = min(total + sizes[id(root)], limit + 1)
    return total


def check_yaml_aliases(text: str, what: str, limit: int = MAX_EXPANDED_NODES) -> None:
    """Refuse YAML `text` whose aliases would expand it beyond `limit` nodes, before expanding.

    Text that does not parse is left to the loader that follows (its own error says why).

    Args:
        text: the YAML document(s).
        what: how the error names its source (e.g. "`--config` 'bomb.yaml'").
        limit: the most nodes the expanded documents may hold.

    Raises:
        YamlAliasBombError: one line naming `what`, the bound and the number of aliases.

    Examples:
        >>> check_yaml_aliases("a: &x [1, 2]\\nb: [*x, *x]", "a test")
        >>> bomb = "a: &a [x, x]\\n" + "".join(
        ...     f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\\n"
        ...     for p, c in zip("abcdefgh", "bcdefghi"))
        >>> check_yaml_aliases(bomb, "`--config` 'lol.yaml'")
        Traceback (most recent call last):
        ...
        robust_train.core.yaml_bounds.YamlAliasBombError: `--config` 'lol.yaml': its YAML ...
    """
    if "*" not in text:
        return  # no alias: nothing can expand
    import yaml

    loader = yaml.SafeLoader(text)
    roots = []
    try:
        while loader.check_node():
            roots.append(loader.get_node())
    except (yaml.YAMLError, RecursionError):
        return
    finally:
        loader.dispose()
    try:
        n = expanded_nodes(roots, limit)
    except YamlAliasBombError as err:
        raise YamlAliasBombError(f"{what}: {err}; refused before expanding it") from None
    if n > limit:
        aliases = text.count("*")
        raise YamlAliasBombError(
            f"{what}: its YAML aliases (`*name`, about {aliases}) would expand it to more than "
            f"{limit} nodes; refused before expanding them (write the values out instead)"
        )
