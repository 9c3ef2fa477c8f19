"""The launch contract per distribution type, as pure functions (no process started)."""

from __future__ import annotations

import json

import pytest

from analysis import contract


@pytest.mark.parametrize(
    ("nodes", "per_node", "node", "local", "rank"),
    [(1, 1, 0, 0, 0), (2, 2, 0, 1, 1), (2, 2, 1, 0, 2), (2, 2, 1, 1, 3), (4, 8, 3, 7, 31)],
)
def test_pytorch_contract_numbers_processes_node_by_node(nodes: int, per_node: int, node: int, local: int,
                                                        rank: int) -> None:
    env = contract.pytorch_env(nodes=nodes, procs_per_node=per_node, node_rank=node, local_rank=local,
                               master_addr="10.0.0.4", master_port=6105)
    assert env == {
        "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "WORLD_SIZE": str(nodes * per_node),
        "NODE_RANK": str(node), "RANK": str(rank), "LOCAL_RANK": str(local),
    }


def test_pytorch_contract_is_a_bijection_onto_ranks() -> None:
    ranks = [
        contract.pytorch_env(nodes=3, procs_per_node=4, node_rank=n, local_rank=k, master_addr="a", master_port=1)
        ["RANK"]
        for n in range(3) for k in range(4)
    ]
    assert sorted(map(int, ranks)) == list(range(12))


@pytest.mark.parametrize(("node", "local"), [(2, 0), (-1, 0), (0, 2)])
def test_pytorch_contract_rejects_ranks_outside_the_topology(node: int, local: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        contract.pytorch_env(nodes=2, procs_per_node=2, node_rank=node, local_rank=local, master_addr="a",
                             master_port=1)


@pytest.mark.parametrize(
    ("rank", "nodes", "per_node", "local"),
    [(0, 1, 1, 0), (1, 2, 2, 1), (2, 2, 2, 0), (3, 2, 2, 1), (13, 2, 8, 5)],
)
def test_mpi_contract_is_open_mpis_view_of_a_node_with_per_node_slots(rank: int, nodes: int, per_node: int,
                                                                     local: int) -> None:
    env = contract.mpi_rank_env(rank=rank, nodes=nodes, procs_per_node=per_node)
    assert env == {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(nodes * per_node),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_node),
        # Open MPI's NODE_RANK is the rank within the node, not the node's index.
        "OMPI_COMM_WORLD_NODE_RANK": str(local),
    }


def test_mpi_master_node_is_addr_colon_port() -> None:
    assert contract.mpi_job_env(master_addr="10.0.0.4", master_port=6105) == {"AZ_BATCH_MASTER_NODE": "10.0.0.4:6105"}


@pytest.mark.parametrize(
    ("servers", "empty_ps", "cluster"),
    [
        ([], False, {"worker": ["w0:1", "w1:2"]}),
        ([], True, {"worker": ["w0:1", "w1:2"], "ps": []}),
        (["p0:3"], False, {"worker": ["w0:1", "w1:2"], "ps": ["p0:3"]}),
        (["p0:3"], True, {"worker": ["w0:1", "w1:2"], "ps": ["p0:3"]}),
    ],
)
def test_tf_cluster_has_ps_only_when_there_are_servers_or_the_quirk_is_asked(
    servers: list[str], empty_ps: bool, cluster: dict[str, list[str]]
) -> None:
    assert contract.tf_cluster(["w0:1", "w1:2"], servers, empty_ps=empty_ps) == cluster


def test_tf_config_names_the_task() -> None:
    cluster = contract.tf_cluster(["w0:1", "w1:2"], ["p0:3"], empty_ps=False)
    assert json.loads(contract.tf_config(cluster, task_type="worker", index=1)) == {
        "cluster": {"worker": ["w0:1", "w1:2"], "ps": ["p0:3"]},
        "task": {"type": "worker", "index": 1},
    }
    assert json.loads(contract.tf_config(cluster, task_type="ps", index=0))["task"] == {"type": "ps", "index": 0}
    with pytest.raises(ValueError, match="out of range"):
        contract.tf_config(cluster, task_type="worker", index=2)
    with pytest.raises(ValueError, match="not in the cluster"):
        contract.tf_config(cluster, task_type="chief", index=0)


def test_inherited_launcher_variables_are_dropped_user_settings_kept() -> None:
    inherited = {
        "PATH": "/bin", "RANK": "5", "WORLD_SIZE": "9", "TF_CONFIG": "{}", "AZ_BATCH_MASTER_NODE": "x:1",
        "OMPI_COMM_WORLD_RANK": "3", "OMPI_MCA_btl_tcp_if_include": "eth0", "AMLGPU_EMULATE_NODES": "2",
        "NCCL_DEBUG": "INFO",
    }
    assert contract.strip_launcher_variables(inherited) == {
        "PATH": "/bin", "OMPI_MCA_btl_tcp_if_include": "eth0", "NCCL_DEBUG": "INFO",
    }
