"""analysis/shell/: a bash reader/evaluator on tree-sitter-bash, checked construct by construct.

Each expectation is what bash itself does with the text (they were checked by running bash 5 on
them); the tests compare the evaluator's view of it: words, the environment each command receives,
variables, files written, and what it says it cannot follow.
"""

from __future__ import annotations

import pytest

from analysis import shell
from analysis.shell import Script, evaluate


def _env(script: Script, program: str) -> dict[str, list[str | None]]:
    """The environment the first command running ``program`` receives: name -> candidate values."""
    command = next(c for c in script.commands if c.program == program)
    return {name: [v.value if v is not None else None for v in binding] for name, binding in command.environ.items()}


def _seen(text: str, name: str, program: str = "python", **kwargs: object) -> list[str | None] | None:
    env = _env(evaluate(text, **kwargs), program)  # type: ignore[arg-type]
    return env.get(name)


@pytest.mark.parametrize(
    ("text", "argv"),
    [
        ("python train.py --lr 0.1", ["python", "train.py", "--lr", "0.1"]),
        ("python 'a b' \"c d\" e\\ f", ["python", "a b", "c d", "e f"]),
        ("python $'a\\tb' $'\\x41\\101\\u00e9'", ["python", "a\tb", "AA\u00e9"]),
        ('A=x; python "$A"y\'$A\' ${A}z', ["python", "xy$A", "xz"]),
        ("A='1 2'; python $A \"$A\"", ["python", "1", "2", "1 2"]),
        ("E=; python $E '' x", ["python", "", "x"]),
        ("python a \\\n  b # a comment: c", ["python", "a", "b"]),
        ("python a\\\nb c\\\n\"d\"", ["python", "ab", "cd"]),  # a line continuation inside a word joins it
        ('python "a\\"b\\$c\\\\d\\e"', ["python", 'a"b$c\\d\\e']),
        ("A=abcdef; python ${A:1:3} ${A#ab} ${A%ef} ${A/cd/X} ${#A} ${A^^}", ["python", "bcd", "cdef", "abcd",
                                                                            "abXef", "6", "ABCDEF"]),
        ("python $((1 + 2 * 3)) $((0x10)) $((010))", ["python", "7", "16", "8"]),
        ("U=; unset N; python ${U:-d} ${U-e} ${N:+f}x ${N:-g}", ["python", "d", "x", "g"]),
        ("python $(echo hi) `printf %s there`", ["python", "hi", "there"]),
        ("python ${{inputs.lr}} --data ${{inputs.data}}", ["python", "0.1", "--data", "${{inputs.data}}"]),
    ],
)
def test_words_expand_as_bash_expands_them(text: str, argv: list[str]) -> None:
    script = evaluate(text, placeholders={"inputs.lr": "0.1"})
    command = next(c for c in script.commands if c.program == "python")
    assert [str(w) for w in command.argv] == argv


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        ('export NCCL_IB_DISABLE="1" # NCCL_IB_DISABLE=0\npython x.py', ["1"]),
        ("NCCL_IB_DISABLE=1 python x.py", ["1"]),
        ("NCCL_IB_DISABLE=1; python x.py", None),  # a shell variable, never exported
        ("NCCL_IB_DISABLE=1; export NCCL_IB_DISABLE; python x.py", ["1"]),
        ("export NCCL_IB_DISABLE; NCCL_IB_DISABLE=1; python x.py", ["1"]),
        ('export "NCCL"_IB_DISABLE=1; python x.py', ["1"]),
        ("export NCCL_IB_DIS''ABLE=1; python x.py", ["1"]),
        ("export NCCL_IB_\\\nDISABLE=1; python x.py", ["1"]),
        ("NCCL_IB_\\\nDISABLE=1 python x.py", ["1"]),
        ("export NCCL_IB_DISABLE=0\\\n1; python x.py", ["01"]),
        ('"NCCL_IB_DISABLE"=1 ls; python x.py', None),  # a quoted name is no assignment: a command of that name
        ("declare -x NCCL_IB_DISABLE=1; python x.py", ["1"]),
        ("typeset -x NCCL_IB_DISABLE=1; python x.py", ["1"]),
        ("declare -x NCCL_IB_DISABLE=1; declare +x NCCL_IB_DISABLE; python x.py", None),
        ("export NCCL_IB_DISABLE=1; export -n NCCL_IB_DISABLE; python x.py", None),
        ("export NCCL_IB_DISABLE=0; NCCL_IB_DISABLE+=1; python x.py", ["01"]),
        ("export NCCL_IB_DISABLE=0; printf -v NCCL_IB_DISABLE %d 1; python x.py", ["1"]),
        ("readonly NCCL_IB_DISABLE=0; export NCCL_IB_DISABLE=1; python x.py", None),  # refused: readonly
        ("export NCCL_IB_DISABLE=1; unset NCCL_IB_DISABLE; python x.py", None),
        ("set -a; NCCL_IB_DISABLE=1; python x.py", ["1"]),
        ("declare -n R=NCCL_IB_DISABLE; R=1; export R; python x.py", ["1"]),
        ("export NCCL_IB_DISABLE=0; NCCL_IB_DISABLE[0]=1; python x.py", None),  # now an array: not exported
        ("export NCCL_IB_DISABLE=(1); python x.py", None),
        ("declare -ix NCCL_IB_DISABLE=0x1; python x.py", ["1"]),
        ("declare -ux NCCL_NET=socket; python x.py", ["SOCKET"]),
        ("env NCCL_IB_DISABLE=1 python x.py", ["1"]),
        ("exec env NCCL_IB_DISABLE=1 nohup time python x.py", ["1"]),
        ("sudo -E NCCL_IB_DISABLE=1 python x.py", ["1"]),
        ("export NCCL_IB_DISABLE=1; env -i PATH=/bin python x.py", None),
        ("export NCCL_IB_DISABLE=1; env -u NCCL_IB_DISABLE python x.py", [None]),
        ("export NCCL_IB_DISABLE=1; sudo python x.py", None),  # sudo's env_reset
        ("NCCL_IB_DISABLE=1 env -i python x.py", None),
        ("(export NCCL_IB_DISABLE=1); python x.py", None),  # a subshell's changes stay there
        ("export NCCL_IB_DISABLE=1 | cat; python x.py", None),  # so do a pipeline's
        ("{ export NCCL_IB_DISABLE=1; }; python x.py", ["1"]),
        ("f() { export NCCL_IB_DISABLE=1; }; f; python x.py", ["1"]),
        ("f() { local NCCL_IB_DISABLE=1; export NCCL_IB_DISABLE; }; f; python x.py", None),
        ("true && export NCCL_IB_DISABLE=1; python x.py", ["1"]),
        ("false && export NCCL_IB_DISABLE=1; python x.py", None),
        ("cd src && export NCCL_IB_DISABLE=1 && python x.py", ["1"]),  # the path on which the run goes on
        ("ls || export NCCL_IB_DISABLE=1; python x.py", ["1", None]),  # only if ls fails: maybe
        ("if true; then export NCCL_IB_DISABLE=1; fi; python x.py", ["1"]),
        ('if [ -n "x" ]; then export NCCL_IB_DISABLE=1; else export NCCL_IB_DISABLE=0; fi; python x.py', ["1"]),
        ('if [ "$NODE_RANK" = 0 ]; then export NCCL_IB_DISABLE=1; fi; python x.py', ["1", None]),
        ("for v in 0 1; do export NCCL_IB_DISABLE=$v; done; python x.py", ["1"]),
        ("case x in x) export NCCL_IB_DISABLE=1;; *) export NCCL_IB_DISABLE=0;; esac; python x.py", ["1"]),
        ("export NCCL_IB_DISABLE=${UNSET_SO_FAR-1}; python x.py", [None]),  # the image may set it: unknown
        ("V=1; export NCCL_IB_DISABLE=${V:-0}; python x.py", ["1"]),
        ("export NCCL_IB_DISABLE=$(echo 1); python x.py", ["1"]),
        ("export NCCL_IB_DISABLE=$(echo MQ== | base64 -d); python x.py", ["1"]),
        ("eval 'export NCCL_IB_DISABLE=1'; python x.py", ["1"]),
        ('eval "$(echo ZXhwb3J0IE5DQ0xfSUJfRElTQUJMRT0x | base64 -d)"; python x.py', ["1"]),
        ("bash -c 'export NCCL_IB_DISABLE=$1; python x.py' sh 1", ["1"]),
        ("sh -c \"NCCL_IB_DISABLE=1 python x.py\"", ["1"]),
        ("bash <<'EOF'\nexport NCCL_IB_DISABLE=1\npython x.py\nEOF", ["1"]),
        ("bash <<< 'NCCL_IB_DISABLE=1 python x.py'", ["1"]),
        ("exec python x.py; export NCCL_IB_DISABLE=1; python y.py", None),
    ],
)
def test_the_environment_each_command_receives(text: str, seen: list[str | None] | None) -> None:
    script = evaluate(text, platform=["NODE_RANK"])
    values = _seen(text, "NCCL_IB_DISABLE", platform=["NODE_RANK"]) if "NCCL_NET" not in text else \
        _seen(text, "NCCL_NET")
    assert values == seen, (script.commands, script.unknowns)


