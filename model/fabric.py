"""The interconnect settings a run's processes will see, and what NCCL, Open MPI and UCX make of them.

A multi-node run on an InfiniBand cluster can be switched to TCP by a handful of variables, set in
three places: the run's ``environment_variables``, its ``command`` (``export VAR=...``,
``VAR=... cmd``, ``env VAR=... cmd``), or the environment's image (a Dockerfile ``ENV``, or an
``/etc/nccl.conf`` the Dockerfile writes, which NCCL reads at start-up). :func:`from_command` and
:func:`from_dockerfile` find the assignments; :func:`judge` says what each does, by the libraries' own
rules (sources in docs/infiniband.md):

* NCCL reads integer parameters with ``strtoll(value, NULL, 0)`` (src/misc/param.cc): ``"0x1"``,
  ``"2"``, ``"010"`` and ``" 1"`` are non-zero and disable InfiniBand; ``"true"``, ``"yes"`` parse as 0
  and change nothing; a value out of range falls back to the default (0).
* ``NCCL_IB_HCA`` is a list of name prefixes (``=`` for exact names, a leading ``^`` to exclude;
  src/transport/net_ib/init.cc): ``^mlx5`` excludes every Mellanox HCA, which are all Azure has.
* ``NCCL_NET`` names the network NCCL uses, case-insensitively: ``Socket`` is TCP. (``NCCL_NET_PLUGIN``
  only names external plugin libraries; the internal InfiniBand transport stays available.)
* Open MPI carries InfiniBand through the ``ucx`` PML only (v5 has no ``openib`` BTL):
  ``OMPI_MCA_pml=ob1`` or ``^ucx`` leaves MPI traffic on TCP. ``OMPI_MCA_btl`` without an InfiniBand
  BTL matters only when Open MPI falls back to ``ob1`` (an image without UCX): "cannot tell".
* ``UCX_TLS`` without an ``rc`` or ``dc`` transport (or ``ib``/``all``) keeps UCX off InfiniBand's
  connected transports.

A value the gate cannot resolve (``$VAR`` in a shell command or a Dockerfile) is "cannot tell".
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

WATCHED = ("NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_NET", "OMPI_MCA_pml", "OMPI_MCA_btl", "UCX_TLS")
"""The variables that can take a run off InfiniBand."""

Effect = Literal["off", "no effect", "cannot tell"]


@dataclass(frozen=True, order=True)
class Setting:
    """One assignment of a watched variable, and where it was found."""

    name: str
    value: str
    where: str
    """``environment_variables``, ``the command``, ``Dockerfile ENV`` or ``/etc/nccl.conf (Dockerfile)``."""
    resolved: bool = True
    """False when the value comes through shell or Docker expansion the gate cannot follow (``$VAR``)."""


_NAMES = "|".join(WATCHED)
_ASSIGNMENT = re.compile(
    rf"(?<![\w$])(?P<name>{_NAMES})=(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?P<bare>[^\s;&|)`'\"]*))"
)


def _assignments(text: str, where: str, *, expands: bool) -> list[Setting]:
    out = []
    for m in _ASSIGNMENT.finditer(text):
        single = m.group("sq") is not None
        value = m.group("sq") if single else m.group("dq") if m.group("dq") is not None else m.group("bare")
        unresolved = expands and not single and ("$" in value or "`" in value)
        out.append(Setting(m.group("name"), value, where, resolved=not unresolved))
    return out


def from_environment(variables: dict[str, str]) -> list[Setting]:
    """Watched variables among a run's ``environment_variables`` (values are literal: no expansion)."""
    return [Setting(k, str(v), "environment_variables") for k, v in sorted(variables.items()) if k in WATCHED]


def from_command(command: str) -> list[Setting]:
    """Assignments in a shell command: ``export VAR=v``, ``VAR=v cmd``, ``env VAR=v cmd``."""
    return _assignments(command, "the command", expands=True)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current:
        lines.append(current)
    return lines


def _env_instruction(args: str) -> list[tuple[str, str, bool]]:
    """``ENV`` arguments as (name, value, single-quoted): ``A=1 B="x y"`` or the legacy ``A value``."""
    if "=" not in args.split(None, 1)[0]:
        name, _, value = args.partition(" ")
        return [(name, value.strip(), False)]
    try:
        tokens = shlex.split(args, posix=True)
    except ValueError:
        tokens = args.split()
    single = {m.group(1) for m in re.finditer(r"(\w+)='", args)}
    return [(n, v, n in single) for n, _, v in (t.partition("=") for t in tokens)]


def from_dockerfile(text: str, context: Path | None = None) -> list[Setting]:
    """Watched variables a Dockerfile bakes into the image: ``ENV`` instructions, and ``/etc/nccl.conf``
    lines a ``RUN`` writes or a ``COPY``/``ADD`` puts there (read from ``context``, never outside it)."""
    out: list[Setting] = []
    for line in _logical_lines(text):
        instruction, _, args = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "ENV":
            for name, value, single in _env_instruction(args.strip()):
                if name in WATCHED:
                    out.append(Setting(name, value, "Dockerfile ENV", resolved=single or "$" not in value))
        elif instruction == "RUN" and "nccl.conf" in args:
            out += _assignments(args, "/etc/nccl.conf (Dockerfile RUN)", expands=True)
        elif instruction in ("COPY", "ADD") and context is not None:
            parts = [p for p in args.split() if not p.startswith("--")]
            if len(parts) >= 2 and parts[-1].rstrip("/") in ("/etc/nccl.conf", "/etc"):
                for source in parts[:-1]:
                    out += _conf_file(context, source, parts[-1])
    return out


