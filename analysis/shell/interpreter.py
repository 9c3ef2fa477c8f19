"""The interpreter: statements and control flow, functions, nested shells, and :func:`evaluate`.

:class:`Shell` is the top of the layers (state, words, ``${...}``, arithmetic, conditions, declarations,
builtins, simple commands); each kind of statement node has its handler in :data:`_STATEMENTS`. What a bound
does to the evaluation: docs/security.md, "The shell evaluator".
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

import tree_sitter

from analysis.shell.api import (
    MAX_DEPTH,
    MAX_ITERATIONS,
    MAX_NESTING,
    Binding,
    Budget,
    Environ,
    Script,
    Unknown,
    Variable,
    Where,
    Word,
)
from analysis.shell.commands import Commands, flatten_redirects, stdin_of
from analysis.shell.conditions import NEGATED
from analysis.shell.patterns import any_match, bracket_escapes
from analysis.shell.state import OK, REDIRECTS, Flow, Function, Result, Stop, Text, cause_kind


class Shell(Commands):
    """The whole evaluator: the top of the layers."""

    def run_text(self, text: str, *, first_line: int, within: tuple[str, ...]) -> Result:
        if self.nesting >= MAX_NESTING:
            raise Stop("too deep", f"shells nested more than {MAX_NESTING} deep")
        saved_text = self.text
        parsed, root = self.parse(text, first_line=first_line, within=within)
        self.text = parsed
        self.nesting += 1
        try:
            return self.block(root)
        finally:
            self.nesting -= 1
            self.text = saved_text

    def block(self, node: tree_sitter.Node, stdin: str | None = "") -> Result:
        result = OK
        outputs: list[str | None] = []
        for child in node.named_children:
            if child.type == "comment":
                continue
            result = self.statement(child, stdin)
            outputs.append(result.output)
        return Result(result.status, _join(outputs))

    def statement(self, node: tree_sitter.Node, stdin: str | None = "") -> Result:
        self.tick()
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise Stop("too deep", f"syntax nested more than {MAX_DEPTH} levels deep")
            return self._statement(node, stdin)
        finally:
            self.depth -= 1

    def _statement(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        run = _STATEMENTS.get(node.type)
        if run is not None:
            return run(self, node, stdin)
        if node.type == "ERROR" or node.is_missing:
            self.unknown("parse error", self.raw(node), self.where(node))
            return Result("unknown", None)
        if node.type in REDIRECTS or node.type in ("heredoc_body", "heredoc_end"):
            return OK
        self.unknown("parse error", self.raw(node), self.where(node))
        return Result("unknown", None)

    def _assignments(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        nodes = [node] if node.type == "variable_assignment" else [c for c in node.named_children
                                                                   if c.type == "variable_assignment"]
        for child in nodes:
            self.assignment_node(child, how="assign")
        return OK

    def _subshell(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        frame = self.push("subshell")
        try:
            return self.scoped(lambda: self.block(node, stdin), "exit")
        finally:
            self.pop(frame, merge="discard")

    def _compound(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        first = node.children[0].type if node.children else ""
        if first == "((":
            return self.arith_command(node)
        return self.block(node, stdin)

    def _define(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        name_node = node.child_by_field_name("name")
        body = node.child_by_field_name("body")
        if name_node is not None and body is not None:
            name = self.raw(name_node)
            self.frame.functions[name] = Function(body, self.text, name)
        return OK

    def _negated(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        inner = node.named_children[-1] if node.named_children else None
        result = self.statement(inner, stdin) if inner is not None else OK
        return Result(NEGATED.get(result.status, "unknown"), result.output)

    def region(self, run: Callable[[], Result]) -> Result:
        """Run a part that may or may not run: its changes become "maybe"."""
        frame = self.push("branch")
        saved = self.maybe
        self.maybe = True
        try:
            result = run()
        except Flow:
            result = Result("unknown", None)
        finally:
            self.maybe = saved
            self.pop(frame, merge="maybe")
        return Result("unknown" if result.status != "likely" else "likely", None)

    def and_or(self, node: tree_sitter.Node, stdin: str | None,
               tail: tuple[tree_sitter.Node, ...] = ()) -> Result:
        """``a && b || c``; ``tail``: redirections of the last command (:meth:`with_redirects`)."""
        items: list[tuple[str, tree_sitter.Node]] = []
        current = node
        while current.type == "list" and current.child_count >= 3:  # left-recursive: walk down iteratively
            op = current.children[1].type
            items.append((op, current.children[2]))
            current = current.children[0]
            self.tick()
        items.append(("", current))
        items.reverse()
        result = OK
        outputs: list[str | None] = []
        last = items[-1][1]

        def run(child: tree_sitter.Node) -> Result:
            if tail and child is last:
                self.tick()
                return self.with_redirects(child, tail, stdin, self.raw(child), self.where(child))
            return self.statement(child, stdin)
        for op, child in items:
            runs = _runs_after(op, result.status)
            if runs == "no":
                continue
            result = run(child) if runs == "yes" else self.region(lambda child=child: run(child))  # type: ignore[misc]
            outputs.append(result.output)
        return Result(result.status, _join(outputs))

    def pipeline(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        parts = [c for c in node.named_children if c.type != "comment"]
        data: str | None = stdin
        result = OK
        for part in parts:
            frame = self.push("subshell")
            try:
                result = self.scoped(lambda part=part, data=data: self.statement(part, data), "exit")  # type: ignore[misc]
            finally:
                self.pop(frame, merge="discard")
            data = result.output
        return result

    def redirected(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        body = node.child_by_field_name("body")
        redirect_nodes = [c for c in node.named_children if c.type in REDIRECTS]
        redirect_nodes = [r for n in redirect_nodes for r in flatten_redirects(n)]
        return self.with_redirects(body, tuple(redirect_nodes), stdin, self.raw(node), self.where(node))

    def with_redirects(self, body: tree_sitter.Node | None, redirect_nodes: tuple[tree_sitter.Node, ...],
                       stdin: str | None, raw: str, where: Where) -> Result:
        if body is not None and body.type == "command":
            return self.simple(body, redirect_nodes, stdin)
        if body is not None and body.type == "list":
            # tree-sitter-bash hangs the redirection of `mkdir -p d && echo X=1 > d/f` on the whole list; in
            # bash's grammar (bash(1), SHELL GRAMMAR: a list is pipelines joined by && and ||, a redirection
            # belongs to its simple command) it is the last command's own
            return self.and_or(body, stdin, redirect_nodes)
        redirects = tuple(self.redirect(r) for r in redirect_nodes)
        data = stdin_of(redirects, stdin)
        result = self.statement(body, data) if body is not None else OK
        return Result(result.status, self.route_output(result.output, redirects, raw, where))

    def if_statement(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        # children: if <condition...> then <body...> (elif_clause | else_clause)* fi
        clauses: list[tuple[list[tree_sitter.Node], list[tree_sitter.Node]]] = []
        conditions: list[tree_sitter.Node] = []
        body: list[tree_sitter.Node] = []
        state = "cond"
        otherwise: list[tree_sitter.Node] | None = None
        for child in node.children:
            t = child.type
            if t == "then":
                state = "body"
            elif t in ("if", "fi", ";", "&", "\n") or t == "comment":
                continue
            elif t == "elif_clause":
                clauses.append((conditions, body))
                conditions, body, state = [], [], "cond"
                inner_state = "cond"
                for sub in child.children:
                    if sub.type == "then":
                        inner_state = "body"
                    elif sub.is_named and sub.type != "comment":
                        (conditions if inner_state == "cond" else body).append(sub)
            elif t == "else_clause":
                otherwise = [c for c in child.named_children if c.type != "comment"]
            elif child.is_named:
                (conditions if state == "cond" else body).append(child)
        clauses.append((conditions, body))
        decided = False
        for conds, stmts in clauses:
            cond = self.sequence(conds, stdin)
            if cond.status == "true":
                self.sequence(stmts, stdin)
                decided = True
                break
            if cond.status == "false":
                continue
            self.region(lambda stmts=stmts: self.sequence(stmts, stdin))  # type: ignore[misc]
            if otherwise is not None:
                self.region(lambda rest=otherwise: self.sequence(rest, stdin))  # type: ignore[misc]
            return Result("unknown", None)
        if not decided and otherwise is not None:
            self.sequence(otherwise, stdin)
        return Result("unknown", None)

    def sequence(self, nodes: list[tree_sitter.Node], stdin: str | None) -> Result:
        result = OK
        for n in nodes:
            result = self.statement(n, stdin)
        return result

    def for_statement(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        return self.bounded(node, lambda: self._for(node, stdin), sets=True)

    def _for(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        keyword = node.children[0].type if node.children else "for"
        variable = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        values = node.children_by_field_name("value")
        if variable is None or body is None:
            return OK
        name = self.raw(variable)
        where = self.where(node)
        items: list[Word] | None = []
        if not values:
            items = None  # "$@": the positional parameters
        for v in values:
            words = self.words(v)
            if items is not None and all(w.known for w in words):
                items.extend(words)
            else:
                items = None
        if keyword == "for" and items is not None and len(items) <= MAX_ITERATIONS:
            for item in items:
                self.assign(name, item.value, raw=f"for {name} in ...", where=where, how="for")
                try:
                    self.block(body, stdin)
                except Flow as flow:
                    if flow.kind == "break":
                        break
                    if flow.kind != "continue":
                        raise
            return Result("likely", None)

        def once() -> Result:
            self.assign(name, None, raw=f"{keyword} {name} in ...", where=where, how="for",
                        unknown=(f"{keyword} {name}",))
            return self.block(body, stdin)
        return self.region(once)

    def loop(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        return self.bounded(node, lambda: self._loop(node, stdin), sets=True)

    def _loop(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        """``while``/``until`` (the body once: certain when the condition is true, maybe when not known),
        ``for ((..))`` (the body once, maybe)."""
        body = node.child_by_field_name("body")
        until = bool(node.children) and node.children[0].type == "until"
        conditions = [c for c in node.children_by_field_name("condition") if c.is_named]
        if node.type == "c_style_for_statement":
            for c in node.named_children:
                if c is not body:
                    self.arith_node(c)
            if body is not None:
                self.region(lambda: self.block(body, stdin))
            return Result("unknown", None)
        cond = self.sequence(conditions, stdin)
        status = cond.status
        if until:
            status = {"true": "false", "false": "true"}.get(status, status)  # type: ignore[assignment]
        if status == "false" or body is None:
            return OK
        if status == "true":
            try:
                self.block(body, stdin)
            except Flow as flow:
                if flow.kind not in ("break", "continue"):
                    raise
            return Result("likely", None)
        self.region(lambda: self.block(body, stdin))
        return Result("unknown", None)

    def case_statement(self, node: tree_sitter.Node, stdin: str | None) -> Result:
        value_node = node.child_by_field_name("value")
        word = self.word(value_node) if value_node is not None else None
        certain = word is not None and word.value is not None
        for item in (c for c in node.named_children if c.type == "case_item"):
            patterns = item.children_by_field_name("value")
            body = [c for c in item.named_children if c not in patterns and c.type != "comment"]
            pats = [self.pattern(p) for p in patterns]
            matched = None
            if certain and word is not None and word.value is not None and all(p is not None for p in pats):
                matched = any_match(word.value, [p for p in pats if p is not None])
            if matched is not None:
                if not matched:
                    continue
                self.sequence(body, stdin)
                if not self.raw(item).rstrip().endswith((";&", ";;&")):
                    return Result("likely", None)
                continue
            certain = False  # from here on, which item runs is not known
            self.region(lambda body=body: self.sequence(body, stdin))  # type: ignore[misc]
        return Result("unknown", None)

    def pattern(self, node: tree_sitter.Node) -> str | None:
        """A case pattern as an fnmatch pattern (quoted parts escaped); None when not known."""
        if node.type in ("word", "extglob_pattern", "number"):
            text = self.raw(node)
            return None if any(c in text for c in "$`@+!(") else bracket_escapes(text)
        w = self.word(node)
        return None if w.value is None else "".join(f"[{c}]" if c in "*?[" else c for c in w.value)

    def call(self, func: Function, argv: list[Word], env_over: dict[str, Binding], where: Where,
             stdin: str | None) -> Result:
        if self.nesting >= MAX_NESTING:
            raise Stop("too deep", f"functions and shells nested more than {MAX_NESTING} deep")
        frame = self.push("function")
        frame.vars.update(env_over)
        frame.locals.update(env_over)
        frame.positional = tuple(w.value for w in argv[1:])
        saved_text = self.text
        self.text = Text(func.text.src, func.text.original, func.text.first_line,
                          (*func.text.within, f"function {func.name}"))
        self.nesting += 1
        try:
            result = self.scoped(lambda: self.statement(func.body, stdin), "return")
        finally:
            self.nesting -= 1
            self.text = saved_text
            self.pop(frame, merge="keep")
        return result

    def child_shell(self, argv: list[Word], environ: Environ, where: Where, raw: str,
                    stdin: str | None) -> Result:
        """``bash -c BODY [name args...]``, ``bash <<EOF``, ``bash script.sh``: a new shell process, which
        receives only the environment (exported variables). A non-interactive bash first sources
        ``$BASH_ENV`` (:meth:`bash_env`)."""
        shell = posixpath.basename(argv[0].value or "sh")
        i = 1
        command_mode = False
        startup = shell == "bash"  # bash(1): a shell named sh reads no startup file when not interactive
        while i < len(argv):
            value = argv[i].value
            if value is None:
                self.unknown("dynamic command", raw, where)
                return Result("likely", None)
            if value == "--" or value == "-":
                i += 1
                break
            if len(value) < 2 or value[0] not in "-+":
                break
            if value in ("-o", "-O", "+o", "+O") and i + 1 < len(argv) and argv[i + 1].value == "posix":
                startup = startup and value.startswith("+")
            if value in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                i += 1
            elif value == "--posix" or (not value.startswith("--") and value[0] == "-"
                                        and any(c in value[1:] for c in "pi")):
                startup = False  # posix mode, privileged (-p), interactive (-i): no BASH_ENV
                command_mode = command_mode or ("c" in value[1:] and not value.startswith("--"))
            elif not value.startswith("--") and "c" in value[1:]:
                command_mode = True
            i += 1
        operands = argv[i:]
        body: str | None
        if command_mode:
            if not operands:
                return Result("false", "")
            body_word, args = operands[0], operands[1:]
            body = body_word.value
            label = f"{shell} -c at {where}"
            first_line = body_word.line
            if body is None:
                self.unknown(cause_kind(body_word.unknown), raw, where)
                return Result("likely", None)
        elif operands:
            script, args = operands[0], operands[1:]
            label = f"{shell} {script}"
            first_line = 1
            body = self.file_text(script.value)
            if body is None:
                return Result("likely", None)  # a script file nobody gave us: a program like any other
            args = [script, *args]
        else:
            body, args = stdin, [argv[0]]
            label = f"{shell} reading its input at {where}"
            first_line = where.line
            startup = False  # reading commands from its input: bash -s is interactive when that is a terminal
            if body is None:
                self.unknown("shell input", f"| {raw}", where)
                return Result("likely", None)
        self.tick(len(environ))  # before the frame: a bound met here leaves no frame behind
        frame = self.push("child")
        frame.vars = dict(environ.items())
        frame.cwd = self.commands[-1].cwd if self.commands else frame.cwd
        frame.zero = args[0].value if args else argv[0].value
        frame.positional = tuple(w.value for w in args[1:])
        text = body
        within = (*self.text.within, label)
        try:
            def run() -> Result:
                if startup:
                    self.bash_env(environ, where, raw, within)
                return self.run_text(text, first_line=first_line, within=within)
            self.guarded(lambda: self.scoped(run, "exit", "return", "break", "continue"), raw, where, here=False)
        finally:
            self.pop(frame, merge="discard")
        return Result("likely", None)

    def bash_env(self, environ: Environ, where: Where, raw: str, within: tuple[str, ...]) -> None:
        """bash(1), INVOCATION: "When bash is started non-interactively, to run a shell script, for example,
        it looks for the variable BASH_ENV in the environment, expands its value, and uses the expanded value
        as the name of a file to read and execute" (shell.c ``run_startup_files``: not in posix mode, not
        named sh, not privileged; ``POSIXLY_CORRECT`` in the environment is posix mode). The file is what
        this text wrote there, or the code folder's (:meth:`file_text`); another file is unknown."""
        binding = environ.get("BASH_ENV", ())
        if not any(v is not None for v in binding) or any(
                v is not None for v in environ.get("POSIXLY_CORRECT", ())):
            return
        value = environ.value("BASH_ENV")
        if value == "":
            return
        if value is None or "$" in value or "`" in value or (value.startswith("~") and "/" not in value):
            self.unknown("source", f"BASH_ENV read by {raw}", where)
            return
        if value.startswith("~/"):
            value = posixpath.join(environ.value("HOME") or "~", value[2:])
        text = self.file_text(value)
        if text is None:
            self.unknown("source", f"BASH_ENV={value} read by {raw}", where)
            return
        maybe = any(v is not None and v.maybe for v in binding) or len(binding) > 1
        label = f"BASH_ENV {value}"

        def run() -> Result:
            return self.run_text(text, first_line=1, within=(*within, label))
        self.guarded(lambda: self.region(run) if maybe else run(), f"BASH_ENV={value}", where, here=True)