def test_the_run_s_variables_seed_the_shell_and_unknown_ones_stay_unknown() -> None:
    script = evaluate("export A=$SEEDED-$MISSING B=$SEEDED; python x.py", environment={"SEEDED": "s"})
    env = _env(script, "python")
    assert env["A"] == [None]
    assert env["B"] == ["s"]
    assert env["SEEDED"] == ["s"]
    (unknown,) = script.unknowns
    assert (unknown.kind, unknown.names, str(unknown)) == ("variable", ("A",),
                                                            "cannot tell: `A=$SEEDED-$MISSING` at line 1")


@pytest.mark.parametrize(
    ("text", "kind", "construct", "names"),
    [
        ('eval "$FLAGS"', "eval", 'eval "$FLAGS"', None),
        ("eval \"$(curl -s https://example.invalid/x | base64 -d)\"", "eval", None, None),
        ("source env.sh", "source", "source env.sh", None),
        (". ./env.sh", "source", ". ./env.sh", None),
        ("read NCCL_IB_DISABLE < f", "read", None, ("NCCL_IB_DISABLE",)),
        ("read -r -p 'x' A B", "read", None, ("A", "B")),
        ("export NCCL_IB_DISABLE=$(cat flag)", "command substitution", "NCCL_IB_DISABLE=$(cat flag)",
         ("NCCL_IB_DISABLE",)),
        ("export NCCL_IB_DISABLE=$FLAG", "variable", "NCCL_IB_DISABLE=$FLAG", ("NCCL_IB_DISABLE",)),
        ("$CMD train.py", "dynamic command", "$CMD train.py", None),
        ("curl -s https://example.invalid/x | bash", "shell input", "| bash", None),
        ("export ${N}_X=1", "dynamic name", None, None),
        ("python x.py )", "parse error", None, None),
        ("A[3]=1", "array", "A[3]=1", ("A",)),
        ("shopt -s expand_aliases", "alias", None, None),
    ],
)
def test_what_cannot_be_evaluated_is_reported(text: str, kind: str, construct: str | None,
                                              names: tuple[str, ...] | None) -> None:
    script = evaluate(text)
    matching = [u for u in script.unknowns if u.kind == kind]
    assert matching, script.unknowns
    if construct is not None:
        assert matching[0].construct == construct
    assert matching[0].names == names
    assert str(matching[0]).startswith("cannot tell: `")


