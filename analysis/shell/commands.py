"""Simple commands: their words, prefix assignments, wrappers (``env``, ``sudo``, ``exec``, ``nohup``...),
redirections and here-documents, the environment each receives, and what runs them (a builtin, a function, a
nested shell, an external program).
"""

from __future__ import annotations

import abc
import base64
import binascii
import posixpath
from dataclasses import replace
from typing import Literal

import tree_sitter

from analysis.shell.api import (
    Assignment,
    Binding,
    Command,
    Environ,
    FileWrite,
    Redirect,
    Variable,
    Where,
    Word,
    join_path,
)
from analysis.shell.builtin import BUILTINS, Builtins
from analysis.shell.patterns import unescape_heredoc
from analysis.shell.state import REDIRECTS, Function, Prefix, Result, cause_kind, is_name, short, single_value
from analysis.shell.words import as_assignment, one_word, split_fields

SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "ash"})
_TESTS = frozenset({"test", "[", "[[", "grep", "egrep", "fgrep", "which", "type", "hash", "cmp", "diff", "pgrep"})


class Commands(Builtins):
    """Simple commands: the layer above :class:`~analysis.shell.builtin.Builtins`."""

    @abc.abstractmethod
    def call(self, func: Function, argv: list[Word], env_over: dict[str, Binding], where: Where,
             stdin: str | None) -> Result:
        """Run a shell function (:mod:`analysis.shell.interpreter`)."""

    @abc.abstractmethod
    def child_shell(self, argv: list[Word], environ: Environ, where: Where, raw: str,
                    stdin: str | None) -> Result:
        """Run a nested shell (:mod:`analysis.shell.interpreter`)."""

    def simple(self, node: tree_sitter.Node, outer_redirects: tuple[tree_sitter.Node, ...],
               stdin: str | None) -> Result:
        where = self.where(node)
        raw = self.raw(node)
        redirect_nodes = list(outer_redirects)
        parts: list[tree_sitter.Node] = []
        children = node.children
        for i, child in enumerate(children):
            field_name = node.field_name_for_child(i)
            if child.type in REDIRECTS:
                redirect_nodes.extend(flatten_redirects(child))
            elif field_name in ("name", "argument"):
                if child.type == "$" and i + 1 < len(children) and children[i + 1].start_byte == child.end_byte:
                    continue  # $"..." (a translated string): the string alone
                parts.append(child)
            elif child.type == "variable_assignment":
                parts.append(child)
        words: list[Word] = []
        prefix: list[Prefix] = []
        for group in self.group(parts):
            if len(group) == 1 and group[0].type == "variable_assignment":
                if not words:
                    parsed = self.assignment_parts(group[0])
                    if parsed is not None:
                        prefix.append(parsed)
                    continue
            elif len(group) == 1:
                inner = group[0].named_children[0] if group[0].type == "command_name" and group[0].named_children \
                    else group[0]
                words.extend(self.words(inner))
                continue
            segs = self.joined(group)
            group_raw = self.src(group[0].start_byte, group[-1].end_byte)
            assignment = as_assignment(segs) if not words else None
            if assignment is not None:
                name, append, value_segs = assignment
                prefix.append(Prefix(name, one_word(value_segs, group_raw, self.line(group[0])), append,
                                      group_raw, False))
            else:
                words.extend(split_fields(segs, group_raw, self.line(group[0]), self.ifs_default()))
        redirects = tuple(self.redirect(r) for r in redirect_nodes)
        data = stdin_of(redirects, stdin)
        if not words:  # assignments only: they stay in the shell
            for p in prefix:
                self.assign(p.name, p.value.value, raw=p.raw, where=where, how="append" if p.append else "assign",
                            attributes="a" if p.array else "", append=p.append, unknown=p.value.unknown)
            return Result("true", self.route_output("", redirects, raw, where))
        # bash refuses `A[0]=1 cmd` ("not a valid identifier") and runs cmd
        result = self.run_words(words, [p for p in prefix if not p.subscript], redirects, data, where, raw)
        return Result(result.status, self.route_output(result.output, redirects, raw, where))

    def run_words(self, words: list[Word], prefix: list[Prefix], redirects: tuple[Redirect, ...],
                  stdin: str | None, where: Where, raw: str) -> Result:
        env_over: dict[str, Binding] = {}
        prefix_records: list[Assignment] = []
        for p in prefix:
            var, value = p.name, p.value
            full = value.value
            if p.append and full is not None:
                previous = single_value(self.binding(var) or ())
                full = None if previous is None else previous + full
            env_over[var] = (Variable(var, full, self.label, where, exported=True, maybe=self.maybe),)
            prefix_records.append(Assignment(var, full, short(p.raw), where, "prefix", True, self.maybe,
                                             value.unknown))
            if full is None:
                self.unknown(cause_kind(value.unknown), p.raw, where, (var,))
        argv, wrappers, cleared, unset_names, cwd, env_assign, program_unknown = self.unwrap(words, where)
        wrapper_over: dict[str, Binding] = {}
        for var, word in env_assign:
            wrapper_over[var] = (Variable(var, word.value, self.label, where, exported=True, maybe=self.maybe),)
            prefix_records.append(Assignment(var, word.value, short(f"{var}={word.shown or word.raw}"), where,
                                             "env", True, self.maybe, word.unknown))
        base_env = self.environ()
        if cleared:  # the shell's prefix assignments went to the wrapper, which cleared them
            env_over = {}
        bindings: dict[str, Binding] = {} if cleared else dict(base_env.items())
        bindings.update(env_over)
        for var in unset_names:
            bindings.pop(var, None)
            if not cleared:
                bindings[var] = (None,)
        bindings.update(wrapper_over)
        self.tick(1 + len(env_over) + len(wrapper_over))
        environ = base_env if (not cleared and not env_over and not unset_names and not wrapper_over) \
            else Environ(bindings, cleared=cleared)
        program = argv[0].value if argv else None
        name = posixpath.basename(program) if program else None
        in_shell = all(w in ("command", "builtin", "time", "exec") for w in wrappers)
        func = self.function(program) if program and in_shell and "command" not in wrappers \
            and "builtin" not in wrappers else None
        kind: Literal["builtin", "function", "external"] = (
            "function" if func is not None else "builtin" if in_shell and name in BUILTINS and name == program
            else "external")
        self.commands.append(Command(tuple(words), tuple(argv), tuple(wrappers), tuple(prefix_records), environ,
                                     self.frame.cwd if cwd is None else cwd, where, self.maybe, kind,
                                     redirects, short(raw, 400)))
        self.tick()
        if program_unknown or not argv:
            if program_unknown:
                self.unknown("dynamic command", raw, where)
            return Result("likely", None)
        assert program is not None and name is not None
        if func is not None:
            result = self.call(func, argv, env_over, where, stdin)
        elif kind == "builtin":
            result = self.builtin(name, argv, env_over, where, raw, stdin)
        elif name in SHELLS:
            result = self.child_shell(argv, environ, where, raw, stdin)
        elif self.scripts and "/" in program and (interpreter := self.script_shell(program)) is not None:
            result = self.child_shell([replace(argv[0], value=interpreter), *argv], environ, where, raw, stdin)
        else:
            result = self.external(name, argv, where, raw, stdin)
        if "exec" in wrappers:
            self.flow("exit")  # exec replaces the shell: nothing after it runs
        return result

    def script_shell(self, program: str) -> str | None:
        """The shell that runs the file ``program`` names when it is run as a program (``./launch.sh``), when
        :meth:`file_text` knows it: its ``#!`` line's shell (execve(2); ``#!/usr/bin/env bash`` too), or bash
        itself for a file without one (bash(1), COMMAND EXECUTION: "If this execution fails because the file
        is not in executable format ... it is assumed to be a shell script"); None for another interpreter."""
        text = self.file_text(program)
        if text is None:
            return None
        first = text.split("\n", 1)[0]
        if not first.startswith("#!"):
            return "bash"
        words = first[2:].split()
        if words and posixpath.basename(words[0]) == "env":
            words = [w for w in words[1:] if not w.startswith("-")]
        shell = posixpath.basename(words[0]) if words else ""
        return shell if shell in SHELLS else None

    def unwrap(self, words: list[Word], where: Where) -> tuple[
            list[Word], list[str], bool, list[str], str | None, list[tuple[str, Word]], bool]:
        """Take wrappers off: (argv, wrappers, cleared, unset names, cwd, env assignments, program unknown)."""
        argv = list(words)
        wrappers: list[str] = []
        cleared = False
        unset_names: list[str] = []
        cwd: str | None = None
        assigns: list[tuple[str, Word]] = []
        for _ in range(16):
            if not argv:
                break
            head = argv[0].value
            if head is None:
                return argv, wrappers, cleared, unset_names, cwd, assigns, True
            name = posixpath.basename(head)
            if name == "env":
                rest, env_cleared, unsets, chdir, env_assigns, split = _env_options(argv[1:])
                if split:
                    self.unknown("dynamic command", " ".join(str(w) for w in argv), where)
                if env_cleared:  # what the shell and earlier wrappers passed is gone
                    cleared = True
                    assigns.clear()
                    unset_names.clear()
                unset_names += unsets
                if chdir is not None:
                    cwd = join_path(self.frame.cwd if cwd is None else cwd, chdir.value)
                assigns += env_assigns
                if not rest:
                    argv = argv[:1]
                    wrappers.append(name)
                    break
                argv = rest
            elif name == "sudo":
                rest, keep, sudo_assigns = _sudo_options(argv[1:])
                if not keep:  # sudo's default env_reset
                    cleared = True
                    assigns.clear()
                    unset_names.clear()
                assigns += sudo_assigns
                if not rest:
                    break
                argv = rest
            elif name == "busybox" and len(argv) > 1:
                argv = argv[1:]  # busybox(1): `busybox APPLET [ARGS]` runs the applet (sh, env, xargs...)
            elif name == "su":
                shell_argv, login, preserve, home = _su_options(argv[0], argv[1:])
                if shell_argv is None:
                    return argv, wrappers, cleared, unset_names, cwd, assigns, True
                if login:  # su -l: the environment cleared but TERM, the target's home the directory
                    cleared = True
                    assigns.clear()
                    unset_names.clear()
                    cwd = home.value
                if not preserve:
                    assigns.append(("HOME", home))
                argv = shell_argv
                wrappers.append(name)
                break  # the shell it starts is run as one (child_shell)
            elif name == "exec" and not wrappers and head == "exec":
                rest, clear = _exec_options(argv[1:])
                if clear:
                    cleared = True
                    assigns.clear()
                if not rest:
                    break
                argv = rest
            elif name in _WRAPPERS and (name == head or name not in BUILTINS):
                rest = _skip_options(argv[1:], *_WRAPPERS[name])
                if name in ("command", "builtin") and any(w.value in ("-v", "-V") for w in argv[1:2]):
                    break  # command -v: looks the name up, runs nothing
                if not rest:
                    break
                argv = rest
            else:
                break
            wrappers.append(name)
        return argv, wrappers, cleared, unset_names, cwd, assigns, False

    def external(self, name: str, argv: list[Word], where: Where, raw: str, stdin: str | None) -> Result:
        values = [w.value for w in argv[1:]]
        if name == "base64" and any(v in ("-d", "--decode", "-D") for v in values):
            return Result("likely", _b64decode(stdin))
        if name == "cat" and all(v == "-" for v in values):
            return Result("likely", stdin)
        if name == "tee":
            append = any(v in ("-a", "--append") for v in values)
            for w in argv[1:]:
                if w.value is None or not w.value.startswith("-"):
                    self.write(w, stdin, append=append, where=where, raw=raw)
            return Result("likely", stdin)
        if name in ("cp", "mv", "install", "ln") and len(argv) >= 3:
            operands = [w for w in argv[1:] if w.value is None or not w.value.startswith("-")]
            if len(operands) >= 2:
                target = operands[-1]
                for source in operands[:-1]:
                    self.writes.append(FileWrite(target, None, False, where, self.maybe, source, short(raw),
                                                 len(self.commands), self.frame.cwd))
        if name in _TESTS:
            return Result("unknown", None)
        return Result("likely", None)

    def write(self, path: Word, content: str | None, *, append: bool, where: Where, raw: str) -> None:
        self.writes.append(FileWrite(path, content, append, where, self.maybe, None, short(raw), len(self.commands),
                                     self.frame.cwd))

    def route_output(self, output: str | None, redirects: tuple[Redirect, ...], raw: str, where: Where) -> str | None:
        """Apply stdout redirections: a file gets the output, the statement's own output is then empty."""
        for r in redirects:
            if r.target is None:
                continue
            fd = r.fd if r.fd is not None else (0 if r.op.startswith("<") else 1)
            if r.op in (">&", "&>", ">>&", "&>>") and r.target.value is not None and r.target.value.isdigit():
                if fd == 1:
                    output = ""  # to another descriptor (>&2): not the statement's output
                continue
            if r.op in (">", ">>", ">|", "&>", "&>>") and (fd == 1 or r.op.startswith("&")):
                if r.target.value not in ("/dev/null",):
                    self.write(r.target, output, append=">>" in r.op, where=where, raw=raw)
                output = ""
        return output

    def redirect(self, node: tree_sitter.Node) -> Redirect:
        self.tick()
        fd_node = node.child_by_field_name("descriptor")
        fd = int(self.raw(fd_node)) if fd_node is not None and self.raw(fd_node).isdigit() else None
        op = next((c.type for c in node.children if not c.is_named), "")
        if node.type == "heredoc_redirect":
            return Redirect(op, fd, None, self.heredoc(node))
        if node.type == "herestring_redirect":
            target = next((c for c in node.named_children), None)
            body = self.word(target) if target is not None else None
            if body is not None and body.value is not None:
                body = replace(body, value=body.value + "\n")
            return Redirect(op, fd, None, body)
        dest = node.child_by_field_name("destination")
        if dest is None:
            named = [c for c in node.named_children if c is not fd_node]
            dest = named[-1] if named else None
        return Redirect(op, fd, self.word(dest) if dest is not None else None)

    def heredoc(self, node: tree_sitter.Node) -> Word | None:
        start = next((c for c in node.named_children if c.type == "heredoc_start"), None)
        body = next((c for c in node.named_children if c.type == "heredoc_body"), None)
        end = next((c for c in node.named_children if c.type == "heredoc_end"), None)
        if start is None:
            return None
        delimiter = self.raw(start)
        quoted = any(q in delimiter for q in "'\"\\")
        strip_tabs = any(c.type == "<<-" for c in node.children)
        if body is None:
            return Word("", "", self.line(node), shown="")
        begin = body.start_byte
        # the body starts on the line after the operator: take the source from there to the end marker
        line_start = self.text.src.rfind(b"\n", 0, begin) + 1
        finish = end.start_byte if end is not None else body.end_byte
        raw_text = self.text.src[line_start:finish].decode("utf-8", "replace")
        if strip_tabs:
            raw_text = "\n".join(line.lstrip("\t") for line in raw_text.split("\n"))
        if quoted:
            return Word(raw_text, raw_text, self.line(body), shown=raw_text)
        segs = self.quoted_segments(body, line_start, finish, unescape_heredoc)
        if strip_tabs:
            segs = [replace(s, text="\n".join(x.lstrip("\t") for x in s.text.split("\n")))
                    if s.text is not None and not s.split else s for s in segs]
        return one_word(segs, raw_text, self.line(body))