_Run = Callable[[Shell, tree_sitter.Node, str | None], Result]
_STATEMENTS: dict[str, _Run] = {
    "command": lambda shell, node, stdin: shell.simple(node, (), stdin),
    "declaration_command": lambda shell, node, stdin: shell.declaration_node(node),
    "unset_command": lambda shell, node, stdin: shell.declaration_node(node),
    "variable_assignment": Shell._assignments,
    "variable_assignments": Shell._assignments,
    "list": Shell.and_or,
    "pipeline": Shell.pipeline,
    "redirected_statement": Shell.redirected,
    "subshell": Shell._subshell,
    "compound_statement": Shell._compound,
    "program": Shell.block,
    "do_group": Shell.block,
    "if_statement": Shell.if_statement,
    "for_statement": Shell.for_statement,
    "while_statement": Shell.loop,
    "c_style_for_statement": Shell.loop,
    "case_statement": Shell.case_statement,
    "function_definition": Shell._define,
    "negated_command": Shell._negated,
    "test_command": lambda shell, node, stdin: Result(shell.test_expression(node), ""),
}
"""How each kind of statement node runs; an error node or any other kind is a parse error (unknown)."""


def _runs_after(op: str, status: str) -> Literal["yes", "no", "maybe"]:
    if op == "":
        return "yes"
    if op == "&&":
        return "yes" if status in ("true", "likely") else "no" if status == "false" else "maybe"
    if op == "||":
        return "no" if status == "true" else "yes" if status == "false" else "maybe"
    return "yes"