def test_the_line_of_a_construct_is_the_line_in_the_text() -> None:
    script = evaluate("cd src\n\nbash -c '\n  export A=1\n  eval \"$X\"\n'\n", first_line=10)
    (unknown,) = script.unknowns
    assert unknown.where.line == 14
    assert str(unknown.where) == "line 14 (in bash -c at line 12)"


def test_source_reads_through_the_caller_s_reader_relative_to_the_working_directory() -> None:
    files = {"src/env.sh": "export NCCL_IB_DISABLE=1\n"}
    script = evaluate("cd src && source ./env.sh && python x.py", read_file=files.get)
    assert _env(script, "python")["NCCL_IB_DISABLE"] == ["1"]
    assert not script.unknowns


@pytest.mark.parametrize(
    ("text", "cwd"),
    [
        ("python x.py", "."),
        ("cd src && python x.py", "src"),
        ("cd src; cd ../other/./dir; python x.py", "other/dir"),
        ("cd /opt/app && python x.py", "/opt/app"),
        ("(cd src); python x.py", "."),
        ("cd $DIR && python x.py", None),
        ("env -C src python x.py", "src"),
        ("if [ -d a ]; then cd a; fi; python x.py", None),
    ],
)
def test_the_working_directory_is_tracked(text: str, cwd: str | None) -> None:
    script = evaluate(text)
    assert next(c for c in script.commands if c.program == "python").cwd == cwd


