"""InfiniBand switched off by any spelling: an attack corpus, one table per class, with look-alikes.

Each row is a way a multi-node run on an InfiniBand cluster can end up on TCP (``off``: mandatory), a
spelling that looks like it would but does not (``no effect``: advisory), one that cannot be told before
the run (``cannot tell``: advisory, naming the construct), or a benign look-alike (``None``: nothing).
What a spelling does follows the libraries' own code: NCCL (NVIDIA/nccl at
5067397c2676d5aed50042fc39e5c8ee96eb0027: ``strtoll(value, NULL, 0)`` and the configuration files in
src/misc/param.cc, NCCL_IB_HCA matching in src/transport/net_ib/init.cc and src/misc/utils.cc, the
internal IB plugin always added in src/plugin/net.cc), Open MPI (open-mpi/ompi
opal/mca/base/mca_base_var.c and docs/mca.rst: parameter files below the environment, the override file
above it), UCX (openucx/ucx src/ucp/core/ucp_context.c: ``UCX_NET_DEVICES``). How bash evaluates the
commands is :mod:`analysis.shell`'s (tests/analysis/test_shell.py checks it against bash).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis import interconnect
from analysis.interconnect import Setting, assess, judge, strtoll
from jobs.resolve import resolve_all
from policies.rules.fabric import run_infiniband_disabled, run_infiniband_setting_unclear
from stack.config import from_stackfile
from stack.stackfile import read
from tests.conftest import dev_config, make_project
from tests.policies.test_baseline import Baseline, baseline

RUN = "ddp-per-process"  # 2 nodes of Standard_ND96asr_v4 (InfiniBand) in the baseline


def _effect(command: str = "python train.py", *, variables: dict[str, str] | None = None,
            docker_args: str | None = None, image: interconnect.Baked | None = None) -> str | None:
    """The strongest effect among the findings: off > cannot tell > no effect > None."""
    findings = assess(command, variables=variables or {}, docker_args=docker_args, image=image or interconnect.Baked())
    effects = {f.effect for f in findings}
    return next((e for e in ("off", "cannot tell", "no effect") if e in effects), None)


@pytest.mark.parametrize(
    ("value", "number"),
    [("1", 1), ("0x1", 1), ("0X10", 16), ("2", 2), ("010", 8), (" 1", 1), ("-1", -1), ("1abc", 1), ("+3", 3),
     ("true", 0), ("yes", 0), ("", 0), ("0", 0), ("0x", 0), ("08", 0), ("99999999999999999999", 0), ('"1"', 0)],
)
def test_strtoll_reads_integers_as_nccl_does(value: str, number: int) -> None:
    assert strtoll(value) == number


@pytest.mark.parametrize(
    ("name", "value", "effect"),
    [
        ("NCCL_IB_DISABLE", "1", "off"),
        ("NCCL_IB_DISABLE", "0x1", "off"),
        ("NCCL_IB_DISABLE", "2", "off"),
        ("NCCL_IB_DISABLE", "010", "off"),
        ("NCCL_IB_DISABLE", " 1", "off"),
        ("NCCL_IB_DISABLE", "true", "no effect"),
        ("NCCL_IB_DISABLE", "yes", "no effect"),
        ("NCCL_IB_DISABLE", "$IB_OFF", "no effect"),  # environment_variables are literal: "$IB_OFF" reads as 0
        ("NCCL_IB_DISABLE", "0", None),
        ("NCCL_IB_DISABLE", "0x0", None),
        ("NCCL_IB_HCA", "^mlx5", "off"),
        ("NCCL_IB_HCA", "^mlx", "off"),
        ("NCCL_IB_HCA", "^mlx5_", "off"),
        ("NCCL_IB_HCA", "^mlx5:1", "off"),
        ("NCCL_IB_HCA", "=mlx5", "off"),  # exact: no device is named just "mlx5"
        ("NCCL_IB_HCA", "=ib0", "off"),
        ("NCCL_IB_HCA", " mlx5", "off"),  # nothing is trimmed: no device name starts with a space
        ("NCCL_IB_HCA", "mlx5_0:2", "off"),  # Azure's InfiniBand functions have port 1 only
        ("NCCL_IB_HCA", "=^mlx5", "off"),  # ^ counts only first: an exact name "^mlx5"
        ("NCCL_IB_HCA", "^mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7", "cannot tell"),
        ("NCCL_IB_HCA", "^mlx5_1", None),  # one device out, the others stay
        ("NCCL_IB_HCA", "^=mlx5_0", None),
        ("NCCL_IB_HCA", "^=mlx5", None),  # excludes a name no device has
        ("NCCL_IB_HCA", "mlx5", None),
        ("NCCL_IB_HCA", "mlx", None),
        ("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1", None),
        ("NCCL_IB_HCA", "=mlx5_ib0,mlx5_ib1", None),
        ("NCCL_IB_HCA", ",,mlx5", None),
        ("NCCL_NET", "Socket", "off"),
        ("NCCL_NET", "socket", "off"),
        ("NCCL_NET", "SOCKET", "off"),
        ("NCCL_NET", "IB", None),
        ("NCCL_NET_PLUGIN", "none", None),  # the internal IB transport is always added
        ("OMPI_MCA_pml", "ob1", "off"),
        ("OMPI_MCA_pml", "^ucx", "off"),
        ("OMPI_MCA_pml", "ucx", None),
        ("OMPI_MCA_btl", "tcp,self,vader", "cannot tell"),
        ("OMPI_MCA_btl", "^openib", None),
        ("UCX_TLS", "tcp", "off"),
        ("UCX_TLS", "ud,sm,self", "off"),  # datagrams only: no connected transport
        ("UCX_TLS", "rc,sm,self", None),
        ("UCX_TLS", "dc_x,self", None),
        ("UCX_TLS", "all", None),
        ("UCX_TLS", "^rc", None),  # dc is still there
        ("UCX_TLS", "^rc,dc", "off"),
        ("UCX_NET_DEVICES", "eth0", "off"),
        ("UCX_NET_DEVICES", "eth0,ib0", "off"),  # ib0 is IPoIB: TCP over the fabric, not RDMA
        ("UCX_NET_DEVICES", "mlx5_0:1", None),
        ("UCX_NET_DEVICES", "all", None),
    ],
)
def test_what_each_value_does(name: str, value: str, effect: str | None) -> None:
    verdict = judge(Setting(name, value, "environment_variables"))
    assert (verdict[0] if verdict else None) == effect


def test_an_unresolved_or_maybe_value_cannot_be_told() -> None:
    assert judge(Setting("NCCL_IB_DISABLE", "$IB_OFF", "the command", resolved=False))[0] == "cannot tell"  # type: ignore[index]
    assert judge(Setting("NCCL_IB_DISABLE", "1", "the command", maybe=True))[0] == "cannot tell"  # type: ignore[index]


# ---- the command: comments, quoting, split names --------------------------------------------------


@pytest.mark.parametrize(
    ("command", "effect"),
    [
        ('export NCCL_IB_DISABLE="1" # NCCL_IB_DISABLE=0\npython train.py', "off"),
        ("export NCCL_IB_DISABLE=1 # NCCL_IB_DISABLE=0\npython train.py", "off"),
        ('export "NCCL_IB_DISABLE"=1; python train.py', "off"),
        ("export NCCL_IB_DIS''ABLE=1; python train.py", "off"),
        ('export NCCL_"IB"_DISABLE=1; python train.py', "off"),
        ("export NCCL_IB_DISABLE=\\1; python train.py", "off"),
        ("export NCCL_IB_DISABLE=$'\\x31'; python train.py", "off"),
        ("export NCCL_IB_\\\nDISABLE=1; python train.py", "off"),
        ("export NCCL_NET=Soc'ket'; torchrun train.py", "off"),
        ("V=IB_DISABLE; export NCCL_$V=1; python train.py", "off"),
        ("export NCCL_IB_DISABLE=${X:-1}; python train.py", "cannot tell"),  # the image may set X
        # look-alikes
        ("echo 'export NCCL_IB_DISABLE=1'; python train.py", None),
        ("# export NCCL_IB_DISABLE=1\npython train.py", None),
        ("python train.py --nccl_ib_disable=1 NCCL_IB_DISABLE=1", None),
        ("export MY_NCCL_IB_DISABLE=1; python train.py", None),
        ("echo $MY_NCCL_IB_DISABLE=1; python train.py", None),
        ("export NCCL_IB_DISABLE=1 && unset NCCL_IB_DISABLE; python train.py", None),
        ("cat <<EOF > notes.txt\nNCCL_IB_DISABLE=1\nEOF\npython train.py", None),
        ("export NCCL_IB_DISABLE=0 # =1\npython train.py", None),
    ],
)
def test_comments_quotes_and_split_names(command: str, effect: str | None) -> None:
    assert _effect(command) == effect


# ---- the command: shell constructs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "effect"),
    [
        ("export NCCL_IB_DISABLE=; NCCL_IB_DISABLE+=1; python train.py", "off"),
        ("printf -v NCCL_IB_DISABLE %d 1; export NCCL_IB_DISABLE; python train.py", "off"),
        ("declare -x NCCL_IB_DISABLE=1; python train.py", "off"),
        ("typeset -x NCCL_NET=Socket; python train.py", "off"),
        ("declare -n R=NCCL_IB_DISABLE; R=1; export R; python train.py", "off"),
        ("set -a; NCCL_IB_DISABLE=1; python train.py", "off"),
        ("env NCCL_IB_DISABLE=1 python train.py", "off"),
        ("NCCL_IB_DISABLE=1 nohup python train.py", "off"),
        ("sudo -E env NCCL_NET=Socket torchrun train.py", "off"),
        ("{ export NCCL_IB_DISABLE=1; }; python train.py", "off"),
        ("f() { export NCCL_IB_DISABLE=1; }; f; python train.py", "off"),
        ("bash -c 'NCCL_IB_DISABLE=1 python train.py'", "off"),
        ("sh -c \"export NCCL_NET=Socket && exec torchrun train.py\"", "off"),
        ("bash -c 'export NCCL_IB_DISABLE=$1; python train.py' _ 1", "off"),
        ("eval export NCCL_IB_DISABLE=1; python train.py", "off"),
        ('eval "$(echo ZXhwb3J0IE5DQ0xfSUJfRElTQUJMRT0x | base64 -d)"; python train.py', "off"),
        ("export NCCL_IB_DISABLE=$(echo 1); python train.py", "off"),
        ("bash <<'EOF'\nexport NCCL_IB_DISABLE=1\npython train.py\nEOF", "off"),
        ("cd src && export NCCL_IB_DISABLE=1 && python train.py", "off"),
        ("if true; then export NCCL_IB_DISABLE=1; fi; python train.py", "off"),
        # what cannot be evaluated: named, advisory
        ("read NCCL_IB_DISABLE < flag; export NCCL_IB_DISABLE; python train.py", "cannot tell"),
        ("source env.sh; python train.py", "cannot tell"),
        (". ./env.sh && python train.py", "cannot tell"),
        ('eval "$EXTRA"; python train.py', "cannot tell"),
        ('eval "$(curl -s https://example.invalid/x | base64 -d)"; python train.py', "cannot tell"),
        ("curl -s https://example.invalid/x | bash; python train.py", "cannot tell"),
        ("export NCCL_IB_DISABLE=$(cat flag); python train.py", "cannot tell"),
        ('if [ "$NODE_RANK" = 0 ]; then export NCCL_IB_DISABLE=1; fi; python train.py', "cannot tell"),
        ("ls /data || export NCCL_NET=Socket; python train.py", "cannot tell"),
        # look-alikes
        ("(export NCCL_IB_DISABLE=1); python train.py", None),
        ("export NCCL_IB_DISABLE=1 | cat; python train.py", None),
        ("f() { export NCCL_IB_DISABLE=1; }; python train.py", None),
        ("false && export NCCL_IB_DISABLE=1; python train.py", None),
        ("NCCL_IB_DISABLE=1 echo checking; python train.py", None),
        ("bash -c 'export NCCL_IB_DISABLE=1'; python train.py", None),
        ("python train.py; export NCCL_IB_DISABLE=1", None),
        ("exec python train.py; export NCCL_IB_DISABLE=1; python again.py", None),
    ],
)
def test_shell_constructs(command: str, effect: str | None) -> None:
    assert _effect(command) == effect


def test_what_cannot_be_told_names_the_construct_and_its_line() -> None:
    findings = assess("cd src\nsource env.sh\npython train.py", variables={})
    assert [f.message for f in findings] == [
        "cannot tell: `source env.sh` at line 2 of the command: what it sets or runs is not known before the run"]


@pytest.mark.parametrize(
    ("command", "variables", "effect"),
    [
        ("python train.py", {"NCCL_IB_DISABLE": "1"}, "off"),
        ("env -u NCCL_IB_DISABLE python train.py", {"NCCL_IB_DISABLE": "1"}, None),
        ("unset NCCL_IB_DISABLE; python train.py", {"NCCL_IB_DISABLE": "1"}, None),
        ("env -i PATH=/usr/bin python train.py", {"NCCL_NET": "Socket"}, None),
        ("export NCCL_IB_DISABLE=0; python train.py", {"NCCL_IB_DISABLE": "1"}, None),
        ("export NCCL_IB_DISABLE=$FLAG; python train.py", {"FLAG": "1"}, "off"),
        ("export NCCL_IB_DISABLE=${{inputs.flag}}; python train.py", {}, "cannot tell"),
    ],
)
def test_the_command_evaluated_over_the_run_s_variables(command: str, variables: dict[str, str],
                                                        effect: str | None) -> None:
    assert _effect(command, variables=variables) == effect


# ---- docker_args -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("docker_args", "effect"),
    [
        ("-e NCCL_IB_DISABLE=1", "off"),
        ("--env NCCL_IB_DISABLE=1", "off"),
        ("--env=NCCL_NET=Socket", "off"),
        ("-eNCCL_IB_DISABLE=1", "off"),
        ("--shm-size 16g -e 'UCX_TLS=tcp,self'", "off"),
        ("--env-file /tmp/env.list", "cannot tell"),
        ("-e NCCL_IB_DISABLE", "cannot tell"),
        ("-e NCCL_DEBUG=INFO --shm-size=16g", None),
        ("-e NCCL_IB_DISABLE=0", None),
        ("--ipc host", None),
    ],
)
def test_docker_args(docker_args: str, effect: str | None) -> None:
    assert _effect(docker_args=docker_args) == effect


def test_docker_args_and_variables_that_disagree_cannot_be_told() -> None:
    assert _effect(variables={"NCCL_IB_DISABLE": "0"}, docker_args="-e NCCL_IB_DISABLE=1") == "off"
    findings = assess("python train.py", variables={"NCCL_IB_DISABLE": "0"}, docker_args="-e NCCL_IB_DISABLE=1")
    assert any("which one the container gets is not documented" in f.message for f in findings)


# ---- NCCL's configuration files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "variables", "effect"),
    [
        ("echo NCCL_IB_DISABLE=1 > ~/.nccl.conf; python train.py", {}, "off"),
        ("echo NCCL_NET=Socket >> /etc/nccl.conf && torchrun train.py", {}, "off"),
        ("printf 'NCCL_DEBUG=INFO\\nNCCL_IB_HCA=^mlx5\\n' > $HOME/.nccl.conf; python train.py", {}, "off"),
        ("cat > /etc/nccl.conf <<EOF\n# tuned\nNCCL_IB_DISABLE=1\nEOF\npython train.py", {}, "off"),
        ("export NCCL_CONF_FILE=/tmp/n.conf; echo NCCL_NET=Socket > /tmp/n.conf; python train.py", {}, "off"),
        ("echo NCCL_NET=Socket | tee /etc/nccl.conf; python train.py", {}, "off"),
        ("echo 'NCCL_IB_DISABLE=\"1\"' > ~/.nccl.conf; python train.py", {}, "no effect"),  # the value is '"1"'
        ("export NCCL_CONF_FILE=conf/nccl.conf; python train.py", {}, "cannot tell"),
        ("cp conf/nccl.conf /etc/nccl.conf; python train.py", {}, "cannot tell"),
        # look-alikes
        ("echo NCCL_IB_DISABLE=1 > /etc/nccl.conf; python train.py", {"NCCL_IB_DISABLE": "0"}, None),  # env wins
        ("echo ' NCCL_IB_DISABLE=1' > /etc/nccl.conf; python train.py", {}, None),  # the name has a space
        ("echo '#NCCL_IB_DISABLE=1' > /etc/nccl.conf; python train.py", {}, None),
        ("echo NCCL_NET=Socket > /tmp/n.conf; python train.py", {}, None),  # no NCCL_CONF_FILE names it
        ("export NCCL_CONF_FILE=/tmp/n.conf; echo NCCL_NET=Socket > ~/.nccl.conf; python train.py", {}, None),
        ("python train.py; echo NCCL_NET=Socket > /etc/nccl.conf", {}, None),  # written after the run started
        ("printf 'NCCL_NET=IB\\nNCCL_NET=Socket\\n' > /etc/nccl.conf; python train.py", {}, None),  # first wins
        ("echo NCCL_NET=IB > ~/.nccl.conf; echo NCCL_NET=Socket > /etc/nccl.conf; python train.py", {}, None),
    ],
)
def test_nccl_configuration_files(command: str, variables: dict[str, str], effect: str | None) -> None:
    assert _effect(command, variables=variables) == effect


# ---- Open MPI and UCX -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "variables", "effect"),
    [
        ("mpirun --mca pml ob1 python train.py", {}, "off"),
        ("mpirun -mca pml ^ucx -np 16 python train.py", {}, "off"),
        ("mpirun -x NCCL_IB_DISABLE=1 python train.py", {}, "off"),
        ("mpirun -x UCX_NET_DEVICES=eth0 python train.py", {}, "off"),
        ("mpirun --mca pml ob1 python train.py", {"OMPI_MCA_pml": "ucx"}, "off"),  # the command line wins
        ("echo 'pml = ob1' > /usr/local/etc/openmpi-mca-params.conf; mpirun python train.py", {}, "off"),
        ("mkdir -p ~/.openmpi; echo pml=ob1 >> ~/.openmpi/mca-params.conf; python train.py", {}, "off"),
        ("export OMPI_MCA_mca_base_param_files=/tmp/p.conf; echo pml=ob1 > /tmp/p.conf; mpirun python t.py", {},
         "off"),
        ("echo pml=ob1 > /etc/openmpi-mca-params-override.conf; python train.py", {"OMPI_MCA_pml": "ucx"}, "off"),
        ("mpirun --tune tuned.conf python train.py", {}, "cannot tell"),
        ("export UCX_TLS=tcp,sm; python train.py", {}, "off"),
        ("python train.py", {"UCX_NET_DEVICES": "eth0"}, "off"),
        # look-alikes
        ("echo pml=ob1 > /etc/openmpi-mca-params.conf; python train.py", {"OMPI_MCA_pml": "ucx"}, None),
        ("export OMPI_MCA_mca_base_param_files=none; echo pml=ob1 > ~/.openmpi/mca-params.conf; python t.py", {},
         None),
        ("echo '# pml = ob1' > /etc/openmpi-mca-params.conf; python train.py", {}, None),
        ("mpirun -x NCCL_DEBUG=INFO --mca btl_tcp_if_include eth0 python train.py", {}, None),
        ("python train.py", {"UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1"}, None),
    ],
)
def test_open_mpi_and_ucx(command: str, variables: dict[str, str], effect: str | None) -> None:
    assert _effect(command, variables=variables) == effect


# ---- Dockerfiles -----------------------------------------------------------------------------------

BASE = "FROM mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20240701.v1\n"


@pytest.mark.parametrize(
    ("dockerfile", "effect"),
    [
        (BASE + "ENV NCCL_IB_DISABLE=2 OTHER=x\n", "off"),
        (BASE + "ENV NCCL_NET Socket\n", "off"),
        ("# escape=`\n" + BASE + "ENV OTHER=x `\n    NCCL_IB_DISABLE=1\n", "off"),
        (BASE + "ENV OTHER=x \\\n    # a comment inside the continuation\n    NCCL_IB_DISABLE=1\n", "off"),
        (BASE + "ARG IB=1\nENV NCCL_IB_DISABLE=${IB:-0}\n", "off"),
        (BASE + "RUN echo 'OMPI_MCA_pml=ob1' > /dev/null && echo NCCL_NET=Socket >> /etc/nccl.conf\n", "off"),
        (BASE + "RUN <<EOF\nset -e\necho NCCL_IB_DISABLE=1 > /etc/nccl.conf\nEOF\n", "off"),
        (BASE + "RUN cat <<EOF > /etc/nccl.conf\nNCCL_IB_HCA=^mlx5\nEOF\n", "off"),
        (BASE + "COPY <<EOF /etc/nccl.conf\nNCCL_IB_DISABLE=1\nEOF\n", "off"),
        (BASE + "COPY <<EOF /etc/openmpi-mca-params.conf\npml = ob1\nEOF\n", "off"),
        (BASE + "RUN echo NCCL_NET=Socket > ~/.nccl.conf\n", "off"),
        (BASE + "ENV NCCL_CONF_FILE=/opt/n.conf\nRUN echo NCCL_NET=Socket > /opt/n.conf\n", "off"),
        (BASE + "RUN eval \"$(echo ZWNobyBOQ0NMX05FVD1Tb2NrZXQgPiAvZXRjL25jY2wuY29uZg== | base64 -d)\"\n", "off"),
        (BASE + "ENV UCX_TLS=${TLS}\n", "cannot tell"),
        (BASE + "RUN eval \"$SETUP\"\n", "cannot tell"),
        # look-alikes
        (BASE + "RUN NCCL_IB_DISABLE=1 python -c 'print(1)'\n", None),  # a build-time prefix: not baked
        (BASE + "RUN export NCCL_IB_DISABLE=1\n", None),  # RUN's environment ends with the RUN
        (BASE + "ENV NCCL_IB_DISABLE=0\n", None),
        (BASE + "RUN echo NCCL_IB_DISABLE=1 > /tmp/notes.txt\n", None),
        (BASE + "ENV NCCL_IB_DISABLE=1\nFROM ubuntu:22.04\n", None),  # an earlier stage
        (BASE + "RUN source /opt/conda/etc/profile.d/conda.sh && conda activate base\n", None),
    ],
)
def test_dockerfiles(dockerfile: str, effect: str | None) -> None:
    assert _effect(image=interconnect.baked(dockerfile, None)) == effect


@pytest.mark.parametrize(
    ("dockerfile", "variables", "command", "effect"),
    [
        # bash reads $BASH_ENV before the command (bash manual, "Bash Startup Files"): what it exports is seen
        (BASE + "RUN echo 'export NCCL_IB_DISABLE=1' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n", {}, "", "off"),
        (BASE + "COPY <<EOF /etc/ib.sh\nexport NCCL_NET=Socket\nEOF\nENV BASH_ENV=/etc/ib.sh\n", {}, "", "off"),
        # it runs after the environment is set: it beats environment_variables, and the command beats it
        (BASE + "RUN echo 'export NCCL_IB_DISABLE=1' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n",
         {"NCCL_IB_DISABLE": "0"}, "", "off"),
        (BASE + "RUN echo 'export NCCL_IB_DISABLE=1' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n", {},
         "export NCCL_IB_DISABLE=0;", None),
        # the file sees the process's environment
        (BASE + "RUN echo 'export NCCL_IB_DISABLE=${IB:-0}' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n",
         {"IB": "1"}, "", "off"),
        # the run may name the file too: a file of the image the image's own ENV does not name is not kept
        (BASE + "RUN echo 'export UCX_TLS=tcp' > /etc/ib.sh\n", {"BASH_ENV": "/etc/ib.sh"}, "", "cannot tell"),
        (BASE + "RUN echo 'export UCX_TLS=tcp' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n", {"BASH_ENV": "/etc/ib.sh"},
         "", "off"),
        # what cannot be told
        (BASE + "ENV BASH_ENV=/etc/from-the-base.sh\n", {}, "", "cannot tell"),
        (BASE + "ENV BASH_ENV=$HOME/.env\n", {}, "", "cannot tell"),
        (BASE + "RUN echo 'export NCCL_IB_DISABLE=1' > /etc/ib.sh\n", {"BASH_ENV": "$HOME/ib.sh"}, "",
         "cannot tell"),
        (BASE + "RUN echo 'export NCCL_IB_DISABLE=1' > /etc/ib.sh\n", {"BASH_ENV": "ib.sh"}, "", "cannot tell"),
        (BASE + "RUN echo 'if [ -n \"$X\" ]; then export NCCL_IB_DISABLE=1; fi' > /etc/ib.sh\n"
         "ENV BASH_ENV=/etc/ib.sh\n", {}, "", "cannot tell"),
        (BASE + "RUN echo 'eval \"$SETUP\"' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n", {}, "", "cannot tell"),
        # look-alikes: not exported, unset, a file nothing reads, BASH_ENV empty
        (BASE + "RUN echo 'NCCL_IB_DISABLE=1' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n", {}, "", None),
        (BASE + "ENV NCCL_IB_DISABLE=1\nRUN echo 'unset NCCL_IB_DISABLE' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n",
         {}, "", None),
        (BASE + "RUN echo 'export NCCL_IB_DISABLE=1' > /etc/ib.sh\n", {}, "", None),
        (BASE + "RUN echo 'export NCCL_IB_DISABLE=1' > /etc/ib.sh\nENV BASH_ENV=\n", {}, "", None),
    ],
)
def test_bash_env_names_a_file_bash_reads_before_the_command(dockerfile: str, variables: dict[str, str],
                                                             command: str, effect: str | None) -> None:
    image = interconnect.baked(dockerfile, None)
    assert _effect(f"{command} python train.py", variables=variables, image=image) == effect


def test_the_run_overrides_what_the_image_bakes() -> None:
    image = interconnect.baked(BASE + "ENV NCCL_IB_DISABLE=1\nRUN echo NCCL_NET=Socket > /etc/nccl.conf\n", None)
    assert _effect(variables={"NCCL_IB_DISABLE": "0", "NCCL_NET": "IB"}, image=image) is None


def test_copy_reads_config_files_from_the_context_never_outside(tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    (context / "conf").mkdir(parents=True)
    (context / "conf" / "nccl.conf").write_text("NCCL_DEBUG=WARN\nNCCL_IB_HCA=^mlx5\n")
    (tmp_path / "outside.conf").write_text("NCCL_IB_DISABLE=1\n")
    (context / "sneaky.conf").symlink_to(tmp_path / "outside.conf")
    inside = interconnect.baked(BASE + "COPY conf/nccl.conf /etc/nccl.conf\n", context)
    assert _effect(image=inside) == "off"
    for source in ("../outside.conf", "sneaky.conf"):
        assert _effect(image=interconnect.baked(BASE + f"COPY {source} /etc/nccl.conf\n", context)) is None
    folder = interconnect.baked(BASE + "COPY conf/ /etc/\n", context)
    assert [(f.path, f.how) for f in folder.files] == [("/etc/nccl.conf", "COPY conf/ at line 2")]


@pytest.mark.parametrize(
    ("dockerfile", "effect"),
    [
        ("ENV NCCL_CONF_FILE=/opt/conf/n.conf\nCOPY conf/n.conf /opt/conf/n.conf\n", "off"),
        ("COPY conf/n.conf /opt/conf/\nENV NCCL_CONF_FILE=/opt/conf/n.conf\n", "off"),
        ("COPY conf/ /opt/conf/\nENV NCCL_CONF_FILE=/opt/conf/n.conf\n", "off"),
        ("COPY conf/*.conf /opt/conf/\nENV NCCL_CONF_FILE=/opt/conf/n.conf\n", "off"),
        ("WORKDIR /opt\nCOPY conf conf\nENV OMPI_MCA_mca_base_param_files=/opt/conf/p.conf\n", "off"),
        ("COPY conf/n.conf /opt/n.conf\nFROM base AS final\nENV NCCL_CONF_FILE=/opt/n.conf\n", "off"),
        ("ENV NCCL_CONF_FILE=/opt/conf/n.conf\nCOPY conf/n.conf /srv/n.conf\n", None),  # not where it is named
        ("ENV NCCL_CONF_FILE=/opt/conf/n.conf\nCOPY conf/p.conf /opt/conf/n.conf\n", None),  # an MCA file's text
    ],
)
def test_a_file_the_image_s_environment_names_is_read_from_the_context(tmp_path: Path, dockerfile: str,
                                                                       effect: str | None) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "n.conf").write_text("NCCL_IB_DISABLE=1\n")
    (tmp_path / "conf" / "p.conf").write_text("pml = ob1\n")
    text = BASE.replace("\n", " AS base\n") + dockerfile
    assert _effect(image=interconnect.baked(text, tmp_path)) == effect


@pytest.mark.parametrize(
    ("dockerfile", "evaluations"),
    [
        ("ENV NCCL_CONF_FILE=/opt/n.conf\nRUN echo NCCL_NET=Socket > /opt/n.conf\n", 1),  # nothing from the context
        ("ENV NCCL_CONF_FILE=/etc/nccl.conf\nCOPY conf/ /etc/\n", 1),  # a path read the first time
        ("ENV NCCL_CONF_FILE=/opt/n.conf\nCOPY conf/ /srv/\n", 1),
        ("ENV NCCL_CONF_FILE=/opt/n.conf\nCOPY conf/ /opt/\n", 2),
        ("ENV NCCL_CONF_FILE=/opt/n.conf\nCOPY conf/n.conf /\n", 2),
    ],
)
def test_the_context_is_read_again_only_for_a_named_file_a_copy_may_bring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dockerfile: str, evaluations: int) -> None:
    calls: list[object] = []
    evaluate = interconnect.dockerfile.evaluate

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(interconnect.dockerfile, "evaluate", counted)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "n.conf").write_text("NCCL_IB_DISABLE=1\n")
    interconnect.baked(BASE + dockerfile, tmp_path)
    assert len(calls) == evaluations


# ---- through the rules ------------------------------------------------------------------------------


def _messages(b: Baseline, rule: str) -> list[str]:
    return [f.message for f in b.evaluate().findings if f.rule.id == rule and f.owner.name == RUN]


def _set(b: Baseline, variables: dict[str, str] | None = None, command: str | None = None,
         baked: list[tuple[str, str, str, bool]] | None = None, docker_args: str | None = None,
         files: list[tuple[str, str, str, bool]] | None = None) -> Baseline:
    props = b.run(RUN)
    if variables:
        props["spec"].setdefault("environment_variables", {}).update(variables)
    if command:
        props["spec"]["command"] = command
    if docker_args:
        props["spec"]["resources"]["docker_args"] = docker_args
    if baked is not None:
        props["environment"]["fabric_settings"] = [list(s) for s in baked]
    if files is not None:
        props["environment"]["fabric_files"] = [list(f) for f in files]
    return b


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"variables": {"NCCL_IB_DISABLE": "0x1"}}, "NCCL_IB_DISABLE='0x1' (environment_variables) disables"),
        ({"variables": {"NCCL_IB_DISABLE": "2"}}, "NCCL reads it as 2"),
        ({"variables": {"NCCL_IB_HCA": "^mlx5"}}, "excludes every Mellanox (mlx5) HCA"),
        ({"variables": {"OMPI_MCA_pml": "ob1"}}, "MPI traffic goes over TCP"),
        ({"command": "env NCCL_NET=Socket python train.py"},
         "NCCL_NET='Socket' (the command, line 1) makes NCCL use TCP"),
        ({"command": "export NCCL_IB_DISABLE=1 # NCCL_IB_DISABLE=0\npython train.py"},
         "NCCL_IB_DISABLE='1' (the command, line 1) disables"),
        ({"docker_args": "-e NCCL_IB_DISABLE=1"}, "NCCL_IB_DISABLE='1' (docker_args) disables"),
        ({"baked": [("NCCL_IB_DISABLE", "1", "Dockerfile ENV at line 2", True)]},
         "(Dockerfile ENV at line 2) disables InfiniBand"),
        ({"files": [("/etc/nccl.conf", "NCCL_NET=Socket\n", "COPY conf/nccl.conf at line 3", True)]},
         "NCCL_NET='Socket' (/etc/nccl.conf (COPY conf/nccl.conf at line 3)) makes NCCL use TCP"),
    ],
)
def test_spellings_that_switch_infiniband_off_are_mandatory(change: dict[str, object], says: str) -> None:
    b = _set(baseline(), **change)  # type: ignore[arg-type]
    (message,) = _messages(b, "run-infiniband-disabled")
    assert says in message
    assert not b.evaluate().passed


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"variables": {"NCCL_IB_DISABLE": "true"}}, "has no effect: NCCL reads it as 0"),
        ({"command": "export NCCL_IB_DISABLE=$FLAG; python train.py"}, "only known at run time"),
        ({"command": "source env.sh && python train.py"}, "cannot tell: `source env.sh` at line 1"),
        ({"docker_args": "--env-file env.list"}, "docker_args --env-file env.list"),
        ({"baked": [("UCX_TLS", "${TLS}", "Dockerfile ENV at line 3", False)]}, "only known at run time"),
    ],
)
def test_spellings_without_effect_or_unknown_are_advisory(change: dict[str, object], says: str) -> None:
    b = _set(baseline(), **change)  # type: ignore[arg-type]
    assert _messages(b, "run-infiniband-disabled") == []
    assert any(says in m for m in _messages(b, "run-infiniband-setting-unclear"))
    assert b.evaluate().passed


def test_single_node_runs_are_not_judged() -> None:
    b = _set(baseline(), variables={"NCCL_IB_DISABLE": "0x1"})
    b.run(RUN)["spec"]["resources"]["instance_count"] = 1
    assert _messages(b, "run-infiniband-disabled") == []


def test_a_built_environment_s_config_file_reaches_the_rule(tmp_path: Path) -> None:
    """End to end: a build context whose Dockerfile writes /etc/nccl.conf, through resolve and the rule."""
    config = dev_config()
    project = make_project(tmp_path / "project", config)
    dockerfile = project / "environments" / "tensorflow" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "\nRUN <<EOF\necho NCCL_IB_DISABLE=1 >> /etc/nccl.conf\nEOF\n")
    stack = from_stackfile(read(project / "Pulumi.test.yaml"), project)
    runs = {r.name: r for r in resolve_all(stack, project)}
    run = runs["mnist-tf-multiworker"]  # 2 nodes of gpu-a100 (ND96asr_v4, InfiniBand), the tf-gpu build
    assert (run.instance_count, run.cluster.infiniband) == (2, True)
    assert [path for path, *_ in run.environment.fabric_files] == ["/etc/nccl.conf"]
    (message,) = run_infiniband_disabled.check(run)
    assert "NCCL_IB_DISABLE='1' (/etc/nccl.conf (RUN at line" in message
    assert run_infiniband_setting_unclear.check(run) == []


_CODE = {"env.sh": "export NCCL_IB_DISABLE=1\n", "zero.sh": "export NCCL_IB_DISABLE=0\n",
         ".deepspeed_env": " NCCL_IB_DISABLE = 1 \nOMPI_MCA_pml=ob1\n", "ucx.env": "UCX_TLS=tcp\n",
         "conf/mca.conf": "pml = ob1\n"}


@pytest.mark.parametrize(
    ("command", "variables", "effect"),
    [
        ("python train.py", {"BASH_ENV": "env.sh"}, "off"),  # the command's own bash sources it first
        ("python train.py", {"BASH_ENV": "zero.sh"}, None),
        ("python train.py", {"BASH_ENV": "missing.sh"}, "cannot tell"),
        ("BASH_ENV=env.sh dash -c 'python train.py'", {}, None),
        ("deepspeed -H hosts train.py", {}, "off"),  # add_export strips both sides; OMPI_ is not exported
        ("deepspeed --hostfile=hosts train.py", {}, "off"),
        ("deepspeed --hostfile hosts --no_ssh train.py", {}, None),
        ("deepspeed train.py", {}, None),
        ("DS_ENV_FILE=ucx.env deepspeed -H hosts train.py", {}, "off"),
        ("deepspeed -H hosts train.py", {"DS_ENV_FILE": "none.env"}, None),
        ("echo NCCL_IB_DISABLE=1 > ~/.deepspeed_env; deepspeed -H hosts train.py", {}, "off"),
        ("mpiexec -genv NCCL_NET Socket -n 16 python train.py", {}, "off"),
        ("mpiexec -env UCX_TLS tcp -n 16 python train.py", {}, "off"),
        ("mpiexec -genv $NAME 1 -n 16 python train.py", {}, "cannot tell"),
        ("mpiexec -genv NCCL_DEBUG INFO -n 16 python train.py", {}, None),
        ("mpirun -np 16 python train.py", {"OMPI_MCA_mca_base_param_files": "conf/mca.conf"}, "off"),
        ("cd conf && NCCL_CONF_FILE=/proc/self/cwd/../x.conf python ../train.py", {}, "cannot tell"),
    ],
)
def test_what_scripts_launchers_and_the_code_folder_give(command: str, variables: dict[str, str],
                                                       effect: str | None) -> None:
    """Issue 36 point 4, at the interconnect's level: ``BASH_ENV`` (bash(1) INVOCATION), DeepSpeed's
    ``.deepspeed_env`` (deepspeed/launcher/runner.py: with a hostfile, exported to every node), Hydra's
    ``-genv``/``-env``, Open MPI's parameter files and NCCL's configuration file named through ``/proc/self/cwd``,
    with the code folder's files given by a reader."""
    findings = assess(command, variables=variables, read_file=_CODE.get)
    effects = {f.effect for f in findings}
    assert next((e for e in ("off", "cannot tell", "no effect") if e in effects), None) == effect, findings