# Wrappers that run the rest of their arguments as a command: (options taking a value, positional operands
# before the command). Their options are read up to the first word that is not one.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata", "-p", "-P", "-u"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "setsid": (frozenset(), 0),
    "taskset": (frozenset(), 1),
    "numactl": (frozenset({"-N", "-m", "-C", "-p", "-i", "--cpunodebind", "--membind", "--physcpubind",
                           "--preferred", "--interleave"}), 0),
    "chrt": (frozenset(), 1),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    # GNU xargs(1): runs the command with arguments read from its input appended
    "xargs": (frozenset({"-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "-n", "--max-args", "-P",
                         "--max-procs", "-s", "--max-chars", "--process-slot-var"}), 0),
    "xvfb-run": (frozenset({"-n", "-s", "-e", "-f", "-p", "--server-num", "--server-args"}), 0),
}


def flatten_redirects(node: tree_sitter.Node) -> list[tree_sitter.Node]:
    """A here-document's redirect node holds the redirections written after it on its line
    (``cat <<EOF > /etc/nccl.conf``): the parser nests them; they are the command's own."""
    out = [node]
    if node.type == "heredoc_redirect":
        out += [c for c in node.named_children if c.type in REDIRECTS]
    return out


def _skip_options(words: list[Word], with_value: frozenset[str], positional: int) -> list[Word]:
    i = 0
    while i < len(words):
        v = words[i].value
        if v is None:
            return words[i:]
        if v == "--":
            i += 1
            break
        if not v.startswith("-") or v == "-":
            break
        if v in with_value:
            i += 2
        else:
            i += 1
    return words[i + positional:] if i + positional <= len(words) else []