@pytest.mark.parametrize(
    ("text", "path", "content", "append"),
    [
        ("echo NCCL_IB_DISABLE=1 >> /etc/nccl.conf", "/etc/nccl.conf", "NCCL_IB_DISABLE=1\n", True),
        ("printf 'A=%s\\n' 1 > ~/.nccl.conf", "~/.nccl.conf", "A=1\n", False),
        ("cat <<EOF > /etc/nccl.conf\nNCCL_NET=$NET\nEOF", "/etc/nccl.conf", "NCCL_NET=Socket\n", False),
        ("cat > /etc/nccl.conf <<'EOF'\nNCCL_NET=$NET\nEOF", "/etc/nccl.conf", "NCCL_NET=$NET\n", False),
        ("echo pml=ob1 | tee -a /etc/openmpi-mca-params.conf", "/etc/openmpi-mca-params.conf", "pml=ob1\n", True),
        ("{ echo A=1; echo B=2; } > f.conf", "f.conf", "A=1\nB=2\n", False),
        ("python make_conf.py > /etc/nccl.conf", "/etc/nccl.conf", None, False),
    ],
)
def test_files_written_and_their_content(text: str, path: str, content: str | None, append: bool) -> None:
    script = evaluate(text, environment={"NET": "Socket"})
    (write,) = script.writes
    assert (str(write.path), write.content, write.append) == (path, content, append)


def test_a_copy_is_a_write_of_unknown_content() -> None:
    (write,) = evaluate("cp conf/nccl.conf /etc/nccl.conf").writes
    assert (write.path.value, write.content, write.source and write.source.value) == (
        "/etc/nccl.conf", None, "conf/nccl.conf")


def test_commands_in_order_with_wrappers_prefixes_and_nesting() -> None:
    script = evaluate("A=1 sudo -E nohup torchrun --nproc_per_node 8 train.py && bash -c 'deepspeed x.py'")
    torchrun, bash, deepspeed = script.commands
    assert [w.value for w in torchrun.argv] == ["torchrun", "--nproc_per_node", "8", "train.py"]
    assert torchrun.wrappers == ("sudo", "nohup")
    assert [(a.name, a.value, a.how) for a in torchrun.prefix] == [("A", "1", "prefix")]
    assert bash.program == "bash" and deepspeed.program == "deepspeed"
    assert deepspeed.where.within == ("bash -c at line 1",)
    assert [w.raw for w in torchrun.words][:3] == ["sudo", "-E", "nohup"]  # prefix assignments are not words


def test_a_branch_that_may_not_run_gives_maybe_commands_and_alternatives() -> None:
    script = evaluate('if [ "$X" ]; then export A=1; python a.py; fi; python b.py')
    a, b = (c for c in script.commands if c.program == "python")
    assert a.maybe and not b.maybe
    (first, second) = b.environ["A"]
    assert first is not None and first.value == "1" and first.maybe
    assert second is None


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("echo x\n" * 200_000, "too large"),  # 1.4 MB: over MAX_BYTES, never parsed
        ("export A=1; echo $A\n" * 40_000, "too large"),  # under MAX_BYTES, over the step bound
        ("echo " + "$(" * 5_000 + "x" + ")" * 5_000, "too deep"),
        ("(" * 20_000 + "x" + ")" * 20_000, "too deep"),
        ("((" + "(" * 5_000 + "1" + ")" * 5_000 + "))", "too deep"),
        ("f() { f; }; f", "too deep"),
        ("bash -c " + "\"bash -c '" * 2 + "x", "parse error"),
        ("for a in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do " * 6 + "echo $a; " + "done; " * 6, "too large"),
    ],
)
def test_hostile_input_stops_at_a_bound_and_says_so(text: str, kind: str) -> None:
    script = evaluate(text)
    kinds = {u.kind for u in script.unknowns}
    assert kind in kinds or (kind == "too large" and "timeout" in kinds)
    assert script.complete == (kind == "parse error")


def test_a_value_doubling_without_end_becomes_unknown() -> None:
    script = evaluate("A=x\n" + "A=$A$A\n" * 40 + "export NCCL_IB_DISABLE=$A; python x.py")
    assert _env(script, "python")["NCCL_IB_DISABLE"] == [None]
    assert any(f"longer than {shell.MAX_VALUE:,}" in u for a in script.assignments for u in a.unknown)


def test_nested_shells_stop_at_the_nesting_bound() -> None:
    text = "eval " * (shell.MAX_NESTING + 2) + "x"  # each eval runs the next one's text
    assert {u.kind for u in evaluate(text).unknowns} == {"too deep"}


def test_a_shared_budget_is_spent_across_calls() -> None:
    budget = shell.Budget(steps=50)
    evaluate("echo a; echo b; echo c; echo d; echo e; echo f; echo g; echo h", budget=budget)
    assert not evaluate("echo x; echo y; echo z; echo w; echo v", budget=budget).complete