def _conf_file(context: Path, source: str, target: str) -> list[Setting]:
    base = context.resolve()
    path = (base / source).resolve()  # links followed: a file outside the build context is never read
    if target.rstrip("/") == "/etc" and path.name != "nccl.conf":
        return []
    if base not in path.parents or not path.is_file():
        return []
    try:
        with path.open("rb") as handle:
            text = handle.read(65536).decode("utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():  # NCCL's own format: NAME=value per line, no quoting, no expansion
        name, sep, value = line.strip().partition("=")
        if sep and name in WATCHED:
            out.append(Setting(name, value, f"/etc/nccl.conf (COPY {source})"))
    return out


_STRTOLL = re.compile(r"^\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_LLONG = 2**63


def strtoll(value: str) -> int:
    """C's ``strtoll(value, NULL, 0)``: base from the prefix (0x hex, 0 octal), the longest valid prefix
    read, 0 when nothing is; out of range is reported by NCCL as invalid, so the default (0) applies."""
    m = _STRTOLL.match(value)
    if not m:
        return 0
    digits = m.group(2)
    base = 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") else 10
    number = int(digits, base)
    number = -number if m.group(1) == "-" else number
    return number if -_LLONG <= number < _LLONG else 0


_UCX_CONNECTED = ("rc", "dc")
_UCX_IB_ALIASES = ("ib", "all")


def _ucx_transport_ok(name: str) -> bool:
    return name in _UCX_IB_ALIASES or name.startswith(_UCX_CONNECTED)


def judge(setting: Setting) -> tuple[Effect, str] | None:
    """What ``setting`` does to InfiniBand: ``("off", why)`` when it takes the run off (or degrades it),
    ``("no effect", why)`` for a spelling that looks like it would but does not, ``("cannot tell", why)``
    for an unresolved value; None when it leaves InfiniBand alone."""
    label = f"{setting.name}={setting.value!r} ({setting.where})"
    if not setting.resolved:
        return "cannot tell", f"{label}: the value is only known at run time; check it leaves InfiniBand on"
    value = setting.value.strip()
    if setting.name == "NCCL_IB_DISABLE":
        number = strtoll(value)
        if number != 0:
            return "off", f"{label} disables InfiniBand (NCCL reads it as {number})"
        if value and not re.fullmatch(r"[+-]?0+|[+-]?0[xX]0+", value):
            return "no effect", f"{label} has no effect: NCCL reads it as 0, so InfiniBand stays on"
        return None
    if setting.name == "NCCL_IB_HCA":
        return _judge_hca(label, value)
    if setting.name == "NCCL_NET" and value.lower() == "socket":
        return "off", f"{label} makes NCCL use TCP sockets instead of InfiniBand"
    if setting.name == "OMPI_MCA_pml":
        chosen = [p.strip() for p in value.lstrip("^").split(",") if p.strip()]
        excluded = value.startswith("^")
        if (excluded and "ucx" in chosen) or (not excluded and chosen and "ucx" not in chosen):
            return "off", f"{label} keeps Open MPI off its UCX PML, its only InfiniBand path: MPI traffic goes over TCP"
        return None
    if setting.name == "OMPI_MCA_btl" and not value.startswith("^"):
        btls = {b.strip() for b in value.split(",") if b.strip()}
        if btls and not btls & {"openib", "uct", "ofi"}:
            return "cannot tell", (f"{label} leaves Open MPI no InfiniBand BTL: no effect while it uses its UCX "
                                   "PML (the default where the image's Open MPI has UCX), TCP if it falls back to ob1")
        return None
    if setting.name == "UCX_TLS":
        transports = [t.strip().lower() for t in value.lstrip("^").split(",") if t.strip()]
        if value.startswith("^"):
            gone = set(transports)
            rc_gone = bool(gone & {"rc", "ib"}) or ({"rc_v", "rc_verbs"} & gone and {"rc_x", "rc_mlx5"} & gone)
            dc_gone = bool(gone & {"dc", "dc_x", "dc_mlx5", "ib"})
            off = bool(rc_gone and dc_gone)
        else:
            off = bool(transports) and not any(_ucx_transport_ok(t) for t in transports)
        if off:
            return "off", f"{label} leaves UCX no InfiniBand connected transport (rc or dc)"
    return None


def _judge_hca(label: str, value: str) -> tuple[Effect, str] | None:
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    entries = [e.split(":")[0].strip() for e in (rest[1:] if exact else rest).split(",") if e.strip()]
    if not entries:
        return None

    def matches_every_mlx5(entry: str) -> bool:  # a prefix every mlx5_* device name starts with
        return not exact and "mlx5_".startswith(entry)

    def could_match_mlx5(entry: str) -> bool:
        return entry.startswith("mlx5") or matches_every_mlx5(entry)

    if exclude and any(matches_every_mlx5(e) for e in entries):
        return "off", f"{label} excludes every Mellanox (mlx5) HCA, all the InfiniBand adapters Azure has"
    if not exclude and not any(could_match_mlx5(e) for e in entries):
        return "off", f"{label} selects no Mellanox (mlx5) HCA, the only InfiniBand adapters Azure has"
    return None