def _env_options(words: list[Word]) -> tuple[list[Word], bool, list[str], Word | None, list[tuple[str, Word]], bool]:
    """GNU env: ``-i``/``-``, ``-u NAME``/``--unset=NAME``, ``-C DIR``/``--chdir=DIR``, ``-S``, ``NAME=VALUE``."""
    cleared = False
    unsets: list[str] = []
    chdir: Word | None = None
    assigns: list[tuple[str, Word]] = []
    split = False
    i = 0
    options = True
    while i < len(words):
        w = words[i]
        v = w.value
        if v is None:
            return words[i:], cleared, unsets, chdir, assigns, True
        if options and v in ("-i", "-", "--ignore-environment"):
            cleared = True
        elif options and v in ("-u", "--unset") and i + 1 < len(words):
            i += 1
            if words[i].value:
                unsets.append(words[i].value or "")
        elif options and v.startswith("--unset="):
            unsets.append(v.split("=", 1)[1])
        elif options and v.startswith("-u") and len(v) > 2 and not v.startswith("--"):
            unsets.append(v[2:])
        elif options and v in ("-C", "--chdir") and i + 1 < len(words):
            i += 1
            chdir = words[i]
        elif options and v.startswith("--chdir="):
            chdir = replace(w, value=v.split("=", 1)[1])
        elif options and (v in ("-S", "--split-string") or v.startswith(("--split-string=", "-S"))):
            if v in ("-S", "--split-string"):
                i += 1
                text = words[i].value if i < len(words) else ""
            else:
                text = v.split("=", 1)[1] if v.startswith("--") else v[2:]
            pieces = split_string(text) if text is not None else None
            if pieces is None:
                return words[i + 1:], cleared, unsets, chdir, assigns, True
            rest, more_cleared, more_unsets, more_chdir, more_assigns, split = _env_options(
                [replace(w, value=p, shown=p) for p in pieces] + words[i + 1:])
            if more_cleared:
                cleared, assigns, unsets = True, [], []
            return (rest, cleared, unsets + more_unsets, more_chdir or chdir, assigns + more_assigns, split)
        elif options and v == "--":
            options = False
        elif options and v.startswith("-") and len(v) > 1 and "=" not in v:
            pass  # -0, -v, --debug...
        elif "=" in v and not v.startswith("="):
            name, _, value = v.partition("=")
            assigns.append((name, replace(w, value=value)))
            options = False
        else:
            return words[i:], cleared, unsets, chdir, assigns, split
        i += 1
    return [], cleared, unsets, chdir, assigns, split