def test_a_parse_past_the_time_bound_is_unknown_not_an_error() -> None:
    """tree-sitter (0.25 and later) raises when the progress callback cancels a parse: a parse past the wall-time
    safety net (a loaded machine, a pathological text) is a "timeout" unknown, never a traceback."""
    text = "echo step\n" * 20_000 + "torchrun --nnodes 2 train.py\n"  # long enough for tree-sitter to ask
    script = evaluate(text, budget=shell.Budget(seconds=-1.0))
    assert not script.complete and {u.kind for u in script.unknowns} == {"timeout"}


@pytest.mark.parametrize("opener", ["$[[", "$(", "${"])
def test_thousands_of_unclosed_expansions_are_too_deep_before_parsing(opener: str) -> None:
    """tree-sitter's error recovery takes seconds on thousands of unclosed expansions: such a text is refused by
    a linear count of its expansions before it is parsed. Balanced expansions of ordinary depth parse as usual."""
    script = evaluate("python train.py " + opener * 20_000)
    assert not script.complete and [u.kind for u in script.unknowns] == ["too deep"]
    assert evaluate('echo "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"').complete


LOOPS = "for a in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do " * 4 + "echo $a; " + "done; " * 4
"""About 330 bytes of nested loops: 65,536 runs of the inner body, more than the whole step bound."""


@pytest.mark.parametrize(
    "construct",
    [
        LOOPS,
        f"X=$({LOOPS}); ",  # a command substitution that meets the bound
        f"while true; do {LOOPS}done; ",
        f"until false; do {LOOPS}done; ",
        f"if [ -n \"$Y\" ]; then {LOOPS}fi; ",
        f"f() {{ {LOOPS}}}; f; ",
    ],
    ids=["for", "substitution", "while", "until", "branch", "function"],
)
def test_a_bound_met_inside_a_construct_stops_it_not_the_rest_of_the_script(construct: str) -> None:
    """Issue 36: a loop that spends the step bound is left where it is; the static text after it is evaluated."""
    script = evaluate(construct + "export NCCL_IB_DISABLE=1; python train.py")
    assert _env(script, "python")["NCCL_IB_DISABLE"] == ["1"]
    assert not script.complete
    stopped = [u for u in script.unknowns if u.kind == "too large"]
    assert stopped and all(u.names is None and u.where.line == 1 for u in stopped)
    assert any(str(u).startswith("cannot tell: `for a in 1 2 3") and "evaluation steps)" in str(u) for u in stopped)


def test_what_a_stopped_loop_may_set_is_unknown_after_it() -> None:
    """Each variable the stopped loop can be seen to set may hold anything after it: an unknown value is one
    alternative, what it held the other; what the loop does not set keeps its value."""
    body = 'if [ "$a" = 16 ]; then NCCL_IB_DISABLE=1; fi; read R; '
    script = evaluate("export NCCL_IB_DISABLE=0 K=0\n" + LOOPS.replace("echo $a; ", body) + "\npython train.py")
    env = _env(script, "python")
    assert env["NCCL_IB_DISABLE"][0] is None and env["NCCL_IB_DISABLE"][1] in ("0", "1")
    assert env["K"] == ["0"]
    (python,) = (c for c in script.commands if c.program == "python")
    assert all(v is not None and v.maybe for v in python.environ["NCCL_IB_DISABLE"])
    assert script.variables.value("a") is None and script.variables.value("R") is None


def test_a_substitution_stopped_at_the_bound_is_an_unknown_value() -> None:
    script = evaluate(f"export NCCL_IB_DISABLE=$({LOOPS}echo 1); python train.py")
    assert _env(script, "python")["NCCL_IB_DISABLE"] == [None]


def test_straight_text_past_the_bound_still_stops_the_evaluation() -> None:
    """Only a construct has something after it to go on with: text that spends the bound by itself stops there."""
    # The wall-time safety net (5 s) is lifted so the step bound, the one under test, is what stops it on a
    # loaded machine too.
    script = evaluate("export A=1; echo $A\n" * 40_000 + "export NCCL_IB_DISABLE=1; python train.py",
                      budget=shell.Budget(seconds=600.0))
    assert not any(c.program == "python" for c in script.commands)
    assert [u.construct for u in script.unknowns if u.kind == "too large"] == ["more than 50,000 evaluation steps"]


def test_a_command_substitution_gives_every_statement_s_output() -> None:
    """``$(a; b)`` is what both print (it was the last one's alone): a loop stopped inside it makes it unknown."""
    assert evaluate('X="$(echo a; printf b)"').variables.value("X") == "a\nb"
    assert evaluate(f'X="$({LOOPS}echo 1)"').variables.value("X") is None
