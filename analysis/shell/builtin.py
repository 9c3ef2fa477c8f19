"""Builtins as bash runs them, one handler per name (:data:`_BUILTINS`): what each does to the shell's state.

``echo``/``printf`` give their output, ``cd`` moves the working directory, ``read`` makes its names unknown,
``eval``/``source`` run a text in this shell, ``set -a``, ``shift``, ``exit``... A builtin without a handler
succeeds with an unknown output.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass

from analysis.shell.api import MAX_VALUE, Binding, Where, Word, join_path
from analysis.shell.conditions import test_operands
from analysis.shell.declarations import DECLARATIONS, Declarations
from analysis.shell.integers import bash_integer
from analysis.shell.patterns import ansi_c
from analysis.shell.state import OK, Result, is_name
from kernel import regex as linear

BUILTINS = frozenset({
    ":", "true", "false", "test", "[", "echo", "printf", "export", "declare", "typeset", "local", "readonly", "unset",
    "cd", "pushd", "popd", "read", "mapfile", "readarray", "getopts", "eval", "source", ".", "set", "shopt",
    "alias", "unalias", "trap", "let", "exit", "return", "break", "continue", "exec", "shift", "wait", "umask",
    "ulimit", "hash", "type", "command", "builtin", "dirs", "enable", "help", "history", "jobs", "kill", "pwd",
    "times", "caller", "complete", "disown", "fc", "fg", "bg", "logout", "suspend",
})


@dataclass(frozen=True)
class _Call:
    """One builtin being run: its name, its words after the name, what it runs with."""

    name: str
    argv: list[Word]
    args: list[Word]
    values: list[str | None]
    env_over: dict[str, Binding]
    where: Where
    raw: str
    stdin: str | None


class Builtins(Declarations):
    """Builtins: the layer above :class:`~analysis.shell.declarations.Declarations`."""

    @abc.abstractmethod
    def run_text(self, text: str, *, first_line: int, within: tuple[str, ...]) -> Result:
        """Parse and run a text in this shell (:mod:`analysis.shell.interpreter`)."""

    def builtin(self, name: str, argv: list[Word], env_over: dict[str, Binding], where: Where, raw: str,
                stdin: str | None) -> Result:
        args = argv[1:]
        run = _BUILTINS.get(name)
        if run is None:
            return Result("likely", None)
        return run(self, _Call(name, argv, args, [w.value for w in args], env_over, where, raw, stdin))

    def _test(self, call: _Call) -> Result:
        values = call.values
        operands = values[:-1] if call.name == "[" and values and values[-1] == "]" else values
        return Result(test_operands(operands), "")

    def _declare(self, call: _Call) -> Result:
        self.declaration(call.name, [(w, None) for w in call.args], call.where, call.raw)
        return Result("true", "")

    def _unset(self, call: _Call) -> Result:
        self.unset_words(call.args, call.where, call.raw)
        return Result("true", "")

    def _cd(self, call: _Call) -> Result:
        dirs = [w for w in call.args if w.value is None or not w.value.startswith("-") or w.value == "-"]
        target = dirs[0].value if dirs else None
        if not dirs or target == "-" or target is None:
            self.frame.cwd = None
        else:
            self.frame.cwd = join_path(self.frame.cwd, target)
        return Result("likely", "")

    def _popd(self, call: _Call) -> Result:
        self.frame.cwd = None
        return Result("likely", "")

    def _read(self, call: _Call) -> Result:
        names = _read_names(call.name, call.values)
        for n in names:
            self.assign(n, None, raw=call.raw, where=call.where, how="read", unknown=(call.name,))
        self.unknown("read", call.raw, call.where, tuple(names) if names else None)
        return Result("unknown", "")

    def _eval(self, call: _Call) -> Result:
        if any(v is None for v in call.values):
            self.unknown("eval", call.raw, call.where)
            return Result("likely", None)
        text = " ".join(v for v in call.values if v is not None)
        return self.nested_here(text, call.env_over, call.where, f"eval at {call.where}")

    def _source(self, call: _Call) -> Result:
        path = call.args[0].value if call.args else None
        sourced = self.file_text(path)
        if sourced is None:
            self.unknown("source", call.raw, call.where)
            return Result("likely", None)
        text = sourced
        return self.guarded(lambda: self.nested_here(text, call.env_over, call.where, f"{call.name} {path}",
                                                     first_line=1), call.raw, call.where, here=True)

    def _set(self, call: _Call) -> Result:
        self.set_options(call.values)
        return Result("true", "")

    def _shopt(self, call: _Call) -> Result:
        if "-s" in call.values and "expand_aliases" in call.values:
            self.unknown("alias", call.raw, call.where)
        return Result("true", "")

    def _alias(self, call: _Call) -> Result:
        if any(v and "=" in v for v in call.values):
            return Result("true", "")
        return Result("likely", None)

    def _trap(self, call: _Call) -> Result:
        values = call.values
        if values and values[0] not in ("-", "", "-p", "-l") and len(values) > 1:
            self.unknown("trap", call.raw, call.where)
        return Result("true", "")

    def _let(self, call: _Call) -> Result:
        for w in call.args:
            self.arith_text(w, call.where, call.raw)
        return Result("likely", "")

    def _flow(self, call: _Call) -> Result:
        self.flow(call.name)  # type: ignore[arg-type]
        return Result("unknown", "")

    def _exec(self, call: _Call) -> Result:
        return OK if len(call.argv) == 1 else Result("likely", None)  # alone: redirections only

    def _shift(self, call: _Call) -> Result:
        positional = self.frame.positional
        values = call.values
        if positional is not None:
            count = int(values[0]) if values and values[0] and values[0].isdigit() else 1
            self.frame.positional = positional[count:]
        return Result("true", "")

    def nested_here(self, text: str, env_over: dict[str, Binding], where: Where, label: str,
                    first_line: int | None = None) -> Result:
        """eval and source: run a text in the current shell (prefix assignments last for its duration)."""
        saved: dict[str, Binding | None] = {}
        for name, binding in env_over.items():
            saved[name] = self.frame.vars.get(name)
            self.frame.vars[name] = binding
        try:
            return self.scoped(lambda: self.run_text(text, first_line=first_line or where.line,
                                                     within=(*self.text.within, label)), "return")
        finally:
            for name, old in saved.items():
                if old is None:
                    self.frame.vars.pop(name, None)
                else:
                    self.frame.vars[name] = old
            self.version += 1

    def set_options(self, values: list[str | None]) -> None:
        i = 0
        while i < len(values):
            v = values[i]
            if v is None:
                i += 1
                continue
            if v == "--":
                self.frame.positional = tuple(values[i + 1:])
                return
            if v in ("-o", "+o") and i + 1 < len(values):
                if values[i + 1] == "allexport":
                    self.frame.allexport = v == "-o"
                i += 2
                continue
            if v[:1] in "-+" and "a" in v[1:]:
                self.frame.allexport = v[0] == "-"
            i += 1

    def printf(self, args: list[Word], where: Where, raw: str) -> Result:
        target: str | None = None
        rest = list(args)
        while rest and rest[0].value is not None and rest[0].value.startswith("-") and rest[0].value != "-":
            flag = rest.pop(0).value
            if flag == "--":
                break
            if flag == "-v" and rest:
                name_word = rest.pop(0)
                if name_word.value is None or not is_name(name_word.value.split("[")[0]):
                    self.unknown("dynamic name", raw, where)
                    return Result("likely", None)
                target = name_word.value
            elif flag is not None and flag.startswith("-v") and len(flag) > 2:
                target = flag[2:]
        if not rest:
            return Result("false", "")
        fmt = rest[0].value
        values = [w.value for w in rest[1:]]
        out = None if fmt is None or any(v is None for v in values) else _printf(fmt, [v or "" for v in values])
        if target is not None:
            unknown = tuple(u for w in rest for u in w.unknown) or ((raw,) if out is None else ())
            self.assign(target.split("[")[0], out, raw=raw, where=where, how="printf", unknown=unknown)
            return Result("true", "")
        return Result("true", out)


_BUILTINS: dict[str, Callable[[Builtins, _Call], Result]] = {
    ":": lambda shell, call: Result("true", ""),
    "true": lambda shell, call: Result("true", ""),
    "false": lambda shell, call: Result("false", ""),
    "test": Builtins._test,
    "[": Builtins._test,
    "echo": lambda shell, call: Result("true", _echo(call.values)),
    "printf": lambda shell, call: shell.printf(call.args, call.where, call.raw),
    **dict.fromkeys(DECLARATIONS, Builtins._declare),
    "unset": Builtins._unset,
    "cd": Builtins._cd,
    "pushd": Builtins._cd,
    "popd": Builtins._popd,
    **dict.fromkeys(("read", "mapfile", "readarray", "getopts"), Builtins._read),
    "eval": Builtins._eval,
    "source": Builtins._source,
    ".": Builtins._source,
    "set": Builtins._set,
    "shopt": Builtins._shopt,
    "alias": Builtins._alias,
    "trap": Builtins._trap,
    "let": Builtins._let,
    **dict.fromkeys(("exit", "return", "break", "continue"), Builtins._flow),
    "exec": Builtins._exec,
    "shift": Builtins._shift,
}
"""What each builtin does; one of :data:`BUILTINS` without a handler succeeds, its output unknown."""


def _read_names(builtin: str, values: list[str | None]) -> list[str]:
    names: list[str] = []
    with_value = {"read": {"-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u"},
                  "mapfile": {"-d", "-n", "-O", "-s", "-u", "-C", "-c"},
                  "readarray": {"-d", "-n", "-O", "-s", "-u", "-C", "-c"},
                  "getopts": set()}[builtin]
    i = 0
    positional: list[str] = []
    while i < len(values):
        v = values[i]
        if v is None:
            i += 1
            continue
        if builtin == "read" and v == "-a" and i + 1 < len(values):
            if values[i + 1]:
                names.append(values[i + 1] or "")
            i += 2
            continue
        if v.startswith("-") and v in with_value:
            i += 2
            continue
        if v.startswith("-") and len(v) > 1:
            i += 1
            continue
        positional.append(v)
        i += 1
    if builtin == "getopts":
        positional = positional[1:2]
    elif builtin in ("mapfile", "readarray"):
        positional = positional[:1] or ["MAPFILE"]
    elif not positional and not names:
        positional = ["REPLY"]
    return [n for n in names + positional if is_name(n)]


def _echo(values: list[str | None]) -> str | None:
    if any(v is None for v in values):
        return None
    args = [v or "" for v in values]
    newline = True
    escapes = False
    while args and len(args[0]) > 1 and args[0][0] == "-" and all(c in "neE" for c in args[0][1:]):
        flags = args.pop(0)[1:]
        newline = newline and "n" not in flags
        for c in flags:
            escapes = True if c == "e" else False if c == "E" else escapes
    text = " ".join(args)
    if escapes:
        cut = text.find("\\c")
        if cut >= 0:
            text, newline = text[:cut], False
        text = ansi_c(text.replace("\\0", "\\"))
    return text + ("\n" if newline else "")


_PRINTF = linear.compile(rf"(?s)%([-+ #0]*)([{linear.DIGIT}]{{0,4}})(?:\.([{linear.DIGIT}]{{0,4}}))?([sbdiuxXoc%q])|%"
                         r"|\\(?:[0-7]{1,3}|x[0-9a-fA-F]{1,2}|.)")
_PRINTF_NUMBER = linear.compile(rf"[{linear.SPACE}]*[+-]?[{linear.WORD}]+[{linear.SPACE}]*")


def _printf(fmt: str, args: list[str]) -> str | None:
    """printf with ``%s %b %d %i %u %x %o %c %q %%``, flags and widths; the format repeats for extra args."""
    out: list[str] = []
    index = 0
    for _ in range(64):
        used = False
        failed = False

        def sub(m: linear.Match) -> str:
            nonlocal index, used, failed
            token = m.group(0)
            if token.startswith("\\"):
                return ansi_c(token) if token != "\\c" else ""
            if m.group(4) is None:
                failed = True
                return ""
            flags, width, precision, conv = m.group(1), m.group(2), m.group(3), m.group(4)
            if conv == "%":
                return "%"
            arg = args[index] if index < len(args) else ""
            if index < len(args):
                used = True
            index += 1
            if conv in "sbq":
                text = ansi_c(arg) if conv == "b" else arg
                if precision:
                    text = text[: int(precision)]
            elif conv == "c":
                text = arg[:1]
            else:
                number = bash_integer(arg or "0") if _PRINTF_NUMBER.fullmatch(arg or "0") else None
                if number is None:
                    failed = True
                    return ""
                n = int(number)
                text = {"d": str(n), "i": str(n), "u": str(n % (1 << 64)), "x": format(n % (1 << 64), "x"),
                        "X": format(n % (1 << 64), "X"), "o": format(n % (1 << 64), "o")}[conv]
            pad = int(width) if width else 0
            if len(text) < pad:
                text = text.ljust(pad) if "-" in flags else text.rjust(pad, "0" if "0" in flags and conv not in "sbq"
                                                                             else " ")
            return text

        out.append(_PRINTF.sub(sub, fmt))
        if failed:
            return None
        if not used or index >= len(args):
            break
    text = "".join(out)
    return text if len(text) <= MAX_VALUE else None
