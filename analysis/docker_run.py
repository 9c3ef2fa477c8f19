"""``docker_args`` read as ``docker run`` reads its options: the one tokeniser of the project.

docker/cli parses ``docker run``'s flags with spf13/pflag (cli/command/container/opts.go): long options take
their value attached (``--env=X=1``) or as the next word (``--env X=1``); one-letter switches combine (``-it``)
and the last letter of a group may take its value attached (``-itv/:/host``, ``-e=X=1``, ``-eX=1``) or as the
next word (``-ite X=1``). The hardening rule (doors from the container to the node) and the InfiniBand reader
(``-e``/``--env`` settings, :mod:`analysis.interconnect`) both read the words through :func:`options`.
"""

from __future__ import annotations

from collections.abc import Sequence

SHORT_WITH_VALUE = frozenset("acehlmpuvw")
"""``docker run``'s one-letter options that take a value (-a/--attach, -c/--cpu-shares, -e/--env, -h/--hostname,
-l/--label, -m/--memory, -p/--publish, -u/--user, -v/--volume, -w/--workdir); the others (-d, -i, -t, -P,
-q) are switches."""
SHORT_NAMES = {"v": "--volume", "e": "--env"}
"""One-letter options reported under their long names (the ones the project's readers look at)."""


def options(words: Sequence[str]) -> list[tuple[str, str | None]]:
    """docker run options as (flag, value) from ``docker_args`` split into words: ``--flag=value``, ``--flag
    value``, ``-v value``, ``-v=value``, ``-vvalue`` and combined switches (``-itv value``) alike, one-letter
    options in :data:`SHORT_NAMES` under their long names (``-e`` -> ``--env``). A flag's value is None when
    it has none (a switch, or nothing follows)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        token = words[i]
        following = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("-") else None
        if token.startswith("--"):
            flag, eq, attached = token.partition("=")
            if eq:
                out.append((flag, attached))
            else:
                out.append((flag, following))
                i += 1 if following is not None else 0
        elif token.startswith("-") and len(token) > 1:
            letters = token[1:]
            for j, letter in enumerate(letters):
                if letter in SHORT_WITH_VALUE:
                    rest = letters[j + 1:].removeprefix("=")
                    if not rest and following is not None:
                        i += 1
                    out.append((SHORT_NAMES.get(letter, f"-{letter}"), rest or following))
                    break
                out.append((f"-{letter}", None))
        i += 1
    return out
