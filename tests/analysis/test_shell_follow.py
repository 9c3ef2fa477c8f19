"""analysis/shell/: what bash follows beyond the text itself (issue 36 point 4): ``BASH_ENV``, scripts run or
sourced from the code folder or written by the text, ``busybox sh``, ``su -c``, ``xargs``, ``env -S``, brace
expansion, redirections of the last command of a list, writes after ``cd`` and through ``/proc/self/cwd``.

Each expectation is what bash 5.2 (and GNU env, util-linux su, GNU xargs) does with the text, checked by running
it; the tests compare the evaluator's view.
"""

from __future__ import annotations

import pytest

from analysis.shell import Script, evaluate
from analysis.shell.commands import split_string
from analysis.shell.words import MAX_BRACE

FILES = {"env.sh": "export NCCL_IB_DISABLE=1\n", "sub/run.sh": "#!/usr/bin/env bash\nexport A=2\npython x.py\n",
         "tool.py": "#!/usr/bin/python3\nprint(1)\n", "plain.sh": "export A=3\npython x.py\n"}


def _python_env(script: Script, name: str) -> list[str | None] | None:
    command = next(c for c in script.commands if c.program == "python")
    binding = command.environ.get(name)
    return None if binding is None else [v.value if v is not None else None for v in binding]


@pytest.mark.parametrize(
    ("text", "argv"),
    [
        ("python a{b,c}d {1..3} {01..03} {c..a} {1..10..4} {a..c..2}",
         ["python", "abd", "acd", "1", "2", "3", "01", "02", "03", "c", "b", "a", "1", "5", "9", "a", "c"]),
        ("python {a,b}{c,d} x{,y} {a,{b,c}}", ["python", "ac", "ad", "bc", "bd", "x", "xy", "a", "b", "c"]),
        ("python {a} {} \\{a,b} {x{a,b}", ["python", "{a}", "{}", "{a,b}", "{xa", "{xb"]),
        ("python a{b,\"c d\"}e NCCL_{IB_DISABLE,X}=1", ["python", "abe", "ac de", "NCCL_IB_DISABLE=1", "NCCL_X=1"]),
        ("X=Q; python ${X:-{a,b}} -{1..-1}", ["python", "Q}", "-1", "-0", "--1"]),
    ],
)
def test_brace_expansion_as_bash_does_it(text: str, argv: list[str]) -> None:
    assert [w.value for w in evaluate(text).commands[-1].argv] == argv


@pytest.mark.parametrize("word", ["{1..100000}", "{a,b}" * 9, "$X{a,b}"])
def test_a_brace_expansion_past_the_bound_or_after_a_name_is_unknown(word: str) -> None:
    """More than MAX_BRACE words, or ``$X{a,b}`` (bash expands braces first: ``$Xa $Xb``, which the expanded
    segments no longer show): one unknown word, never a wrong one."""
    argv = evaluate(f"X=1; python {word}").commands[-1].argv
    assert MAX_BRACE == 256 and [w.value for w in argv[1:]] == [None]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("export NCCL_{IB_DISABLE,X}=1; python x.py", ["1"]),
        ("env NCCL_{IB_DISABLE,X}=1 python x.py", ["1"]),
        ("NCCL_IB_DISABLE={1,2} python x.py", ["{1,2}"]),  # an assignment's value is not brace-expanded
    ],
)
def test_brace_expansion_of_names_reaches_the_environment(text: str, value: list[str]) -> None:
    assert _python_env(evaluate(text), "NCCL_IB_DISABLE") == value


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        ("BASH_ENV=./env.sh bash -c 'python x.py'", ["1"]),
        ("export BASH_ENV=env.sh; bash -c 'python x.py'", ["1"]),
        ("echo 'export NCCL_IB_DISABLE=2' > /tmp/e; BASH_ENV=/tmp/e bash -c 'python x.py'", ["2"]),
        ("BASH_ENV=./env.sh sh -c 'python x.py'", None),  # invoked as sh: no startup file
        ("BASH_ENV=./env.sh bash --posix -c 'python x.py'", None),
        ("BASH_ENV=./env.sh bash -o posix -c 'python x.py'", None),
        ("BASH_ENV=./env.sh bash -p -c 'python x.py'", None),  # privileged
        ("BASH_ENV=./env.sh POSIXLY_CORRECT=1 bash -c 'python x.py'", None),
        ("BASH_ENV=./env.sh bash -lc 'python x.py'", ["1"]),  # a non-interactive login shell reads it too
        ("BASH_ENV=./env.sh; bash -c 'python x.py'", None),  # not exported: not in bash's environment
    ],
)
def test_bash_env_is_sourced_by_a_non_interactive_bash(text: str, seen: list[str] | None) -> None:
    assert _python_env(evaluate(text, read_file=FILES.get), "NCCL_IB_DISABLE") == seen


def test_bash_env_of_the_environment_is_sourced_before_the_text_when_asked() -> None:
    script = evaluate("python x.py", environment={"BASH_ENV": "env.sh"}, read_file=FILES.get, startup=True)
    assert _python_env(script, "NCCL_IB_DISABLE") == ["1"]
    assert _python_env(evaluate("python x.py", environment={"BASH_ENV": "env.sh"}, read_file=FILES.get),
                       "NCCL_IB_DISABLE") is None