_SPLIT_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "_": " ", "n": "\n", "t": "\t", "r": "\r", "f": "\f",
                  "v": "\v", "#": "#", "$": "$"}
MAX_SPLIT = 4096
"""The longest ``env -S`` string split; a longer one is unknown."""


def split_string(text: str) -> list[str] | None:
    r"""GNU env's ``-S``/``--split-string`` (coreutils env.c ``build_argv``): words split on spaces and tabs,
    ``'...'`` (only ``\\`` and ``\'`` escaped) and ``"..."`` quoting, the escapes ``\_`` (a space, a separator
    outside quotes) ``\n \t \r \f \v \# \$ \\ \" \'``, ``#`` at the start of a word a comment to the
    end. None when it holds what is only known at run time (``${NAME}`` of env's environment) or what env
    refuses (``$`` without braces, an unknown escape, an open quote), or is longer than :data:`MAX_SPLIT`."""
    if len(text) > MAX_SPLIT:
        return None
    out: list[str] = []
    current: list[str] = []
    started = False
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote == "'" and c != "'" and c != "\\":
            current.append(c)
        elif c == "'" and quote in ("", "'"):
            quote = "" if quote else "'"
            started = True
        elif c == '"' and quote in ("", '"'):
            quote = "" if quote else '"'
            started = True
        elif c in " \t\n\v\f\r" and not quote:
            if started:
                out.append("".join(current))
            current, started = [], False
        elif c == "#" and not quote and not started:
            break
        elif c == "$":
            return None  # ${NAME}: env's own environment at run time; a bare $ is an error
        elif c == "\\":
            if i + 1 >= len(text):
                return None
            nxt = text[i + 1]
            if quote == "'" and nxt not in "\\'":
                current.append(c)
            elif nxt == "_" and not quote:
                if started:
                    out.append("".join(current))
                current, started = [], False
                i += 1
            elif nxt == "c" and not quote:
                break
            elif nxt in _SPLIT_ESCAPES:
                current.append(_SPLIT_ESCAPES[nxt])
                started = True
                i += 1
            else:
                return None
        else:
            current.append(c)
            started = True
        i += 1
    if quote:
        return None
    if started:
        out.append("".join(current))
    return out