def test_an_image_bash_env_is_sourced_from_the_image_s_files() -> None:
    """The hook for an image's ``ENV BASH_ENV``: the setting seeds the command's bash, which sources the file
    from the image's files when they hold it; a file they do not hold cannot be told."""
    setting = (interconnect.Setting("BASH_ENV", "/etc/bashenv.sh", "Dockerfile ENV at line 2"),)
    held = interconnect.Baked(settings=setting, files=(interconnect.ConfigFile(
        "/etc/bashenv.sh", "export NCCL_NET=Socket\n", "RUN at line 3"),))
    assert _effect(image=held) == "off"
    assert _effect(image=interconnect.Baked(settings=setting)) == "cannot tell"


@pytest.mark.parametrize("cached", [True, False])
def test_runs_differing_in_one_input_each_get_their_own_verdict(monkeypatch: pytest.MonkeyPatch, cached: bool) -> None:
    # The rules keep assess's findings per distinct input (policies.rules.fabric._assessed): a run judged after one
    # that differs in a single input (a variable, the command, docker_args, the image) is judged on its own, and as
    # it is without the cache.
    from policies.rules import fabric

    if not cached:
        monkeypatch.setattr(fabric, "_CACHED_COMMAND", -1)
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({}, None),
        ({"variables": {"NCCL_IB_DISABLE": "1"}}, "NCCL_IB_DISABLE='1' (environment_variables) disables"),
        ({"variables": {"NCCL_IB_DISABLE": "0"}}, None),
        ({"variables": {"NCCL_IB_DISABLE": "true"}}, None),
        ({"command": "export NCCL_IB_DISABLE=1\npython train.py"}, "NCCL_IB_DISABLE='1' (the command, line 1)"),
        ({"docker_args": "-e NCCL_IB_DISABLE=1"}, "NCCL_IB_DISABLE='1' (docker_args) disables"),
        ({"baked": [("NCCL_IB_DISABLE", "1", "Dockerfile ENV at line 2", True)]}, "(Dockerfile ENV at line 2)"),
    ]
    for _ in range(2):  # the second time from the cache
        for change, says in cases:
            b = _set(baseline(), **change)
            messages = _messages(b, "run-infiniband-disabled")
            assert (says is None and messages == []) or (says is not None and says in messages[0]), (change, messages)
            unclear = _messages(b, "run-infiniband-setting-unclear")
            assert bool(unclear) == (change == {"variables": {"NCCL_IB_DISABLE": "true"}}), (change, unclear)