@pytest.mark.parametrize("value", ["./missing.sh", "/etc/profile.d/x.sh", "$HOME/x.sh"])
def test_a_bash_env_that_cannot_be_read_is_unknown(value: str) -> None:
    script = evaluate(f"BASH_ENV={value} bash -c 'python x.py'", read_file=FILES.get)
    assert "source" in [u.kind for u in script.unknowns if "BASH_ENV" in u.construct]


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        ("./sub/run.sh", ["2"]),  # #!/usr/bin/env bash
        ("./plain.sh", ["3"]),  # no #! line: bash runs it itself
        ("cd sub && ./run.sh", ["2"]),
        ("printf 'export A=4\\npython x.py\\n' > /tmp/s.sh; /tmp/s.sh", ["4"]),
    ],
)
def test_a_script_run_as_a_program_is_followed_when_asked(text: str, seen: list[str]) -> None:
    assert _python_env(evaluate(text, read_file=FILES.get, scripts=True), "A") == seen


def test_a_program_with_another_interpreter_is_not_read_as_a_script() -> None:
    script = evaluate("./tool.py", read_file=FILES.get, scripts=True)
    assert [c.program for c in script.commands] == ["./tool.py"]


@pytest.mark.parametrize(
    ("text", "seen", "home"),
    [
        ("busybox sh -c 'export NCCL_IB_DISABLE=1; python x.py'", ["1"], None),
        ("/bin/busybox env NCCL_IB_DISABLE=1 python x.py", ["1"], None),
        ("su -c 'NCCL_IB_DISABLE=1 python x.py'", ["1"], ["/root"]),
        ("su root -c 'NCCL_IB_DISABLE=1 python x.py'", ["1"], ["/root"]),
        ("su --command='NCCL_IB_DISABLE=1 python x.py' -m", ["1"], None),
        ("export NCCL_IB_DISABLE=1; su - -c 'python x.py'", None, ["/root"]),  # a login shell: environment cleared
        ("export NCCL_IB_DISABLE=1; su -c 'python x.py'", ["1"], ["/root"]),
        ("echo x.py | xargs -n 1 -P 2 env NCCL_IB_DISABLE=1 python", ["1"], None),
        ("env -S 'NCCL_IB_DISABLE=1 python x.py'", ["1"], None),
        ("env -S'NCCL_IB_DISABLE=\"1\" python' x.py", ["1"], None),
        ("env --split-string='-i NCCL_IB_DISABLE=1 python x.py'", ["1"], None),
    ],
)
def test_shells_and_wrappers_that_run_a_command(text: str, seen: list[str] | None, home: list[str] | None) -> None:
    script = evaluate(text)
    assert _python_env(script, "NCCL_IB_DISABLE") == seen
    if home is not None:
        assert _python_env(script, "HOME") == home


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("NCCL_IB_DISABLE=1 python train.py", ["NCCL_IB_DISABLE=1", "python", "train.py"]),
        ("A=\"x y\" b\\_c 'd\\'e' # f", ["A=x y", "b", "c", "d'e"]),
        ("a\\cb c", ["a"]),
        ("\"a\\_b\"\\tc", ["a b\tc"]),
        ("${X} y", None),
        ("$X y", None),
        ("'open", None),
        ("a\\qb", None),
    ],
)
def test_env_split_string_as_gnu_env_splits_it(text: str, words: list[str] | None) -> None:
    assert split_string(text) == words


@pytest.mark.parametrize(
    ("text", "path", "content"),
    [
        ("mkdir -p /tmp/x && echo A=1 > /tmp/x/f", "/tmp/x/f", "A=1\n"),
        ("true && false || echo B > g", "g", "B\n"),
        ("(cd /tmp && echo A=1 > .nccl.conf)", "/tmp/.nccl.conf", "A=1\n"),
        ("cd sub; echo A=1 > ../f", "f", "A=1\n"),
        ("cd /opt && echo A=1 > /proc/self/cwd/f", "/opt/f", "A=1\n"),
        ("echo A=1 | tee {/etc/nccl.conf,/dev/null}", "/etc/nccl.conf", "A=1\n"),
    ],
)
def test_where_a_write_lands(text: str, path: str, content: str) -> None:
    writes = {w.location(): w.content for w in evaluate(text).writes}
    assert writes.get(path) == content, writes


def test_a_write_from_an_unknown_directory_lands_nowhere_known() -> None:
    (write,) = evaluate("cd $DIR && echo A=1 > f").writes
    assert write.location() is None


def test_scripts_nested_past_the_bound_stop_inside_not_after() -> None:
    """Nine scripts each sourcing the next (bash follows them all) pass the nesting bound (8): exploring stops
    inside the chain, said once, and the statements after it are evaluated; what the chain set is unknown."""
    files = {f"c{i}.sh": f"export A=1\n. ./c{i + 1}.sh\n" for i in range(9)} | {"c9.sh": "export A=0\n"}
    script = evaluate(". ./c0.sh; B=1 python x.py", read_file=files.get)
    assert _python_env(script, "B") == ["1"]
    assert None in (_python_env(script, "A") or [])
    assert [u.kind for u in script.unknowns] == ["too deep"]