def _sudo_options(words: list[Word]) -> tuple[list[Word], bool, list[tuple[str, Word]]]:
    """sudo's options; whether the caller's environment is kept (``-E``, ``--preserve-env``)."""
    keep = False
    assigns: list[tuple[str, Word]] = []
    with_value = {"-u", "--user", "-g", "--group", "-h", "--host", "-p", "--prompt", "-C", "--close-from", "-D",
                  "--chdir", "-r", "--role", "-t", "--type", "-T", "--command-timeout", "-U", "--other-user"}
    i = 0
    while i < len(words):
        v = words[i].value
        if v is None:
            return words[i:], keep, assigns
        if v == "--":
            i += 1
            break
        if v in ("-E", "--preserve-env") or v.startswith("--preserve-env="):
            keep = True
        elif v in with_value:
            i += 1
        elif v.startswith("-") and len(v) > 1:
            if "E" in v[1:] and not v.startswith("--"):
                keep = True
        elif "=" in v and is_name(v.split("=", 1)[0]):
            name, _, value = v.partition("=")
            assigns.append((name, replace(words[i], value=value)))
        else:
            break
        i += 1
    return words[i:], keep, assigns


def _su_options(su: Word, words: list[Word]) -> tuple[list[Word] | None, bool, bool, Word]:
    """util-linux su(1): ``su [options] [-] [user [argument...]]``; ``-c``/``--command`` runs ``SHELL -c
    COMMAND [argument...]`` with the target user's shell (``-s``/``--shell``; root's is bash in the images
    Azure ML runs), ``-l``/``-``/``--login`` clears the environment (TERM kept) and starts in the user's
    home, ``-m``/``-p``/``--preserve-environment`` keeps HOME; otherwise "su ... only set[s] the environment
    variables HOME and SHELL". Returns (the shell's argv, login, preserve, HOME); None when an option or
    the user is only known at run time."""
    command: Word | None = None
    shell: Word | None = None
    login = preserve = False
    user: str | None = None
    args: list[Word] = []
    with_value = {"-g", "--group", "-G", "--supp-group", "-w", "--whitelist-environment"}
    i = 0
    while i < len(words):
        w = words[i]
        v = w.value
        if v is None:
            return None, False, False, su
        if user is not None:
            args.append(w)
        elif v in ("-", "-l", "--login"):
            login = True
        elif v in ("-m", "-p", "--preserve-environment"):
            preserve = True
        elif v in ("-c", "--command", "-s", "--shell") and i + 1 < len(words):
            i += 1
            if v in ("-c", "--command"):
                command = words[i]
            else:
                shell = words[i]
        elif v.startswith(("--command=", "--shell=")):
            option, _, value = v.partition("=")
            if option == "--command":
                command = replace(w, value=value)
            else:
                shell = replace(w, value=value)
        elif v in with_value:
            i += 1
        elif v.startswith("-") and len(v) > 1:
            if v.startswith("-c") and not v.startswith("--"):
                command = replace(w, value=v[2:])
            elif v.startswith("-s") and not v.startswith("--"):
                shell = replace(w, value=v[2:])
            elif not v.startswith("--"):
                login = login or "l" in v[1:]
                preserve = preserve or bool({"m", "p"} & set(v[1:]))
        else:
            user = v
        i += 1
    root = user in (None, "root")
    home = replace(su, raw="HOME", value="/root" if root else None, unknown=() if root else (f"~{user}",),
                   shown="/root" if root else f"~{user}")
    program = shell if shell is not None else replace(su, raw="bash", value="bash", shown="bash")
    if command is None:
        return [program, *args], login, preserve, home
    return [program, replace(su, raw="-c", value="-c", shown="-c"), command, *args], login, preserve, home


def _exec_options(words: list[Word]) -> tuple[list[Word], bool]:
    clear = False
    i = 0
    while i < len(words):
        v = words[i].value
        if v is None or not v.startswith("-") or v == "-":
            break
        if v == "--":
            i += 1
            break
        if v == "-a":
            i += 1
        elif "c" in v[1:]:
            clear = True
        i += 1
    return words[i:], clear


def stdin_of(redirects: tuple[Redirect, ...], stdin: str | None) -> str | None:
    for r in redirects:
        if r.body is not None and (r.fd in (None, 0)):
            stdin = r.body.value
        elif r.target is not None and r.op == "<" and r.fd in (None, 0):
            stdin = None
    return stdin


def _b64decode(data: str | None) -> str | None:
    if data is None:
        return None
    try:
        return base64.b64decode("".join(data.split()), validate=True).decode("utf-8")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
