"""Bearer tokens: ``COMPACTOR_API_TOKENS`` (a JSON object, token -> tenant) and the start checks.

A token is compared in constant time: each configured token's SHA-256 digest against the
presented one's with :func:`hmac.compare_digest`, every token every time, so neither the
position of a match nor a common prefix shows in the response time.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from dataclasses import dataclass

from pydantic import SecretStr

from api_client.contract.errors import ConfigurationError
from api_client.contract.keys import DEFAULT_TENANT, TENANT_NAME

__all__ = ["DEFAULT_TENANT", "TokenTable", "check_start", "is_loopback"]



def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class TokenTable:
    """Digests of the configured tokens and their tenants (the tokens themselves are dropped)."""

    entries: tuple[tuple[bytes, str], ...]

    @classmethod
    def parse(cls, raw: SecretStr | None) -> TokenTable:
        if raw is None:
            return cls(())
        try:
            table = json.loads(raw.get_secret_value())
        except ValueError:
            raise ConfigurationError("COMPACTOR_API_TOKENS is not JSON: give an object "
                                     '{"<token>": "default"}') from None
        if not isinstance(table, dict) or not table:
            raise ConfigurationError('COMPACTOR_API_TOKENS must be a non-empty JSON object '
                                     '{"<token>": "<tenant>"}')
        entries = []
        for token, tenant in table.items():
            if len(token) < 16 or token != token.strip():
                raise ConfigurationError("COMPACTOR_API_TOKENS: every token needs 16 characters "
                                         "or more, without surrounding spaces")
            if not isinstance(tenant, str) or not TENANT_NAME.fullmatch(tenant):
                raise ConfigurationError(f"COMPACTOR_API_TOKENS: tenant {tenant!r}: 1-63 "
                                         "characters of a-z 0-9 _ -, starting with a letter "
                                         "or digit")
            entries.append((_digest(token), tenant))
        return cls(tuple(entries))

    def tenants(self) -> list[str]:
        """Every tenant a token names, and the default one (the open paths' and, with no
        token, every request's)."""
        return sorted({DEFAULT_TENANT, *(tenant for _, tenant in self.entries)})

    def tenant(self, presented: str) -> str | None:
        """The tenant of ``presented``, or None; always compares against every token."""
        given, found = _digest(presented), None
        for digest, tenant in self.entries:
            if hmac.compare_digest(given, digest):
                found = tenant
        return found


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_start(tokens: TokenTable, host: str, insecure_no_auth: bool) -> None:
    """Refuse a server anyone who reaches it could use: no token, unless told so on loopback."""
    if tokens.entries and insecure_no_auth:
        raise ConfigurationError("--insecure-no-auth with COMPACTOR_API_TOKENS set: drop one")
    if tokens.entries:
        return
    if not insecure_no_auth:
        raise ConfigurationError('no API token: set COMPACTOR_API_TOKENS=\'{"<token>": '
                                 '"default"}\' (or --insecure-no-auth on a loopback address)')
    if not is_loopback(host):
        raise ConfigurationError(f"--insecure-no-auth only on a loopback address, not {host!r}: "
                                 "set COMPACTOR_API_TOKENS to serve beyond this machine")