def _join(outputs: list[str | None]) -> str | None:
    if any(o is None for o in outputs):
        return None
    return "".join(o or "" for o in outputs)


def evaluate(
    text: str,
    *,
    environment: Mapping[str, str] | Iterable[Variable] = (),
    platform: Iterable[str] = (),
    origin: str = "environment",
    label: str = "the command",
    cwd: str | None = ".",
    first_line: int = 1,
    read_file: Callable[[str], str | None] | None = None,
    placeholders: Mapping[str, str] | None = None,
    budget: Budget | None = None,
    startup: bool = False,
    scripts: bool = False,
) -> Script:
    """Evaluate ``text`` as bash would, as far as that is known before it runs.

    ``environment``: what the process starts with (name -> value, labelled ``origin``; or
    :class:`Variable` objects with their own origins). ``platform``: names the platform sets at run time
    (Azure ML's ``NODE_RANK``, ``MASTER_ADDR``...): known to exist, value unknown. ``label`` names the
    text in each :class:`Variable` it sets. ``cwd``: the directory the text starts in (relative paths are
    kept relative to it). ``first_line``: the line of ``text``'s first line in the file it came from.
    ``read_file(path)``: the text of a file ``source``/``bash script.sh`` reads (path relative to the
    starting directory, or absolute), or None when it cannot be read; without it they are unknown.
    ``placeholders``: when given, ``${{...}}`` spans are Azure ML placeholders replaced before the shell
    runs: the value the mapping has for the expression inside (``inputs.lr``), unknown otherwise.
    ``budget``: steps and time shared with other calls (a fresh :class:`Budget` by default).
    ``startup``: the text is run by a non-interactive bash, which first sources the file ``BASH_ENV`` of
    ``environment`` names (:meth:`Shell.bash_env`). ``scripts``: a program named by a path (``./launch.sh``)
    whose file is known is evaluated as the shell script it is (:meth:`Shell.script_shell`).
    """
    budget = budget if budget is not None else Budget()
    shell = Shell(label=label, platform=frozenset(platform), read_file=read_file, placeholders=placeholders,
                   budget=budget)
    seed: dict[str, Binding] = {}
    for name in shell.platform:
        seed[name] = (Variable(name, None, "platform"),)
    if isinstance(environment, Mapping):
        for name, value in environment.items():
            seed[str(name)] = (Variable(str(name), str(value), origin),)
    else:
        for variable in environment:
            seed[variable.name] = (variable,)
    shell.frame.vars = seed
    shell.frame.cwd = cwd
    shell.scripts = scripts
    complete = True
    try:
        def run() -> Result:
            if startup:
                shell.bash_env(Environ(seed), Where(first_line), label, ())
            return shell.run_text(text, first_line=first_line, within=())
        shell.scoped(run, "exit", "return", "break", "continue")
    except Stop as stop:
        complete = False
        while shell.frame.parent is not None:
            shell.frame = shell.frame.parent
        line = shell.commands[-1].where.line if shell.commands else first_line
        shell.unknowns.append(Unknown(stop.kind, stop.message, Where(line)))
    except RecursionError:
        complete = False
        while shell.frame.parent is not None:
            shell.frame = shell.frame.parent
        shell.unknowns.append(Unknown("too deep", "nested too deep to follow", Where(first_line)))
    budget.steps = max(0, budget.steps - shell.steps)
    return Script(tuple(shell.commands), tuple(shell.assignments), tuple(shell.unknowns), tuple(shell.writes),
                  Environ(shell.frame.vars), shell.frame.cwd, complete and not shell.partial)
