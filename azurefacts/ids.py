"""Small Azure facts shared by the components: built-in role ids and ARM id helpers.

Kept in one place so a role GUID or an id format is written once.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

# Built-in role definition ids (Microsoft Learn, "Azure built-in roles").
CONTRIBUTOR = "b24988ac-6180-42a0-ab88-20f7382dd24c"
KEY_VAULT_ADMINISTRATOR = "00482a5a-887f-4fb3-b363-3b7fe8e74483"
STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
STORAGE_FILE_DATA_PRIVILEGED_CONTRIBUTOR = "69566ab7-960f-475b-8e7c-b3118f30c6bd"

PRIVATE_DNS_ZONES: dict[str, tuple[str, ...]] = {
    "amlworkspace": ("privatelink.api.azureml.ms", "privatelink.notebooks.azure.net"),
    "blob": ("privatelink.blob.core.windows.net",),
    "file": ("privatelink.file.core.windows.net",),
    "vault": ("privatelink.vaultcore.azure.net",),
    "registry": ("privatelink.azurecr.io",),
}
"""Private endpoint sub-resource (group id) -> the private DNS zones Azure documents for it (Microsoft Learn,
"Azure Private Endpoint private DNS zone values": Machine Learning, Storage blob/file, Key Vault, Container
Registry)."""

STORAGE_FIREWALL_CODES = frozenset({"AuthorizationFailure", "AuthorizationSourceIPMismatch"})
"""Blob REST error codes (``x-ms-error-code``) of a request the storage account's network rules refused, as
opposed to a missing data role (``AuthorizationPermissionMismatch``). Azure Storage Explorer reports a 403
``AuthorizationFailure`` as "'Firewalls & virtual networks' settings may be blocking access"
(microsoft/AzureStorageExplorer#8183); the recorded body is in ``tests/fixtures/blob-rest/``."""


def storage_public_network_access(operator_ip_ranges: Sequence[str]) -> str:
    """The workspace storage account's ``publicNetworkAccess``: ``Disabled``, unless operator ranges must reach
    its firewall (whose default action denies all other public traffic either way)."""
    return "Enabled" if operator_ip_ranges else "Disabled"


def firewall_refusal(account: str, *, command: str) -> str:
    """What a storage firewall's refusal means and the two fixes, for a ``command`` run outside the network."""
    then = "" if command == "pulumi up" else " (then `pulumi up`)"
    return (f"storage account {account} refused the request at its firewall: add this machine's public "
            f"address to network.operator_ip_ranges{then} or run `{command}` from inside the network")


UNKNOWN_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
"""The all-zero GUID, no real subscription: what the offline plan's engine answers when the stack does not
pin ``azure-native:subscriptionId`` (then there is no deployment subscription to compare with)."""

# Microsoft first-party application ids (Microsoft Learn, "Verify first-party Microsoft applications in
# sign-in reports"): a token from the Azure CLI or Azure PowerShell belongs to a signed-in user.
USER_SIGN_IN_APPS = frozenset({
    "04b07795-8ddb-461a-bbee-02f9e1bf7b46",  # Microsoft Azure CLI
    "1950a258-227b-4e31-a9cf-717495945fc2",  # Microsoft Azure PowerShell
})

# A fixed namespace so role-assignment names (which must be GUIDs) are stable across runs and machines.
_NAMESPACE = uuid.UUID("6f1c7d2e-1b7a-4d4e-9a53-7a0d3c1f2b90")


def role_definition_id(subscription_id: str, role: str) -> str:
    return f"/subscriptions/{subscription_id}/providers/Microsoft.Authorization/roleDefinitions/{role}"


def principal_type(client_id: str, declared: str | None = None) -> str:
    """The role-assignment principalType of the caller ``getClientConfig`` describes."""
    if declared:
        return declared
    return "User" if client_id in USER_SIGN_IN_APPS else "ServicePrincipal"


def stable_guid(*parts: str) -> str:
    """A deterministic GUID for names Azure requires to be GUIDs (role assignments)."""
    return str(uuid.uuid5(_NAMESPACE, "/".join(parts)))


def identity_type(cli_type: str) -> str:
    """CLI v2 identity vocabulary (``system_assigned,user_assigned``) to ARM's (``SystemAssigned,UserAssigned``)."""
    return ",".join(
        {"system_assigned": "SystemAssigned", "user_assigned": "UserAssigned"}[part.strip()]
        for part in cli_type.split(",")
    )


def iso_duration(seconds: int) -> str:
    """Seconds as the ISO 8601 duration AmlCompute's scale settings take (``PT15M``)."""
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    out = "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "") + (f"{secs}S" if secs else "")
    return out if out != "PT" else "PT0S"
